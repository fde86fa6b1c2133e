"""Sweeps: the same runs on every executor, failures recorded, finished runs reused,
Ctrl-C stops cleanly, and bad input is one line with exit status 2.

Tiny runs: scenarios/calm.yaml cut to 6 h, plus a scenario whose tape file is junk, which passes
validation and fails in the worker (a run-time failure), and `retrieval.top_k: "bad"`, which fails
validation in one combination only.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from sim import analysis as A
from sim import sweep as sw
from sim.cli import app

ROOT = Path(__file__).resolve().parents[1]
CALM = ROOT / "scenarios" / "calm.yaml"


def sweep_text(scenarios: list[str], seeds="[1, 2]", duration="6h") -> str:
    return f"""# a tiny sweep for the tests
scenarios: [{', '.join(scenarios)}]
grid:
  retrieval.top_k: [8, "bad"]
override_sets:
  - {{contrarian.enabled: true}}
  - {{contrarian.enabled: false}}
seeds: {seeds}
sets: {{duration: {duration}}}
"""


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("sweepfiles")
    (d / "junk.parquet").write_bytes(b"not parquet")
    (d / "broken.yaml").write_text(f"name: broken\nduration: 6h\nmarket: {{tape: {d / 'junk.parquet'}}}\n"
                                   "golems: [{count: 2}]\n")
    (d / "tiny.yaml").write_text(sweep_text([str(CALM), "broken.yaml"]))
    return d


@pytest.fixture(scope="module")
def pool_sweep(files, tmp_path_factory):
    out = tmp_path_factory.mktemp("pool") / "sweep"
    return sw.run_sweep(files / "tiny.yaml", out, executor=sw.LocalPool(2), environ={})


@pytest.fixture(scope="module")
def dask_sweep(files, tmp_path_factory):
    pytest.importorskip("dask.distributed")
    out = tmp_path_factory.mktemp("dask") / "sweep"
    return sw.run_sweep(files / "tiny.yaml", out, executor=sw.DaskExecutor(n_local=2), environ={})


def manifests(out: Path) -> dict[str, dict]:
    return {str(p.parent.relative_to(out)): json.loads(p.read_text()) for p in sorted(out.glob("runs/**/manifest.json"))}


def test_every_executor_gives_the_same_runs(pool_sweep, dask_sweep, tmp_path):
    a, b = manifests(pool_sweep.out), manifests(dask_sweep.out)
    assert len(a) == 4 and a.keys() == b.keys()
    for rel in a:
        assert a[rel]["status"] == b[rel]["status"] == "complete"
        assert a[rel]["hashes"] == b[rel]["hashes"], rel
    # ... and the same as a plain in-process run of the same scenario, seed and overrides
    from sim.run import execute
    rel = "runs/calm/contrarian.enabled=true,retrieval.top_k=8/seed=2"
    direct = execute(CALM, tmp_path / "direct", seed=2, sets=a[rel]["sets"], environ={}).manifest
    assert direct["hashes"] == a[rel]["hashes"]
    sa = sw.read_summary(pool_sweep.out).filter(pl.col("status") == "ok").collect()
    sb = sw.read_summary(dask_sweep.out).filter(pl.col("status") == "ok").collect()
    assert sa["heartbeats_hash"].to_list() == sb["heartbeats_hash"].to_list()
    assert sa["heartbeats_hash"].null_count() == 0


def test_failures_are_recorded_and_the_rest_complete(pool_sweep):
    assert pool_sweep.planned == 16 and len(pool_sweep.rows) == 16 and pool_sweep.ok == 4
    s = sw.read_summary(pool_sweep.out).collect()
    assert s.height == 16
    # typed partition columns from the hive paths
    assert s.schema["contrarian.enabled"] == pl.Boolean and s.schema["retrieval.top_k"] == pl.String
    assert (pool_sweep.out / "summary" / "scenario=calm" / "contrarian.enabled=true" / "retrieval.top_k=8").is_dir()
    bad = s.filter(pl.col("retrieval.top_k") == "bad")
    assert bad.height == 8 and set(bad["status"]) == {"failed"}
    assert all("retrieval.top_k" in e and "\n" not in e for e in bad["error"])
    tape = s.filter((pl.col("scenario") == "broken") & (pl.col("retrieval.top_k") == "8"))
    assert tape.height == 4 and set(tape["status"]) == {"failed"}
    assert all("junk.parquet" in e and "Parquet" in e for e in tape["error"])
    assert sorted(tape["seed"].to_list()) == [1, 1, 2, 2]
    assert tape["overrides"].to_list()[0][0].startswith("contrarian.enabled=")
    ok = s.filter(pl.col("status") == "ok")
    assert ok.height == 4 and set(ok["scenario"]) == {"calm"}
    for col in ("wall_s", "golem_ticks", "pnl", "pnl_pct", "deaths", "flashbulbs", "heartbeats_hash", "content_hash"):
        assert ok[col].null_count() == 0, col
    # a bias is measured only where some retrieval chose (a pool larger than top-k); else it is null, not 0
    for col in ("mean_mood_congruence", "mean_valence_bias", "lock_in_share"):
        assert (ok[col].is_null() == (ok["retrievals"] == 0)).all() and ok[col].null_count() < 4, col
    assert (ok["golem_ticks"] > 0).all() and ok["error"].null_count() == 4


def test_analysis_reads_the_whole_sweep_lazily(pool_sweep):
    lf = A.bias_summary(pool_sweep.out)
    assert isinstance(lf, pl.LazyFrame)
    b = lf.collect()
    assert b.height == 4          # failed runs without tables are not run directories
    s = sw.read_summary(pool_sweep.out).filter(pl.col("status") == "ok").collect()
    j = s.join(b, left_on="run_path", right_on="run")
    assert j.height == 4
    assert (j["mean_valence_bias"] - j["mean_valence_bias_right"]).abs().max() < 1e-12
    assert len(sw.ok_runs(pool_sweep.out, **{"contrarian.enabled": True})) == 2


def test_rerun_skips_finished_runs(pool_sweep, files):
    before = {rel: (pool_sweep.out / rel / "manifest.json").stat().st_mtime_ns for rel in manifests(pool_sweep.out)}
    again = sw.run_sweep(files / "tiny.yaml", pool_sweep.out, executor=sw.LocalPool(2), environ={})
    after = {rel: (pool_sweep.out / rel / "manifest.json").stat().st_mtime_ns for rel in before}
    assert before == after
    s = sw.read_summary(pool_sweep.out).collect()
    ok = s.filter(pl.col("status") == "ok")
    assert ok.height == 4 and ok["reused"].all()
    assert again.reused == 4 and again.failed == 12
    assert not s.filter(pl.col("status") == "failed")["reused"].any()   # failures are tried again


def test_cli_sweep_reports_and_exits_1_on_failures(pool_sweep, files):
    r = CliRunner().invoke(app, ["sweep", str(files / "tiny.yaml"), "--out", str(pool_sweep.out)])
    assert r.exit_code == 1, r.output
    assert "16 runs: 4 ok (4 reused), 12 failed" in r.output
    assert "mood congr." in r.output and "calm" in r.output
    # the second setting of calm ran seeds 1 and 2 beside the baseline: a mean and a Δ with intervals
    assert "baseline" in r.output and "Δ " in r.output and "95% t interval" in r.output


def _row(combo, seed, pnl_pct, status="ok", scenario="s"):
    return {"scenario": scenario, "combo": combo, "overrides": [combo], "seed": seed, "status": status,
            "pnl_pct": pnl_pct, "mean_valence_bias": None, "mean_mood_congruence": 0.0, "lock_in_share": 0.0}


def test_summary_compares_each_setting_with_the_baseline_paired_by_seed():
    """Hand-computed: baseline pnl 0.1, 0.2, 0.3 (seeds 1-3); the other setting 0.2, 0.4, 0.3 and a
    failed seed 4. Its mean 0.3 has half-width t(0.975, 2) * 0.1 / sqrt(3); the differences 0.1,
    0.2, 0.0 (seed 4 unpaired) have mean 0.1, sd 0.1, the same half-width."""
    rows = [_row("base", 1, 0.1), _row("base", 2, 0.2), _row("base", 3, 0.3),
            _row("x=1", 3, 0.3), _row("x=1", 1, 0.2), _row("x=1", 2, 0.4), _row("x=1", 4, None, "failed")]
    out = sw.compare_settings(rows)
    assert [(r["combo"], r["runs"], r["failed"], r["baseline"]) for r in out] == \
        [("base", 3, 0, True), ("x=1", 4, 1, False)]
    half = 4.302652729911275 * 0.1 / 3 ** 0.5
    base, x = out[0]["metrics"]["pnl_pct"], out[1]["metrics"]["pnl_pct"]
    assert base["vs_base"] is None and base["mean"]["mean"] == pytest.approx(0.2)
    assert (base["mean"]["low"], base["mean"]["high"]) == pytest.approx((0.2 - half, 0.2 + half))
    d = x["vs_base"]
    assert d["n"] == 3 and d["mean"] == pytest.approx(0.1) and d["sd"] == pytest.approx(0.1)
    assert (d["low"], d["high"]) == pytest.approx((0.1 - half, 0.1 + half)) and d["sign"] == "0"
    assert out[1]["metrics"]["mean_valence_bias"]["mean"]["n"] == 0     # no figure: no interval, no crash
    from rich.console import Console
    con = Console(width=200, record=True)
    con.print(sw.summary_table(sw.SweepResult(Path("d"), rows, ["x"], 7)))
    text = con.export_text()
    assert f"+30.00 [{100 * (0.3 - half):+.2f}, {100 * (0.3 + half):+.2f}]" in text
    assert f"Δ +10.00 [{100 * (0.1 - half):+.2f}, {100 * (0.1 + half):+.2f}]" in text


BAD_SWEEPS = [
    ("scenarios: [x.yaml]\nseedz: [1]\n", ["s.yaml:2", "seedz: unknown key"]),
    ("scenarios: [CALM]\nseeds: {range: [5]}\n", ["s.yaml:2", "seeds", "range: [start, stop]"]),
    ("scenarios: [CALM]\nseeds: [1, 1]\n", ["s.yaml:2", "seeds", "distinct"]),
    ("scenarios: [CALM]\ngrid:\n  retrieval.top_k: []\n", ["s.yaml:3", "grid", "non-empty"]),
    ("scenarios: [CALM]\ngrid:\n  retreival.top_k: [1, 2]\n", ["s.yaml:3", "grid.retreival.top_k", "unknown key"]),
    ("scenarios: [CALM, nowhere.yaml]\n", ["s.yaml:1", "scenarios.1", "no such scenario file"]),
    ("scenarios: [CALM]\ngrid: {a.b: [1]}\noverride_sets: [{a.b: 2}]\n", ["s.yaml", "both in grid and in override_sets"]),
    ("grid: {retrieval.top_k: [1]}\n", ["s.yaml", "scenarios: required key is missing"]),
    ("scenarios: [CALM\n", ["s.yaml:2", "invalid YAML"]),
]


@pytest.mark.parametrize("text, expect", BAD_SWEEPS)
def test_malformed_sweep_file_is_one_line_exit_2(tmp_path, text, expect):
    f = tmp_path / "s.yaml"
    f.write_text(text.replace("CALM", str(CALM)))
    r = CliRunner().invoke(app, ["sweep", str(f), "--out", str(tmp_path / "out")])
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1, r.output
    for e in expect:
        assert e in r.output, (e, r.output)


def test_missing_dask_is_a_clear_error(monkeypatch, files, tmp_path):
    monkeypatch.setitem(sys.modules, "dask.distributed", None)     # import -> ImportError
    for opt in (["--dask-local", "2"], ["--scheduler", "tcp://127.0.0.1:8786"]):
        r = CliRunner().invoke(app, ["sweep", str(files / "tiny.yaml"), "--out", str(tmp_path / "o"), *opt])
        assert r.exit_code == 2, r.output
        assert r.output.strip() == f"error: {sw.DASK_MISSING}"
    assert not (tmp_path / "o").exists()


def test_ctrl_c_keeps_finished_runs_and_writes_their_summary(tmp_path):
    (tmp_path / "s.yaml").write_text(f"scenarios: [{CALM}]\nseeds: {{range: [0, 6]}}\nsets: {{duration: 2d}}\n")
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    p = subprocess.Popen([sys.executable, "-m", "sim.cli", "sweep", str(tmp_path / "s.yaml"), "--out", str(out),
                          "--workers", "2"], cwd=ROOT, env=env, start_new_session=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60

    def complete() -> list[Path]:
        return [m.parent for m in out.glob("runs/calm/base/*/manifest.json") if '"complete"' in m.read_text()]
    while not complete() and time.time() < deadline and p.poll() is None:
        time.sleep(0.1)
    os.killpg(p.pid, signal.SIGINT)          # what a terminal's Ctrl-C does
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert "interrupted:" in err and "Traceback" not in err, err
    s = sw.read_summary(out).collect()
    assert 1 <= s.height < 6 and set(s["status"]) == {"ok"}
    for rel in s["run_dir"]:
        assert json.loads((out / rel / "manifest.json").read_text())["status"] == "complete"
    states = [json.loads(m.read_text())["status"] for m in out.glob("runs/calm/base/*/manifest.json")]
    assert "running" not in states          # a run stopped mid-way says so (interrupted)
