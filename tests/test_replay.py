"""Replay: verified re-execution from the recorded tape, counterfactuals, diff."""
from __future__ import annotations

import json
import shutil

import numpy as np
import polars as pl
import pyarrow.parquet as pq
import pytest

from conftest import cli

from sim.market import generate
from sim.recorder import content_hashes, table_files, write_options
from sim.run import execute
from sim.scenario import load_scenario

SMALL = """name: small
duration: 1d
seed: 3
market:
  events:
    - {kind: flash_crash, at: 6h, asset: ETH, duration: 1h, severity: high, impact: -0.12}
clades:
  - {name: eth, latency: 30s, jitter: 20s}
golems:
  - {count: 3, clade: eth, asset: ETH}
  - {count: 2, clade: btc, asset: BTC, strategy: mean_reversion, interval: 450, start: 100}
"""


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    d = tmp_path_factory.mktemp("replay")
    (d / "small.yaml").write_text(SMALL)
    res = execute(d / "small.yaml", d / "run", environ={})
    return d, res


def test_tape_from_run_is_the_tape_the_run_read(small):
    from sim.tape_market import tape_from_run
    d, res = small
    tape = tape_from_run(res.run_dir)
    sc = load_scenario(d / "small.yaml")
    gen = generate(sc.market, sc.duration_s, res.manifest["seed"])
    T = tape.n_steps
    assert T == res.world.market_step + 1          # every bar the run could read, nothing after
    for k in ("time_ms", "open", "high", "low", "close", "volume", "tvl", "gas", "regime"):
        assert np.array_equal(getattr(tape, k), getattr(gen, k)[:T]), k
    assert tape.regime_names == gen.regime_names and tape.assets == gen.assets and tape.events == gen.events


def test_verify_ok(small):
    _, res = small
    code, out = cli("replay", res.run_dir, "--verify")
    assert code == 0, out
    assert out.startswith("ok") and "Traceback" not in out


def _tamper(run, table, part_index, row, column, delta):
    f = table_files(run, table)[part_index]
    t = pq.read_table(f)
    vals = t.column(column).to_pylist()
    vals[row] = vals[row] + delta
    t = t.set_column(t.schema.get_field_index(column), column, pl.Series(vals).to_arrow().cast(t.schema.field(column).type))
    pq.write_table(t, f, **write_options(t.schema))
    return sum(pq.ParquetFile(x).metadata.num_rows for x in table_files(run, table)[:part_index]) + row


def test_verify_names_first_differing_table_row_and_column(small, tmp_path):
    _, res = small
    copy = tmp_path / "copy"
    shutil.copytree(res.run_dir, copy)
    row = _tamper(copy, "heartbeats", 1, 3, "p", 1e-9)
    code, out = cli("replay", copy, "--verify")
    assert code == 1, out
    assert f"heartbeats: row {row} (part-00001.parquet row 3), column 'p': value differs" in out
    assert "changed after the run" in out and "Traceback" not in out


def test_counterfactual_same_tape_new_parameters(small, tmp_path):
    _, res = small
    out_dir = tmp_path / "cf"
    code, out = cli("replay", res.run_dir, "--set", "retrieval.top_k=3", "--set", "clade.enabled=false",
                    "--out", out_dir, "-q")
    assert code == 0, out
    m = json.loads((out_dir / "manifest.json").read_text())
    assert m["parent"]["path"] == str(res.run_dir.resolve()) and m["parent"]["hashes"] == res.manifest["hashes"]
    assert m["changes"] == ["retrieval.top_k=3", "clade.enabled=false"]
    assert m["config"]["retrieval.top_k"] == 3 and m["config"]["clade.enabled"] is False
    assert m["tape"]["source"] == "run"
    h = content_hashes(out_dir)
    assert h["market"] == res.manifest["hashes"]["market"]            # the same recorded market
    assert h["tape_events"] == res.manifest["hashes"]["tape_events"]
    assert h["heartbeats"] != res.manifest["hashes"]["heartbeats"]    # different minds
    ev = pl.read_parquet(out_dir / "events" / "*.parquet")
    assert (ev["kind"] == "contagion").sum() == 0
    # a counterfactual is itself a run that verifies (its tape is its own recorded market)
    code, out = cli("replay", out_dir)
    assert code == 0, out

    # diff: per Clade, side by side, as Parquet
    pq_out = tmp_path / "diff.parquet"
    code, out = cli("diff", res.run_dir, out_dir, "--out", pq_out)
    assert code == 0, out
    d = pl.read_parquet(pq_out)
    assert d.columns == ["clade", "metric", "a", "b", "delta"]
    assert set(d["clade"]) == {"eth", "btc"}
    assert {"final_pnl", "deaths", "flashbulbs", "mean_p", "mean_a", "mean_d", "retrieval_valence_bias"} <= set(d["metric"])
    hb = pl.read_parquet(res.run_dir / "heartbeats" / "*.parquet")
    last = hb.sort("time_ms").group_by("golem_id").agg(pl.col("value").last(), pl.col("clade_id").first())
    pnl_eth = last.filter(pl.col("clade_id") == 0)["value"].sum() - 3 * 10_000
    got = d.filter((pl.col("clade") == "eth") & (pl.col("metric") == "final_pnl"))["a"][0]
    assert got == pytest.approx(pnl_eth)
    rt = pl.read_parquet(res.run_dir / "retrievals" / "*.parquet").filter(
        (pl.col("clade_id") == 1) & (pl.col("pool_n") > pl.col("ids").list.len()))   # only retrievals that chose
    bias = (rt["served_mean_valence"] - rt["pool_mean_valence"]).fill_nan(None).mean()
    got = d.filter((pl.col("clade") == "btc") & (pl.col("metric") == "retrieval_valence_bias"))["a"][0]
    assert got == pytest.approx(bias)


def test_counterfactual_keeps_the_market(small, tmp_path):
    _, res = small
    for args, expect in ((["market.step_s=60"], "market.step_s: a counterfactual replays the recorded market"),
                         (["duration=2d"], "longer than the recorded tape"),
                         (["retrieval.top_k=many"], "retrieval.top_k"),
                         (["nonsense.key=1"], "unknown key")):
        code, out = cli("replay", res.run_dir, *sum((["--set", a] for a in args), []), "--out", tmp_path / "x")
        assert code == 2, out
        assert expect in out and "Traceback" not in out and len(out.strip().splitlines()) == 1


def test_replay_bad_input(tmp_path):
    code, out = cli("replay", tmp_path)
    assert code == 2 and "manifest.json: file not found" in out
    from sim.rundir import write_manifest
    write_manifest(tmp_path, {"scenario": {}, "config": {}, "seed": 1, "status": "running"})
    code, out = cli("replay", tmp_path, "--verify")
    assert code == 2 and "expected a complete run" in out
