"""`golem-sim report`: a self-contained HTML page whose every image is a PNG that a real browser loads."""
from __future__ import annotations

import base64
import html
import os
import re
import shutil
import struct
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import polars as pl
import pytest

from conftest import shared_text_run
from sim import analysis as A
from sim.report import render_report

SMALL_CRASH = """
name: small_crash
description: A test-sized flash crash; two frail Golems run out of budget.
duration: 2d
seed: 5
market:
  initial_regime: calm
  regimes:
    calm: {drift: 0.0, vol: 0.003, mean_duration_s: 1.0e9}
    crash: {drift: -0.01, vol: 0.012, jump_rate: 0.05, jump_size: -0.03, mean_duration_s: 1.0e9}
    recovery: {drift: 0.0004, vol: 0.005, mean_duration_s: 1.0e9}
  regime_schedule:
    - {at: 20h, regime: crash}
    - {at: 22h, regime: recovery}
  events:
    - {kind: flash_crash, at: 20h, asset: ETH, duration: 2h, severity: high, impact: -0.10}
golems:
  - {count: 4, clade: longs, asset: ETH, strategy: momentum, exposure: 0.8}
  - {count: 2, clade: frail, asset: ETH, strategy: mean_reversion, budget: 3}
"""
CALM = """
name: small_calm
duration: 12h
seed: 1
golems:
  - {count: 3, clade: solo, asset: BTC}
"""


# shared with tests/test_report_charts.py (conftest.shared_text_run)
@pytest.fixture(scope="module")
def crash_run(tmp_path_factory) -> Path:
    return shared_text_run(tmp_path_factory, SMALL_CRASH, "crash")


@pytest.fixture(scope="module")
def calm_run(tmp_path_factory) -> Path:
    return shared_text_run(tmp_path_factory, CALM, "calm")


@pytest.fixture(scope="module")
def report(crash_run, tmp_path_factory) -> Path:
    return render_report(crash_run, tmp_path_factory.mktemp("rep") / "report.html")


class Refs(HTMLParser):
    """Every URL-bearing attribute of the page, and the <img> sources."""

    def __init__(self):
        super().__init__()
        self.urls: list[tuple[str, str, str]] = []
        self.imgs: list[str] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for k, v in attrs:
            if k in ("src", "href", "srcset", "data", "poster", "action", "background") and v is not None:
                self.urls.append((tag, k, v))
            if tag == "img" and k == "src":
                self.imgs.append(v)


def _png_size(uri: str) -> tuple[int, int]:
    assert uri.startswith("data:image/png;base64,"), uri[:40]
    raw = base64.b64decode(uri.split(",", 1)[1], validate=True)
    assert raw[:8] == b"\x89PNG\r\n\x1a\n" and raw[12:16] == b"IHDR"
    assert raw[-8:-4] == b"IEND"
    return struct.unpack(">II", raw[16:24])


def test_report_is_self_contained(report):
    text = report.read_text()
    p = Refs()
    p.feed(text)
    assert len(p.imgs) >= 8
    for uri in p.imgs:
        w, h = _png_size(uri)
        assert w > 100 and h > 50
    external = [(t, k, v[:60]) for t, k, v in p.urls if not v.startswith("data:image/png;base64,")]
    assert external == []
    assert "link" not in p.tags and "iframe" not in p.tags
    assert not re.search(r"url\(|@import|https?://", text.split("<script>")[0].split("<style>")[1].split("</style>")[0])
    for heading in ("Price, regimes and flashbulbs", "Emotion and mood per Clade", "Emotions", "Mood congruence",
                    "Curator, contrarian, dream and reflex", "Contagion wave", "Deaths", "Golems", "Grimoire map"):
        assert f"<h2>{heading}" in text


def test_report_content_follows_the_run(crash_run, report):
    text = report.read_text()
    assert 'alt="emotion and mood (PAD) per Clade"' in text
    bands = A.pad_bands(crash_run).collect()
    assert {"mood_p_median", "mood_a_median", "mood_d_median"} <= set(bands.columns)
    life = A.life_summaries(crash_run).collect()
    dead = life.filter(~pl.col("alive"))
    assert dead.height == 2 and "no Golem died" not in text
    assert text.count("<td class=\"l\">budget</td>") >= 2          # cause of death in the deaths table
    ev = pl.read_parquet(crash_run / "events" / "*.parquet")
    counts = {k: ev.filter(pl.col("kind") == k).height for k in A.ACTIVITY_KINDS}
    note = ", ".join(f"{k}: {n if n else 'none recorded'}" for k, n in counts.items())
    assert (note in text) if any(counts.values()) else ("none recorded" in text)
    assert "6 of 6 Golems" in text


def test_report_compare_side_by_side(crash_run, calm_run, tmp_path):
    out = render_report(crash_run, tmp_path / "cmp.html", compare=calm_run)
    text = out.read_text()
    p = Refs()
    p.feed(text)
    single = Refs()
    single.feed(render_report(crash_run, tmp_path / "one.html").read_text())
    assert text.count("class='row c2'") == 9
    assert len(p.imgs) > len(single.imgs)
    for uri in p.imgs:
        _png_size(uri)
    assert "crash vs calm" in text
    assert "<h3>crash</h3>" in text and "<h3>calm</h3>" in text


def test_cli_report(crash_run, tmp_path):
    from typer.testing import CliRunner
    from sim.cli import app
    res = CliRunner().invoke(app, ["report", str(crash_run), "--out", str(tmp_path / "r.html"), "-q"])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "r.html").stat().st_size > 10_000
    res = CliRunner().invoke(app, ["report", str(tmp_path / "nope")])
    assert res.exit_code == 2


def test_analysis_agrees_with_a_real_run(crash_run):
    """Cross-checks on engine output: the metrics read what the engine recorded."""
    r = pl.read_parquet(crash_run / "retrievals" / "*.parquet")
    mc = A.mood_congruence(crash_run).collect()
    want = r.filter(pl.col("pool_n") > pl.col("ids").list.len()).with_columns(
        (pl.col("served_mean_emotional") - pl.col("pool_mean_emotional")).fill_nan(None).alias("m")).drop_nulls("m")
    assert mc.height == want.height
    assert mc["mood_congruence"].is_between(-1, 1).all()
    ev = pl.read_parquet(crash_run / "events" / "*.parquet").filter(pl.col("kind") == "contagion")
    w = A.contagion_waves(crash_run).collect()
    assert w.height == ev.height and w["da"].sum() == pytest.approx(ev["value"].sum())
    life = A.life_summaries(crash_run).collect()
    assert life["ticks"].sum() == pl.read_parquet(crash_run / "heartbeats" / "*.parquet").height
    ep = A.lock_in_episodes(crash_run, threshold=0.3, min_ticks=6).collect()
    assert (ep["length"] >= 6).all() and (ep["mean_bias"] > 0.3).all()
    for f in (A.grimoire_valence_skew, A.salience_rank_lift, A.contrarian_summary, A.contagion_pushes):
        f(crash_run).collect()


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(_chromium() is None and not os.environ.get("CI"), reason="chromium not installed (CI installs it)")
def test_report_loads_in_headless_browser(report):
    exe = _chromium()
    assert exe, "chromium must be on PATH in CI (.ci/run installs the Debian package)"
    n = Refs()
    n.feed(report.read_text())
    cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run", "--dump-dom", report.resolve().as_uri()]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    m = re.search(r"loaded (\d+)/(\d+)", res.stdout)
    assert m, (res.stdout[-500:], res.stderr[-2000:])
    assert int(m.group(1)) == int(m.group(2)) == len(n.imgs)


@pytest.mark.skipif(_chromium() is None and not os.environ.get("CI"), reason="chromium not installed (CI installs it)")
def test_a_compare_report_fits_a_narrow_window(crash_run, calm_run, tmp_path):
    """Side by side, a wide table (the Golems') scrolls inside its column: in a 760 px window the page
    is no wider than the window."""
    out = render_report(crash_run, tmp_path / "c.html", compare=calm_run)
    cmd = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--window-size=760,900",
           "--dump-dom", out.resolve().as_uri()]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    m = re.search(r'data-width="(\d+)/(\d+)"', res.stdout)
    assert m, (res.stdout[-500:], res.stderr[-2000:])
    assert int(m.group(1)) <= int(m.group(2)), m.group(0)


def test_the_lock_in_panel_says_what_the_run_measured(crash_run, calm_run, report, tmp_path):
    """SPEC §2.9 lock-in panel: the holders' mood against the price; its caption's figures are
    `analysis.mood_recovery`'s on this run, and a compared run without a crash says so."""
    text = report.read_text()
    assert "<h2>Lock-in: the holders' mood through the crash and its recovery" in text
    alt = html.escape("holders' mood against the price through the crash and its recovery")
    assert f'alt="{alt}"' in text
    e = A.crash_episode(crash_run).collect().row(0, named=True)
    r = A.mood_recovery(crash_run).collect().row(0, named=True)
    assert e["depth"] <= -0.10
    assert f"ETH fell {-e['depth']:.1%}" in text
    if r["mood_recovery_s"] is None:
        assert "the price never got back to its pre-crash level" in text
    else:
        assert f"{r['mood_recovery_s'] / 3600:.1f} h after the price" in text
    both = render_report(crash_run, tmp_path / "cmp.html", compare=calm_run).read_text()
    assert "calm: no crash of 10% within 3 h" in both
    alone = render_report(calm_run, tmp_path / "calm.html").read_text()
    assert "no crash of 10% or more within 3 h to follow" in alone
