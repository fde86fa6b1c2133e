"""The Python API (sim.api): stepped runs give the one-shot run's tables byte for byte,
in-memory runs write nothing and hold the same tables, and the live views say what the tables say."""
from __future__ import annotations

import json
import os

import polars as pl
import pytest

from conftest import cli

from sim.api import Simulation
from sim.recorder import TABLES, content_hashes
from sim.scenario import InputError

# two cadences (a 450 s cohort starting at 100 s), a Clade with latency (deliveries between
# heartbeats), a crash for flashbulbs and pushes, small flushes: every kind of event a pause may fall on
SCEN = """name: stepped
duration: 20h
seed: 9
overrides:
  recording.flush_every_s: 3600
market:
  events:
    - {kind: flash_crash, at: 8h, asset: ETH, duration: 1h, severity: high, impact: -0.10}
clades:
  - {name: a, latency: 7m, jitter: 2m}
golems:
  - {count: 4, clade: a, asset: ETH}
  - {count: 3, clade: b, asset: BTC, strategy: mean_reversion, interval: 450, start: 100}
"""


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    """The command line's run of the scenario."""
    d = tmp_path_factory.mktemp("api")
    (d / "s.yaml").write_text(SCEN)
    code, out = cli("run", d / "s.yaml", "--out", d / "cli", "-q")
    assert code == 0, out
    return d, json.loads((d / "cli" / "manifest.json").read_text())["hashes"]


def test_the_step_api_gives_the_one_shot_tables(ref, tmp_path):
    d, hashes = ref
    sim = Simulation.from_yaml(d / "s.yaml", out=tmp_path / "stepped", environ={})
    times = []
    for _ in range(5):
        sim.step()
        times.append(sim.now_s)
    assert times == [0.0, 100.0, 300.0, 550.0, 600.0]       # each instant a cohort ticks
    sim.run_for("90m").run(until="6h")
    assert sim.now_s == 6 * 3600 and sim.status == "running"
    while sim.now_s < 9 * 3600:                               # through the crash, a heartbeat at a time
        sim.step()
    sim.run(until=10 * 3600 + 123.5)                          # a pause between two events
    for _ in range(40):
        sim.run_for(1000)
    sim.run()
    assert sim.done and sim.status == "complete" and sim.now_s == 20 * 3600
    assert content_hashes(tmp_path / "stepped") == hashes
    m = json.loads((tmp_path / "stepped" / "manifest.json").read_text())
    assert m["status"] == "complete" and m["hashes"] == hashes and m["wall_s"] > 0
    sim.run()                                                 # done: further calls change nothing
    assert content_hashes(tmp_path / "stepped") == hashes


def test_one_shot_from_python_is_the_command_line_run(ref, tmp_path):
    d, hashes = ref
    sim = Simulation.from_yaml(d / "s.yaml", out=tmp_path / "py", environ={}).run()
    assert content_hashes(sim.run_dir) == hashes
    r = sim.result
    assert r.status == "complete" and isinstance(r.heartbeats, pl.LazyFrame) and set(r.tables) == set(TABLES)
    assert r.heartbeats.collect().equals(pl.read_parquet(d / "cli" / "heartbeats" / "*.parquet"))


def test_in_memory_runs_write_nothing_and_hold_the_same_tables(ref, tmp_path, monkeypatch):
    d, hashes = ref
    monkeypatch.chdir(tmp_path)
    sim = Simulation.from_yaml(d / "s.yaml", memory=True, environ={})
    sim.run(until="5h")
    early = sim.result.heartbeats.collect()               # the rows so far, while it runs
    assert early["time_ms"].max() < 5 * 3_600_000 and early.height > 0
    sim.step().run_for("3h").run()
    assert os.listdir(tmp_path) == [] and sim.run_dir is None
    assert sim.status == "complete" and sim.manifest["row_counts"]["heartbeats"] > 0
    for t in TABLES:
        got = sim.result[t].collect()
        want = pl.read_parquet(d / "cli" / t / "*.parquet") if list((d / "cli" / t).glob("*.parquet")) else None
        if want is None:
            assert got.height == 0, t
        else:
            assert got.equals(want), t
        assert got.height == sim.manifest["row_counts"][t]
    assert early.equals(sim.result.heartbeats.filter(pl.col("time_ms") < 5 * 3_600_000).collect())


def test_live_views_say_what_the_tables_say(ref):
    d, _ = ref
    sim = Simulation.from_yaml(d / "s.yaml", memory=True, environ={})
    sim.run(until="9h")
    pop = sim.population()
    hb = sim.result.heartbeats.collect()
    last = hb.sort("time_ms").group_by("golem_id").last().sort("golem_id")
    assert pop.height == 7 and pop["golem_id"].to_list() == list(range(7))
    assert pop["clade"].to_list() == ["a"] * 4 + ["b"] * 3 and pop["asset"].to_list() == ["ETH"] * 4 + ["BTC"] * 3
    assert pop["strategy"].to_list() == ["momentum"] * 4 + ["mean_reversion"] * 3
    counts = hb.group_by("golem_id").len().sort("golem_id")["len"].to_list()
    assert pop["tick"].to_list() == counts                     # one heartbeat row per tick so far
    assert pop["cash"].to_list() == last["cash"].to_list()     # cash moves only when a Golem trades
    assert pop["budget"].to_list() == last["budget"].to_list()
    assert pop["units"].to_numpy() == pytest.approx(last["exposure"] * last["value"] / last["price"], rel=1e-9)
    price = sim.result.market.filter(pl.col("time_ms") == pl.col("time_ms").max()).collect()
    eth = price.filter(pl.col("asset") == "ETH")["close"][0]
    assert pop["price"].to_list()[:4] == [eth] * 4
    assert pop["value"].to_numpy() == pytest.approx(pop["cash"] + pop["units"] * pop["price"])
    g = sim.grimoire(2)
    ent = sim.result.entries.filter(pl.col("golem_id") == 2).sort("id").collect()
    assert g["id"].to_list() == ent["id"].to_list() and g.height == pop["entries"][2] > 10
    assert g["topic"].to_list() == ent["topic"].to_list() and g["category"].to_list() == ent["category"].to_list()
    assert g["p"].to_numpy() == pytest.approx(ent["p"].to_numpy(), abs=1e-7)     # stored as float32
    assert g["outcome"].null_count() == (~ent["has_outcome"]).sum()
    assert set(g["status"]) <= {"active", "stale", "expired", "archived"}


def test_bad_input_and_failures_are_one_line(ref, tmp_path):
    d, _ = ref
    with pytest.raises(InputError, match=r"s.yaml:\d+: golems.0.count"):
        (tmp_path / "s.yaml").write_text(SCEN.replace("count: 4", "count: four"))
        Simulation.from_yaml(tmp_path / "s.yaml", memory=True)
    with pytest.raises(InputError, match="memory=True"):
        Simulation.from_yaml(d / "s.yaml", memory=True, out=tmp_path / "x")
    sim = Simulation.from_yaml(d / "s.yaml", memory=True, sets={"duration": "2h", "golems.1.count": 1}, environ={})
    with pytest.raises(InputError, match="until='soon'"):
        sim.run(until="soon")
    sim.run(until="3d")                                        # past the end: runs to the end
    assert sim.done and sim.now_s == 7200 and sim.population().height == 5
    (tmp_path / "bad.py").write_text("def late(view):\n    if view.now_ms > 3_600_000:\n        raise ValueError('x')\n"
                                     "    import numpy as np\n    return np.full(view.n, 0.5)\n")
    (tmp_path / "f.yaml").write_text(SCEN.replace("- {count: 4, clade: a, asset: ETH}",
                                                  "- {count: 4, clade: a, asset: ETH, strategy: bad.py:late}"))
    sim = Simulation.from_yaml(tmp_path / "f.yaml", out=tmp_path / "failed", environ={})
    with pytest.raises(InputError, match=r"golems.0.strategy: strategy 'bad.py:late' raised ValueError: x") as e:
        sim.run()
    assert "\n" not in str(e.value) and isinstance(e.value.__cause__, Exception)   # the traceback is chained
    assert sim.status == "failed" and json.loads((tmp_path / "failed" / "manifest.json").read_text())["status"] == "failed"
    with pytest.raises(InputError, match="failed earlier"):
        sim.step()
