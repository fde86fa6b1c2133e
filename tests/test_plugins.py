"""Strategy and appraisal plug-ins: code outside the package drives a run, the view it
reads says what the tables say, failures are one line, and the manifest knows which code ran."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest

from conftest import cli, table

from golem import hooks as hookm
from golem import strategies as stratm
from golem.plugins import CohortView, Plugin, PluginError, call
from sim.recorder import content_hashes
from sim.run import execute

ROOT = Path(__file__).resolve().parents[1]

SCEN = """name: plug
duration: 1d
seed: 3
overrides:
  recording.flush_every_s: 3600
market:
  events:
    - {{kind: flash_crash, at: 12h, asset: ETH, duration: 2h, severity: high, impact: -0.10}}
golems:
  - {{count: 3, clade: mine, asset: ETH, strategy: {a}}}
  - {{count: 3, clade: theirs, asset: ETH, strategy: {b}}}
"""

PLUGINS = '''
import numpy as np
from golem import strategies

SEEN = []

def constant(view, level=0.37):
    return np.full(view.n, level)

def by_id(view):
    return view.golem_id / 10.0

def wrapped_momentum(view):
    return strategies.momentum(view)

def spy(view):
    SEEN.append(dict(t=view.now_ms, g=view.golem_id.copy(), price=view.price.copy(), ago=view.price_ago(1).copy(),
                     hist=view.price_history[:, -2:].copy(), close=view.bars("close", 2).copy(),
                     exposure=view.exposure.copy(), mem=view.memory_signal.copy(), ids=view.served_ids.copy(),
                     factors=view.served_factors.copy(), pad=view.pad.copy(), mood=view.mood.copy(),
                     value=view.value.copy(), cash=view.cash.copy(), params=dict(view.params)))
    return strategies.momentum(view)

def writes(view):
    view.price[0] = 1.0
    return np.zeros(view.n)

def late_failure(view):
    if view.now_ms >= 12 * 3_600_000:
        raise RuntimeError("no idea what to do now")
    return strategies.momentum(view)

def wrong_shape(view):
    return np.zeros((view.n, 2))

def nan_for_one(view):
    out = np.full(view.n, 0.5)
    out[-1] = np.nan
    return out

def text(view):
    return "buy"
'''


@pytest.fixture(scope="module")
def where(tmp_path_factory):
    """A folder outside the package with a plug-in file; scenarios are written next to it."""
    d = tmp_path_factory.mktemp("plugins")
    (d / "my_strategies.py").write_text(PLUGINS)
    return d


def scenario(d: Path, a: str, b: str = "mean_reversion", extra: str = "", name: str | None = None) -> Path:
    f = d / (name or f"s_{abs(hash((a, b, extra)))}.yaml")
    f.write_text(SCEN.format(a=a, b=b) + extra)
    return f


def run(f: Path, out: Path, sets=None):
    return execute(f, out, sets=sets, environ={})


# ------------------------------------------------------------------------------ a plug-in drives a run
def test_a_strategy_from_a_file_outside_the_package_drives_the_run(where, tmp_path):
    # no fear scaling: the constant plug-in's target is what the Golems aim for on every awake tick
    f = scenario(where, "my_strategies.py:constant", "my_strategies.py:by_id",
                 extra="  - {count: 1, clade: other, asset: ETH, strategy: my_strategies.py:constant, "
                       "strategy_params: {level: 0.8}, interval: 10m}\n", name="drives.yaml")   # a cohort of its own
    res = run(f, tmp_path / "run", sets=["mortality.enabled=false", "decision.danger_cooloff_s=0"])
    hb = table(res.run_dir, "heartbeats").filter(pl.col("state_path") != "DREAMING")
    aimed = hb.filter(pl.col("probe") != "high")    # a high probe exits, whatever the strategy (no cool-off here)
    by_golem = aimed.group_by("golem_id").agg(pl.col("target_exposure").unique()).sort("golem_id")
    want = {0: [0.37], 1: [0.37], 2: [0.37], 3: [0.3], 4: [0.4], 5: [0.5], 6: [0.8]}
    assert {r["golem_id"]: sorted(r["target_exposure"]) for r in by_golem.to_dicts()} == want
    # the Golems trade toward it: after the first trade their exposure sits near the target
    last = hb.sort("time_ms").group_by("golem_id").last().sort("golem_id")
    assert np.allclose(last["exposure"], [want[g][0] for g in last["golem_id"]], atol=0.26)
    m = res.manifest
    rec = {r["key"]: r for r in m["plugins"]["loaded"]}
    assert rec["golems.0.strategy"]["file"] == str(where / "my_strategies.py")
    assert rec["golems.0.strategy"]["import_path"] == f"{where / 'my_strategies.py'}:constant"
    # the hash covers the file's path and its content: another file cannot stand in for it
    src = where / "my_strategies.py"
    assert rec["golems.0.strategy"]["sha256"] == __import__("hashlib").sha256(
        str(src).encode() + b"\0" + src.read_bytes()).hexdigest()
    assert rec["golems.2.strategy"]["params"] == {"level": 0.8}


def test_a_plug_in_written_like_the_built_ins_gives_their_tables(where, tmp_path):
    """Two strategies share a cohort (one plug-in, one built-in): the view's subsets and the
    plug-in path give the built-in's run byte for byte."""
    builtin = run(scenario(where, "momentum"), tmp_path / "builtin")
    plugin = run(scenario(where, "my_strategies.py:wrapped_momentum"), tmp_path / "plugin")
    assert plugin.manifest["hashes"] == builtin.manifest["hashes"]


def test_a_plug_in_run_twice_is_byte_identical(where, tmp_path):
    f = scenario(where, "my_strategies.py:by_id", "hodl")
    a, b = run(f, tmp_path / "a"), run(f, tmp_path / "b")
    assert content_hashes(a.run_dir) == content_hashes(b.run_dir) == a.manifest["hashes"]
    assert a.manifest["plugins"] == b.manifest["plugins"]


def test_the_view_says_what_the_tables_say(where, tmp_path):
    res = run(scenario(where, "my_strategies.py:spy", "momentum", name="spy.yaml"), tmp_path / "run")
    mod = next(m for n, m in sys.modules.items() if n.startswith("golem_plugin_my_strategies"))
    seen = [s for s in mod.SEEN if s["t"] < 8 * 3_600_000]   # before the first contrarian pass (one call a tick)
    assert len(seen) == 96 and len({s["t"] for s in seen}) == 96
    hb = table(res.run_dir, "heartbeats").filter(pl.col("state_path") != "DREAMING")
    rt = table(res.run_dir, "retrievals")
    mk = table(res.run_dir, "market").filter(pl.col("asset") == "ETH").sort("time_ms")
    t0 = int(mk["time_ms"][0])
    for s in seen[5:40]:
        for i, g in enumerate(s["g"]):
            row = hb.filter((pl.col("time_ms") == s["t"]) & (pl.col("golem_id") == g)).row(0, named=True)
            prev = hb.filter((pl.col("time_ms") < s["t"]) & (pl.col("golem_id") == g)).sort("time_ms")
            r = rt.filter((pl.col("time_ms") == s["t"]) & (pl.col("golem_id") == g)).row(0, named=True)
            assert s["price"][i] == row["price"]
            assert s["hist"][i, 1] == row["price"] and s["ago"][i] == s["hist"][i, 0] == prev["price"][-1]
            assert s["close"][i, 1] == row["price"]               # the bar known now is the tick's price
            bar = mk.filter(pl.col("time_ms") == t0 + s["t"] - 300_000)["close"]
            assert s["close"][i, 0] == bar[0]                      # and the one before it
            # before this tick's trade: the units and cash the last tick left, at this tick's price
            units = prev["exposure"][-1] * prev["value"][-1] / prev["price"][-1]
            assert s["cash"][i] == prev["cash"][-1]
            assert s["value"][i] == pytest.approx(prev["cash"][-1] + units * row["price"], rel=1e-12)
            assert s["exposure"][i] == pytest.approx(units * row["price"] / s["value"][i], rel=1e-9)
            assert s["mem"][i] == row["memory_signal"] == r["memory_signal"]
            assert [x for x in s["ids"][i] if x >= 0] == r["ids"]
            served = s["ids"][i] >= 0
            assert list(s["factors"][i][served, 0]) == r["semantic"]
            assert list(s["factors"][i][served, 3]) == r["emotional"]
            assert np.isnan(s["factors"][i][~served]).all()
            assert tuple(s["pad"][i]) == (row["p"], row["a"], row["d"])
            assert tuple(s["mood"][i]) == (r["query_p"], r["query_a"], r["query_d"])   # mood queries recall


def test_the_view_is_read_only(where, tmp_path):
    code, out = cli("run", scenario(where, "my_strategies.py:writes"), "--out", tmp_path / "o", "-q")
    assert code == 1 and "read-only" in out and "my_strategies.py:writes" in out   # a run that started and failed


def test_view_rows_and_time_by_hand():
    """price_ago/price_history/bars on a hand-made population: ring buffer order, NaN before."""
    from golem.population import HIST
    pop = SimpleNamespace(tick=np.array([0, 3, 70]), asset=np.array([0, 1, 0], np.int16),
                          price_hist=np.full((3, HIST), np.nan), pad=np.zeros((3, 3)))
    pop.price_hist[1, :4] = [10, 11, 12, 13]
    pop.price_hist[2, :] = np.arange(HIST) + 100.0   # tick 70 wrote slot 70 % 64 = 6
    pop.price_hist[0, 0] = 5.0
    bars = {"close": np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]), "gas": np.array([30.0, 31.0, 32.0])}
    mind = SimpleNamespace(pop=pop, cfg=None, regime_names=("calm",))
    obs = SimpleNamespace(now_ms=0, close=np.array([5.0, 6.0]), step=1, bars=bars, regime=0, probe_sev=np.zeros(3))
    v = CohortView(mind, np.array([0, 1, 2]), obs)
    assert v.price.tolist() == [5.0, 6.0, 5.0]
    assert np.isnan(v.price_ago(1)[0]) and v.price_ago(1)[1] == 12 and v.price_ago(1)[2] == 105
    assert v.price_ago(3)[1] == 10 and np.isnan(v.price_ago(4)[1])
    h = v.price_history
    assert h.shape == (3, HIST) and h[1, -4:].tolist() == [10, 11, 12, 13] and np.isnan(h[1, :-4]).all()
    assert h[2, -1] == 106 and h[2, -7] == 100 and h[2, -8] == 163   # wrapped: slot 63 is 7 ticks ago
    assert np.array_equal(v.bars("close", 3), [[np.nan, 1, 3], [np.nan, 2, 4], [np.nan, 1, 3]], equal_nan=True)
    assert v.bars("gas", 2).tolist() == [[30, 31]] * 3
    with pytest.raises(ValueError, match="read-only"):
        v.price[0] = 1
    with pytest.raises(AttributeError, match="DECIDING only"):
        v.memory_signal
    with pytest.raises(KeyError, match="expected one of"):
        v.bars("sentiment")
    sub = v.take(np.array([False, True, True]))
    assert sub.n == 2 and sub.price_ago(1).tolist() == [12, 105]


# ------------------------------------------------------------------------------ failures, one line each
@pytest.mark.parametrize("fn, expect", [
    ("late_failure", ["raised RuntimeError: no idea what to do now", "my_strategies.py:", "at t=12 h"]),
    ("wrong_shape", ["returned shape (3, 2) for 3 Golems", "expected target exposures of shape (3,)"]),
    ("nan_for_one", ["returned NaN for Golem 2", "expected finite target exposures"]),
    ("text", ["returned str", "expected target exposures"]),
])
def test_a_faulty_plug_in_is_one_line_and_keeps_what_was_written(where, tmp_path, fn, expect):
    f = scenario(where, f"my_strategies.py:{fn}", "momentum")
    out = tmp_path / "run"
    code, text = cli("run", f, "--out", out, "-q")
    flat = text.replace("\n", "")
    assert code == 1 and "Traceback" not in text, text   # the run started and failed (README, exit status)
    assert text.strip().startswith("error:") and "\n" not in text.strip(), text   # one line
    for e in [str(f), "golems.0.strategy", f"'my_strategies.py:{fn}'", *expect, "manifest status: failed"]:
        assert e in flat, (e, text)
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "failed" and f"my_strategies.py:{fn}" in m["error"]
    assert m["hashes"] == content_hashes(out)
    if fn == "late_failure":   # twelve hours of a momentum run were flushed and are as they would be
        ok = run(scenario(where, "my_strategies.py:wrapped_momentum", "momentum"), tmp_path / "ok")
        for t in ("heartbeats", "retrievals"):
            got = table(out, t)
            want = table(ok.run_dir, t).filter(pl.col("time_ms") < 12 * 3_600_000)
            assert got.height == want.height == m["row_counts"][t] and got.equals(want), t


@pytest.mark.parametrize("spec, params, expect", [
    ("nothing_like_it", "{}", ["golems.0.strategy", "unknown strategy 'nothing_like_it'", "(hodl, mean_reversion, momentum)"]),
    ("no_such_module:fn", "{}", ["cannot import 'no_such_module'", "ModuleNotFoundError"]),
    ("absent.py:fn", "{}", ["strategy file", "absent.py not found"]),
    ("my_strategies.py:absent", "{}", ["has no 'absent'"]),
    ("my_strategies.py:SEEN", "{}", ["SEEN is a list; expected a function"]),
    ("broken.py:fn", "{}", ["broken.py:2 failed to load", "SyntaxError"]),
    ("my_strategies.py:constant", "{levle: 1}", ["golems.0.strategy_params", "unexpected keyword argument 'levle'",
                                                 "(level)"]),
    ("has space", "{}", ["golems.0.strategy", "expected a registered name"]),
])
def test_a_plug_in_that_cannot_load_is_bad_input(where, tmp_path, spec, params, expect):
    (where / "broken.py").write_text("def fn(view):\n    return (\n")
    f = tmp_path / "s.yaml"
    f.write_text(SCEN.format(a=f"'{spec}', strategy_params: {params}", b="momentum"))
    if spec.endswith(".py:fn") or spec.startswith("my_strategies"):
        f = where / f"bad_{abs(hash(spec + params))}.yaml"
        f.write_text(SCEN.format(a=f"'{spec}', strategy_params: {params}", b="momentum"))
    for cmd in (["validate", f], ["run", f, "--out", tmp_path / "out", "-q"]):
        code, text = cli(*cmd)
        flat = text.replace("\n", "")
        assert code == 2 and "Traceback" not in text, text
        assert f"{f}:10" in flat or "expected a registered name" in flat, text   # file and line
        for e in expect:
            assert e in flat, (e, text)
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------ names, registry, replay
def test_registered_and_module_plug_ins(where, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(where))
    stratm.register("steady", lambda view: np.full(view.n, 0.6))
    try:
        res = run(scenario(where, "steady", "my_strategies:constant"), tmp_path / "run",
                  sets=["mortality.enabled=false", "decision.danger_cooloff_s=0"])
    finally:
        del stratm.REGISTRY["steady"]
    rec = {r["key"]: r for r in res.manifest["plugins"]["loaded"]}
    assert rec["golems.0.strategy"]["import_path"].endswith(":test_registered_and_module_plug_ins.<locals>.<lambda>")
    assert rec["golems.1.strategy"]["import_path"] == "my_strategies:constant"
    hb = table(res.run_dir, "heartbeats").filter(~pl.col("cache_served") & (pl.col("state_path") != "DREAMING")
                                                 & (pl.col("probe") != "high"))
    assert set(hb.filter(pl.col("golem_id") < 3)["target_exposure"]) == {0.6}
    assert set(hb.filter(pl.col("golem_id") >= 3)["target_exposure"]) == {0.37}


def test_entry_point_names(where, tmp_path, monkeypatch):
    """An installed package can register names (entry-point group golem_sim.strategies)."""
    pkg = tmp_path / "site"
    (pkg / "fancy_pkg-1.0.dist-info").mkdir(parents=True)
    (pkg / "fancy_pkg-1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: fancy-pkg\nVersion: 1.0\n")
    (pkg / "fancy_pkg-1.0.dist-info" / "entry_points.txt").write_text("[golem_sim.strategies]\nfancy = fancy_pkg:go\n")
    (pkg / "fancy_pkg.py").write_text("import numpy as np\ndef go(view):\n    return np.full(view.n, 0.45)\n")
    monkeypatch.syspath_prepend(str(pkg))
    res = run(scenario(where, "fancy", "momentum"), tmp_path / "run")
    assert res.manifest["plugins"]["loaded"][0]["import_path"] == "fancy_pkg:go"
    hb = table(res.run_dir, "heartbeats").filter((pl.col("golem_id") < 3) & (pl.col("tick") == 0))
    assert set(hb["target_exposure"]) == {0.45}


def test_replay_verify_names_changed_plug_in_code(where, tmp_path):
    d = tmp_path / "scen"
    d.mkdir()
    src = d / "my_strategies.py"
    src.write_text(PLUGINS)
    f = scenario(d, "my_strategies.py:by_id")
    res = run(f, tmp_path / "run")
    code, text = cli("replay", res.run_dir, "--verify", "--plugin", src)
    assert code == 0 and "ok: 7 tables identical" in text, text
    src.write_text(PLUGINS + "\n# a comment changes the file, not what it does\n")
    code, text = cli("replay", res.run_dir, "--verify", "--plugin", src)
    flat = text.replace("\n", " ")
    assert code == 1, text
    assert "golems.0.strategy: strategy 'my_strategies.py:by_id'" in flat and "source changed since the run" in flat
    assert "tables are identical" in flat
    src.write_text(PLUGINS.replace("view.golem_id / 10.0", "view.golem_id / 20.0"))
    code, text = cli("replay", res.run_dir, "--verify", "--trust-plugins")
    assert code == 1 and "source changed" in text and "heartbeats: row" in text, text
    # a counterfactual may change the strategy (on the same recorded tape)
    src.write_text(PLUGINS)
    code, text = cli("replay", res.run_dir, "--set", "golems.0.strategy=hodl", "--out", tmp_path / "cf", "-q")
    assert code == 0, text
    m = json.loads((tmp_path / "cf" / "manifest.json").read_text())
    assert m["plugins"]["loaded"][0]["spec"] == "hodl" and m["scenario"]["golems"][0]["strategy"] == "hodl"


def test_resume_loads_the_recorded_plug_in(where, tmp_path, monkeypatch):
    """A run killed mid-way resumes with the plug-in file the run recorded, from any directory."""
    from sim.api import Simulation
    f = scenario(where, "my_strategies.py:by_id")
    ref = run(f, tmp_path / "ref")
    sim = Simulation.from_yaml(f, out=tmp_path / "killed", environ={})
    sim.run_for("10h")
    sim.world.rec.sync()                 # as a kill would leave it: the flushed parts and a checkpoint
    assert (tmp_path / "killed" / "checkpoint").exists()
    monkeypatch.chdir(tmp_path)
    code, text = cli("resume", tmp_path / "killed", "-q", "--plugin", where / "my_strategies.py")
    assert code == 0, text
    assert content_hashes(tmp_path / "killed") == ref.manifest["hashes"]


# ------------------------------------------------------------------------------ appraisal hooks
def _hook(fn, name="h"):
    return Plugin(name, fn, where="s.yaml: golems.0.appraisal_hooks.0", role="appraisal hook")


def test_hooks_add_to_the_stimulus_then_clip_by_hand():
    stim = np.array([[0.5, -0.2, 0.0], [0.9, 0.9, -0.9], [-0.3, 0.1, 0.2]])
    obs = SimpleNamespace(now_ms=0)
    both = np.array([True, True, False])
    table_ = hookm.HookTable([(_hook(lambda v: np.tile([0.25, -1.0, 0.5], (v.n, 1))), both),
                              (_hook(lambda v, k=0.1: np.full((v.n, 3), k)), both)])
    out = table_.add(SimpleNamespace(), np.array([0, 1, 2]), obs, stim)
    assert np.allclose(out[0], [0.85, -1.0, 0.6]) and np.allclose(out[1], [1.0, 0.0, -0.3])
    assert out[2].tolist() == stim[2].tolist()                       # no hook for it: untouched
    assert hookm.HookTable().add(None, np.array([0]), obs, stim) is stim   # no hooks: the stimulus itself
    bad = hookm.HookTable([(_hook(lambda v: np.zeros((v.n, 2))), both)])
    with pytest.raises(PluginError, match=r"returned shape \(2, 2\) for 2 Golems.*shape \(2, 3\)"):
        bad.add(SimpleNamespace(), np.array([0, 1, 2]), obs, stim)


def test_call_checks_every_result():
    view = CohortView(SimpleNamespace(), np.array([4, 7]), SimpleNamespace(now_ms=5_400_000))
    p = Plugin("x.py:f", lambda v: [1, np.inf], where="s.yaml: golems.1.strategy")
    with pytest.raises(PluginError, match=r"s.yaml: golems.1.strategy: strategy 'x.py:f' returned infinity for "
                                          r"Golem 7 at t=1.5 h"):
        call(p, view)
    assert call(Plugin("ok", lambda v: [0, True]), view).tolist() == [0.0, 1.0]


TAPE_SCEN = """name: hooked
duration: 46h
seed: 2
market:
  tape: {{path: {tape}}}
golems:
  - {{count: 3, clade: c, asset: BTC, interval: 1h{hooks}}}
"""


@pytest.fixture(scope="module")
def funding_tape(tmp_path_factory):
    """Two days of hourly BTC bars with a funding rate that turns from greed (+) to fear (-)."""
    d = tmp_path_factory.mktemp("funding")
    t = 1_600_000_000_000 + 3_600_000 * np.arange(48)
    close = 10_000 * np.exp(np.cumsum(np.random.default_rng(0).normal(0, 0.003, 48)))
    open_ = np.r_[10_000, close[:-1]]
    pl.DataFrame({"timestamp": t, "open": open_, "high": np.maximum(open_, close) * 1.001,
                  "low": np.minimum(open_, close) * 0.999, "close": close, "volume": np.ones(48)}).write_csv(d / "btc.csv")
    pl.DataFrame({"timestamp": t, "funding_rate": np.where(np.arange(48) < 24, 0.002, -0.002)}).write_csv(d / "f.csv")
    code, out = cli("import-tape", d / "btc.csv", "--asset", "BTC", "--time-unit", "ms", "--extra",
                    f"funding_rate={d / 'f.csv'}:funding_rate", "--out", d / "btc.parquet")
    assert code == 0, out
    return d


def test_a_sentiment_feed_from_a_tape_column_moves_affect(funding_tape, tmp_path):
    d = funding_tape
    plain = d / "plain.yaml"
    plain.write_text(TAPE_SCEN.format(tape=d / "btc.parquet", hooks=""))
    hooked = d / "hooked.yaml"
    hooked.write_text(TAPE_SCEN.format(tape=d / "btc.parquet",
                                       hooks=", appraisal_hooks: [{hook: funding_sentiment, params: {pleasure: 0.5}}]"))
    zero = d / "zero.yaml"
    (d / "zero_hook.py").write_text("import numpy as np\ndef nothing(view):\n    return np.zeros((view.n, 3))\n")
    zero.write_text(TAPE_SCEN.format(tape=d / "btc.parquet", hooks=", appraisal_hooks: [zero_hook.py:nothing]"))
    a = table(run(plain, tmp_path / "plain").run_dir, "heartbeats")
    res = run(hooked, tmp_path / "hooked")
    b = table(res.run_dir, "heartbeats")
    assert res.manifest["plugins"]["loaded"][-1]["key"] == "golems.0.appraisal_hooks.0"
    assert run(zero, tmp_path / "zero").manifest["hashes"] == content_hashes(tmp_path / "plain")
    h = 3_600_000   # the funding rate turns negative in the bar the Golems see from about 23 h on
    j = a.join(b, on=["time_ms", "golem_id"], suffix="_h")
    greed = j.filter((pl.col("time_ms") > 2 * h) & (pl.col("time_ms") < 22 * h))
    fear = j.filter(pl.col("time_ms") > 27 * h)
    assert greed.height > 50 and fear.height > 50
    assert (greed["p_h"] > greed["p"]).all() and (greed["a_h"] > greed["a"]).all()   # greedy crowd: P and A up
    assert (fear["p_h"] < fear["p"]).mean() > 0.9 and (fear["a_h"] > fear["a"]).all()  # fearful crowd: P down


def test_a_hook_that_fails_is_one_line(where, tmp_path):
    (where / "hooks_bad.py").write_text("def h(view):\n    return view.memory_signal\n")
    f = scenario(where, "momentum", extra="")
    f.write_text(f.read_text().replace("strategy: momentum}", "strategy: momentum, appraisal_hooks: [hooks_bad.py:h]}"))
    code, text = cli("run", f, "--out", tmp_path / "o", "-q")
    flat = text.replace("\n", "")
    assert code == 1 and "Traceback" not in text
    assert "golems.0.appraisal_hooks.0: appraisal hook 'hooks_bad.py:h' raised AttributeError" in flat
    assert "DECIDING only" in flat


def test_builtins_are_plug_ins_of_the_documented_form():
    """momentum / mean_reversion / hodl by hand on a two-Golem view (SPEC §5 decision)."""
    from golem.config import default_config
    cfg = default_config()
    pop = SimpleNamespace(tick=np.array([20, 3]), asset=np.zeros(2, np.int16), price_hist=np.full((2, 64), np.nan),
                          trend_scale=np.array([1.0, 2.0]), memory_weight=np.array([1.0, 0.5]),
                          risk=np.array([0.8, 1.5]))
    pop.price_hist[0, (20 - 12) % 64] = 100.0
    obs = SimpleNamespace(now_ms=0, close=np.array([102.0]))
    view = CohortView(SimpleNamespace(pop=pop, cfg=cfg), np.array([0, 1]), obs,
                      memory={"memory_signal": np.array([0.5, -1.0]), "risk_multiplier": np.ones(2)})   # a neutral mood
    trend0 = np.tanh(25.0 * 1.0 * 0.02)     # 2 % over the 12-tick window; Golem 1 has seen too few ticks
    m0 = 0.5 + 0.5 * trend0 + 0.3 * 1.0 * 0.5
    assert stratm.momentum(view) == pytest.approx([min(m0, 1.0) * 0.8, (0.5 + 0.3 * 0.5 * -1.0) * 1.0])
    assert stratm.mean_reversion(view)[0] == pytest.approx((0.5 - 0.5 * trend0 + 0.15) * 0.8)
    assert stratm.hodl(view) == pytest.approx([1.0 * 0.8, (1.0 - 0.15) * 1.0])
    assert stratm.momentum(view, trend_window=12, trend_scale=50.0)[0] == pytest.approx(
        min(0.5 + 0.5 * np.tanh(50 * 0.02) + 0.15, 1.0) * 0.8)


def test_a_sweep_runs_plug_ins_in_its_workers_and_reruns_edited_ones(where, tmp_path):
    from sim import sweep as sw
    d = tmp_path / "sw"
    d.mkdir()
    (d / "my_strategies.py").write_text(PLUGINS)
    scenario(d, "my_strategies.py:by_id", name="s.yaml")
    (d / "sweep.yaml").write_text("scenarios: [s.yaml]\noverride_sets:\n  - {decision.min_trade: 0.25}\n"
                                  "seeds: [1]\nsets: {duration: 3h}\n")
    first = sw.run_sweep(d / "sweep.yaml", d / "out", executor=sw.LocalPool(1), environ={})
    assert first.ok == 1 and first.reused == 0
    assert sw.run_sweep(d / "sweep.yaml", d / "out", executor=sw.LocalPool(1), environ={}).reused == 1
    (d / "my_strategies.py").write_text(PLUGINS.replace("view.golem_id / 10.0", "view.golem_id / 20.0"))
    again = sw.run_sweep(d / "sweep.yaml", d / "out", executor=sw.LocalPool(1), environ={})
    assert again.ok == 1 and again.reused == 0                  # the edited plug-in ran, not the old tables
    run = next((d / "out").glob("runs/**/manifest.json")).parent
    hb = table(run, "heartbeats").filter((pl.col("golem_id") == 2) & (pl.col("tick") == 0))
    assert hb["target_exposure"].to_list() == [0.1]


def test_a_name_registered_in_a_notebook_cannot_be_replayed_elsewhere(where, tmp_path):
    def from_a_cell(view):
        return np.full(view.n, 0.4)
    from_a_cell.__module__ = "__main__"          # as a function defined in a notebook cell is
    stratm.register("cell", from_a_cell)
    try:
        res = run(scenario(where, "cell"), tmp_path / "run")
    finally:
        del stratm.REGISTRY["cell"]
    assert res.manifest["plugins"]["loaded"][0]["import_path"].startswith("__main__:")
    code, text = cli("replay", res.run_dir, "--verify")
    flat = text.replace("\n", "")
    assert code == 2 and "Traceback" not in text
    assert f"{res.run_dir / 'manifest.json'} scenario: golems.0.strategy: strategy 'cell' was defined in __main__" in flat
    assert "package.module:function" in flat
