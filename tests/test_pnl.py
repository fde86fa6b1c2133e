"""One P&L definition (docs/tables.md): value at each Golem's last heartbeat, after that tick's fees,
against the capital its scenario gave it. The run summary, `diff`, the report and the sweep summary
must print the same figure for one run."""
from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest
from typer.testing import CliRunner

from sim import analysis as A
from sim.cli import app

SCENARIO = """
name: pnl_check
duration: 18h
seed: 4
market:
  initial_regime: calm
  regime_schedule:
    - {at: 6h, regime: crash}
    - {at: 8h, regime: bull}
golems:
  - {count: 3, clade: longs, asset: ETH, strategy: momentum, exposure: 0.8, capital: 20000}
  - {count: 2, clade: frail, asset: ETH, strategy: mean_reversion, budget: 3, capital: 5000}
"""


@pytest.fixture(scope="module")
def printed(tmp_path_factory):
    d = tmp_path_factory.mktemp("pnl")
    (d / "s.yaml").write_text(SCENARIO)
    r = CliRunner().invoke(app, ["run", str(d / "s.yaml"), "--out", str(d / "run")], terminal_width=200)
    assert r.exit_code == 0, r.output
    return d / "run", r.output


def test_summary_diff_report_and_sweep_agree_on_one_run(printed):
    run, out = printed
    hb = pl.read_parquet(run / "heartbeats" / "*.parquet")
    last = hb.sort("time_ms").group_by("golem_id").agg(pl.col("value").last(), pl.col("clade_id").first())
    caps = {0: 20000.0, 1: 5000.0}
    want = {}                                    # by hand: Σ last value / Σ capital - 1, per Clade
    for c, n in ((0, 3), (1, 2)):
        v = last.filter(pl.col("clade_id") == c)
        assert v.height == n
        want[c] = v["value"].sum() / (n * caps[c]) - 1
    total = last["value"].sum() / (3 * 20000 + 2 * 5000) - 1
    # the run summary prints P&L % per Clade with two decimals
    shown = {name: float(p) for name, p in re.findall(r"(longs|frail)\s.*?([+-]\d+\.\d\d)\s*│?\s*$", out, re.M)}
    assert shown == {"longs": pytest.approx(100 * want[0], abs=0.006), "frail": pytest.approx(100 * want[1], abs=0.006)}
    # diff's final_pnl_pct
    r = CliRunner().invoke(app, ["diff", str(run), str(run), "--out", str(run.parent / "d.parquet")])
    assert r.exit_code == 0, r.output
    d = pl.read_parquet(run.parent / "d.parquet").filter(pl.col("metric") == "final_pnl_pct")
    assert dict(zip(d["clade"], d["a"])) == {"longs": pytest.approx(100 * want[0]), "frail": pytest.approx(100 * want[1])}
    # the report's summary row (the whole run) and the sweep summary's figures
    from sim import report, sweep
    html = report.build_html(run)
    assert f"{total:+.2%}" in html
    fig = sweep.run_figures(run, A.manifest(run))
    assert fig["pnl_pct"] == pytest.approx(total)
    assert fig["pnl"] == pytest.approx(last["value"].sum() - 70000)
    life = A.life_summaries(run).collect()
    assert (life["final_value"].sum() / life["capital"].sum() - 1) == pytest.approx(total)
