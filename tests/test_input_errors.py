"""Bad input: every class of bad value and YAML structure is
one line naming the file or command-line value, the key path and what was expected; exit 2; no
traceback; nothing written. And --set reaches into lists."""
from __future__ import annotations

import json
import time
from pathlib import Path

import polars as pl
import pytest

from conftest import cli

GOOD = """name: t
duration: 2h
golems:
  - {count: 2, asset: ETH}
"""


def one_line_error(code: int, out: str, *expect: str, seconds: float | None = None) -> str:
    """The promise: exit 2, one line, under 500 characters, no traceback, naming what it must."""
    assert code == 2, out
    assert "Traceback" not in out
    lines = out.strip().splitlines()
    assert len(lines) == 1, out
    assert len(lines[0]) < 500, len(lines[0])
    assert "\x1b" not in out and "\r" not in out
    for e in expect:
        assert e in lines[0], (e, lines[0])
    return lines[0]


def _file(tmp_path, text: str, name: str = "s.yaml") -> Path:
    f = tmp_path / name
    f.write_text(text)
    return f


# ------------------------------------------------------------------------------ values
@pytest.mark.parametrize("text, expect", [
    (GOOD.replace("2h", ".nan"), ["duration", "finite duration"]),
    (GOOD.replace("2h", ".inf"), ["duration", "finite duration"]),
    (GOOD.replace("2h", "200000w"), ["duration", "at most 100 years"]),
    (GOOD + f"market: {{events: [{{kind: exploit, at: 1h, duration: {2**63}}}]}}\n",
     ["market.events.0.duration", "at most 100 years", ":5"]),
    (GOOD + "market: {step_s: 0}\n", ["market.step_s", "greater than or equal to 1"]),
    (GOOD + "market: {tape: {path: x.parquet, crash_return: -1}}\n", ["market.tape.crash_return", "greater than -0.5"]),
    (GOOD + "market: {regimes: {calm: {vol: .nan}}}\n", ["market.regimes.calm.vol", "finite"]),
    (GOOD + "market: {regimes: {calm: {next: {calm: 0}}}}\n", ["market.regimes.calm.next", "all 0"]),
    (GOOD + "market: {assets: [{name: A, price: 1}, {name: A, price: 2}]}\n", ["market.assets.1.name", "twice"]),
    (GOOD.replace("count: 2", "count: 0"), ["golems.0.count", "greater than or equal to 1", ":4"]),
    (GOOD.replace("count: 2", "count: 2000000"), ["golems.0.count", "less than or equal to 1000000"]),
    (GOOD.replace("count: 2", "count: true"), ["golems.0.count", "expected a number"]),
    (GOOD.replace("count: 2", "count: 2, interval: 0"), ["golems.0.interval", "interval >= 1 s"]),
    (GOOD.replace("count: 2", "count: 2, temperament: [0, 2, 0]"), ["golems.0.temperament.1", "less than or equal to 1"]),
    (GOOD.replace("count: 2", "count: 2, exposure: .inf"), ["golems.0.exposure", "finite"]),
    (GOOD.replace("asset: ETH", "asset: DOGE"), ["golems.0.asset", "DOGE", "not one of the assets"]),
    (GOOD + "seed: -1\n", ["seed", "greater than or equal to 0"]),
    (GOOD + f"seed: {2**64}\n", ["seed", "less than or equal to"]),
    (GOOD + "seed: " + "9" * 5000 + "\n", ["integer of over 4,300 digits"]),
    (GOOD + "overrides: {arousal.encoding_width: 1.0e308}\n", ["overrides", "arousal.encoding_width", "less than"]),
    (GOOD + f"overrides: {{curator.every_ticks: {2**63}}}\n", ["curator.every_ticks", "less than or equal to"]),
    (GOOD + "overrides: {retrieval.top_k: 0}\n", ["retrieval.top_k", "greater than or equal to 1"]),
    (GOOD + "overrides: {retrieval.top_k: -3}\n", ["retrieval.top_k", "greater than or equal to 1"]),
    (GOOD + "overrides: {appraisal.k_p: .nan}\n", ["appraisal.k_p", "finite number"]),
    (GOOD + "overrides: {trading.fail_prob: 1.5}\n", ["trading.fail_prob", "less than or equal to 1"]),
    (GOOD + "overrides: {heartbeat.interval_s: 0}\n", ["heartbeat.interval_s", "greater than or equal to 1"]),
    (GOOD + "overrides: {appraisal.probe_arousal: {extreme: 1}}\n", ["appraisal.probe_arousal.extreme"]),
    (GOOD + "overrides: {reflex.enabled: 3}\n", ["reflex.enabled", "boolean"]),
])
def test_value_ranges(tmp_path, text, expect):
    f = _file(tmp_path, text)
    for cmd in (["validate", f], ["run", f, "--out", tmp_path / "out", "-q"]):
        code, out = cli(*cmd)
        one_line_error(code, out, str(f), *expect)
    assert not (tmp_path / "out").exists()     # nothing written


def test_every_numeric_config_key_has_a_range():
    """A key without an entry in RANGES falls back to its type's range; every current key has its own."""
    from golem.config import RANGES, default_table
    numeric = [f"{s}.{k}" for s, keys in default_table().items() for k, v in keys.items()
               if isinstance(v, (int, float, dict)) and not isinstance(v, bool)]
    assert [k for k in numeric if k not in RANGES] == []


def test_a_key_without_a_range_entry_still_gets_its_type_range(monkeypatch):
    """Tolerant of renamed keys: drop a key's entry and it still refuses NaN (floats) and
    negatives (integers)."""
    from golem import config as gc
    from sim.config_layers import resolve
    from sim.errors import InputError
    monkeypatch.setattr(gc, "RANGES", {k: v for k, v in gc.RANGES.items()
                                       if k not in ("appraisal.k_worked", "curator.every_ticks")})
    gc.config_model.cache_clear()
    try:
        resolve(sets={"appraisal.k_worked": 7.0, "curator.every_ticks": 0})   # no specific range: accepted
        for bad, msg in (({"appraisal.k_worked": float("nan")}, "finite number"),
                         ({"curator.every_ticks": -1}, "greater than or equal to 0")):
            with pytest.raises(InputError, match=msg):
                resolve(sets=bad)
    finally:
        gc.config_model.cache_clear()


@pytest.mark.parametrize("args, expect", [
    (["--set", "seed=abc"], ["--set seed=abc: seed:", "valid integer"]),
    (["--set", "duration=.nan"], ["--set duration=", "duration: expected a finite duration"]),
    (["--set", "retrieval.top_k=0"], ["--set retrieval.top_k=0: retrieval.top_k:", "greater than or equal to 1"]),
    (["--set", "appraisal.k_p=.nan"], ["--set appraisal.k_p=", "finite number"]),
    (["--set", "golems.0.count=0"], ["--set golems.0.count=0: golems.0.count:"]),
    (["--set", "golems.0.asset=DOGE"], ["--set golems.0.asset=DOGE: golems.0.asset:", "DOGE"]),
    (["--set", "golems.asset=ETH"], ["--set golems.asset=ETH: golems is a list", "golems.0.asset", "golems.*.asset"]),
    (["--set", "golems.5.count=1"], ["--set golems.5.count=1: golems.5: no such item", "items 0..0"]),
    (["--set", "duration.x=1"], ["--set duration.x=1: duration: is text"]),
    (["--set", "retrieval.topk=3"], ["--set retrieval.topk=3: retrieval.topk: unknown key (did you mean 'top_k'?)"]),
    (["--set", "retreival.top_k=3"], ["retreival: unknown key (did you mean 'retrieval'?)"]),
    (["--set", "durashun=1h"], ["durashun: unknown key (did you mean 'duration'?)"]),
    (["--set", "retrieval.top_k"], ["--set retrieval.top_k: expected key=value"]),
    (["--set", "seed=" + "9" * 5000], ["--set seed=", "characters)"]),
    (["--seed", "-1"], ["--seed: -1: expected a seed from 0"]),
])
def test_command_line_values_are_named_as_such(tmp_path, args, expect):
    f = _file(tmp_path, GOOD)
    for cmd in ("validate", "run"):
        extra = ["--out", tmp_path / "out", "-q"] if cmd == "run" else []
        if cmd == "validate" and args[0] == "--seed":
            continue                     # validate has no --seed
        code, out = cli(cmd, f, *args, *extra)
        line = one_line_error(code, out, *expect)
        assert f"{f}:" not in line       # the file is not blamed for a command-line value


@pytest.mark.parametrize("env, expect", [
    ({"GOLEM_REFLEX": "maybe"}, "environment GOLEM_REFLEX=maybe: reflex.enabled: expected on or off"),
    ({"GOLEM_REFLEX_MAX_PER_TURN": "lots"}, "environment GOLEM_REFLEX_MAX_PER_TURN=lots: reflex.max_per_turn"),
    ({"GOLEM_SALIENCE_RANK": "sometimes"}, "environment GOLEM_SALIENCE_RANK=sometimes: retrieval.salience_rank"),
    ({"GOLEM__retrieval__topk": "3"}, "environment GOLEM__retrieval__topk=3: retrieval.topk: unknown key (did you "
                                      "mean 'top_k'?)"),
    ({"GOLEM__retrieval__top_k": "0"}, "environment GOLEM__retrieval__top_k=0: retrieval.top_k"),
    ({"GOLEM_MEMORY_LIMIT": "lots"}, "environment GOLEM_MEMORY_LIMIT=lots: expected a size in bytes"),
])
def test_environment_values_are_named(tmp_path, env, expect):
    from typer.testing import CliRunner

    from sim.cli import app
    f = _file(tmp_path, GOOD)
    r = CliRunner().invoke(app, ["validate", str(f)], env=env)
    one_line_error(r.exit_code, r.output, expect)


def test_golem_reflex_spellings():
    from sim.config_layers import resolve
    for word, value in (("off", False), ("OFF", False), ("false", False), ("0", False), ("no", False),
                        ("disabled", False), ("on", True), ("true", True), ("1", True), ("Yes", True)):
        cfg, _ = resolve(environ={"GOLEM_REFLEX": word})
        assert cfg.reflex.enabled is value, word


def test_key_typo_comes_first_with_a_suggestion(tmp_path):
    f = _file(tmp_path, "name: t\nduraton: 3d\ngolems:\n  - {count: 2}\n")
    code, out = cli("validate", f)
    one_line_error(code, out, f"{f}:2: duraton: unknown key (did you mean 'duration'?)")
    f = _file(tmp_path, GOOD.replace("count: 2", "count: 2, strategy: momentum, capitl: 5"))
    code, out = cli("validate", f)
    one_line_error(code, out, f"{f}:4: golems.0.capitl: unknown key (did you mean 'capital'?)")


# --------------------------------------------------------------------------- structure
def _deep(n: int) -> str:
    return GOOD + "description:\n" + "".join("  " * (i + 1) + f"k{i}:\n" for i in range(n)) + "  " * (n + 1) + "x\n"


@pytest.mark.parametrize("make, expect", [
    (lambda: "", ["empty file"]),
    (lambda: "# only a comment\n", ["empty file"]),
    (lambda: "null\n", ["empty document"]),
    (lambda: "- a\n- b\n", ["(top level): expected a mapping of scenario keys, got a list"]),
    (lambda: GOOD + "---\nname: u\n", ["invalid YAML", "expected a single document"]),
    (lambda: GOOD + "name: u\n", [":5: name: duplicate key (first at line 1)"]),
    (lambda: GOOD.replace("count: 2,", "count: 2, count: 3,"), [":4: golems.0.count: duplicate key"]),
    (lambda: GOOD + "description: " + "[" * 1000 + "]" * 1000 + "\n", ["invalid YAML", "maximum nesting depth"]),
    (lambda: _deep(40), ["nested more than 32 levels deep"]),
    (lambda: GOOD + "a: &a [1, *a]\n", ["an alias refers to the value that contains it"]),
    (lambda: GOOD + "".join(f"{c}: &{c} [{', '.join(['*' + p] * 9) if p else ', '.join(['lol'] * 9)}]\n"
                            for p, c in zip(["", "a", "b", "c", "d", "e", "f"], "abcdefg")),
     ["holds more than 100,000 values (aliases followed)"]),
    (lambda: GOOD + "a: !!python/object/apply:os.system [echo hi]\n", ["invalid YAML", "could not determine a constructor"]),
    (lambda: GOOD + "market: {tape: {path: x, start: 2020-13-45}}\n", ["invalid value: month must be in 1..12"]),
    (lambda: GOOD + "a: [" + ", ".join(["1"] * 1_000_000) + "]\n", ["bytes; expected a YAML file of at most"]),
    (lambda: "name: t\nduration: [1h\n", ["invalid YAML", "expected ',' or ']'"]),
    (lambda: "name: t\n\tduration: 1h\n", ["invalid YAML"]),
])
def test_yaml_structure(tmp_path, make, expect):
    f = _file(tmp_path, make())
    t0 = time.perf_counter()
    code, out = cli("validate", f)
    one_line_error(code, out, str(f), *expect)
    assert time.perf_counter() - t0 < 10


def test_alias_bomb_under_overrides_is_never_echoed(tmp_path):
    """The expansion of a bomb (the issue's 35-312 MB line) is summarised, not printed."""
    f = _file(tmp_path, GOOD + "overrides: {retrieval: [&a [lol, lol, lol, lol], &b [*a, *a, *a, *a], "
                               "&c [*b, *b, *b, *b], [*c, *c, *c, *c]]}\n")
    code, out = cli("validate", f)
    line = one_line_error(code, out, f"{f} overrides: retrieval: expected a mapping of keys, got a list of 4 items")
    assert "lol" not in line


def test_keys_with_newlines_and_escapes_are_printed_escaped(tmp_path):
    f = _file(tmp_path, GOOD + '"bad\\nkey\\e[31mred": 1\n')
    code, out = cli("validate", f)
    line = one_line_error(code, out)
    assert "bad\\nkey\\x1b[31mred: unknown key" in line


def test_a_long_value_is_cut_in_the_message(tmp_path):
    f = _file(tmp_path, GOOD.replace("2h", "'" + "x" * 10_000 + "'"))
    code, out = cli("validate", f)
    one_line_error(code, out, "duration", "(10,000 characters)")


def test_memory_refused_before_allocating(tmp_path):
    """count: 10000 (the issue's 9.8 GiB allocation): refused with the estimate, nothing written."""
    from typer.testing import CliRunner

    from golem.grimoire import Grimoire
    from sim.cli import app
    from sim.resources import gib
    per = Grimoire.bytes_for(1, 1, 64) - 8                  # the arena's layout decides, not a constant
    f = _file(tmp_path, GOOD.replace("count: 2", "count: 10000"))
    for cmd in (["validate", str(f)], ["run", str(f), "--out", str(tmp_path / "o"), "-q"]):
        r = CliRunner().invoke(app, cmd, env={"GOLEM_MEMORY_LIMIT": "8GiB"})
        line = one_line_error(r.exit_code, r.output, "golems: this world needs about",
                              f"Grimoire {gib(Grimoire.bytes_for(10_000, 4096, 64))} = 10,000 Golems x 4,096 "
                              f"entries x {per:,} B", "GOLEM_MEMORY_LIMIT")
    assert not (tmp_path / "o").exists()
    assert "more than the 8.0 GiB" in line


def test_memory_estimate_is_not_below_what_a_world_takes():
    """The estimate against the arrays a real world allocates (Grimoire, population)."""
    import numpy as np

    from sim import resources
    from sim.run import build_tape, prepare
    from sim.world import World
    path = Path(__file__).resolve().parents[1] / "scenarios" / "default.yaml"
    sc, cfg, _, seed = prepare(path, sets=["grimoire.capacity=256"], environ={})
    world = World(sc, cfg, build_tape(sc, seed, cfg), seed)
    est = resources.estimate(sc, cfg, record=False)
    grimoire = sum(c.nbytes for c in world.gr.cols.values()) + sum(
        v.nbytes for v in vars(world.gr).values() if isinstance(v, np.ndarray))   # every array of the arena
    pop = sum(v.nbytes for v in vars(world.pop).values() if isinstance(v, np.ndarray))
    assert est["grimoire"] == grimoire
    assert pop <= est["golems"] <= 4 * pop


def test_overflowing_market_is_refused(tmp_path):
    f = _file(tmp_path, GOOD.replace("2h", "30d") + "market: {regimes: {calm: {drift: 1.0}}, initial_regime: calm}\n")
    for cmd in (["validate", f], ["run", f, "--out", tmp_path / "o", "-q"]):
        code, out = cli(*cmd)
        one_line_error(code, out, f"{f}: market: the close price of ETH is inf", "keep prices finite")


# ------------------------------------------------------------------------- --set lists
def test_set_into_list_items_runs_what_it_says(tmp_path):
    f = _file(tmp_path, GOOD.replace("  - {count: 2, asset: ETH}\n",
                                     "  - {count: 2, asset: ETH}\n  - {count: 1, asset: ETH, clade: b}\n"))
    out = tmp_path / "o"
    code, text = cli("run", f, "--set", "golems.0.count=3", "--set", "golems.*.asset=BTC", "--set",
                     "golems.-1.capital=500", "--out", out, "-q")
    assert code == 0, text
    m = json.loads((out / "manifest.json").read_text())
    assert [g["count"] for g in m["scenario"]["golems"]] == [3, 1]
    assert {g["asset"] for g in m["scenario"]["golems"]} == {"BTC"}
    assert [g["capital"] for g in m["scenario"]["golems"]] == [10_000.0, 500.0]
    hb = pl.read_parquet(out / "heartbeats" / "*.parquet")
    assert hb["golem_id"].n_unique() == 4
    market = pl.read_parquet(out / "market" / "*.parquet").filter(pl.col("asset") == "BTC")
    assert set(hb["price"].unique()) <= set(market["close"])          # every Golem trades BTC


def test_set_into_defaults_the_file_leaves_out(tmp_path):
    """market.assets and market.regimes come from the model's defaults when the file omits them."""
    f = _file(tmp_path, GOOD)
    out = tmp_path / "o"
    code, text = cli("run", f, "--set", "market.assets.0.price=100", "--set", "market.regimes.*.vol=0.001",
                     "--set", "appraisal.probe_arousal.high=0.9", "--out", out, "-q")
    assert code == 0, text
    m = json.loads((out / "manifest.json").read_text())
    assert m["scenario"]["market"]["assets"][0]["price"] == 100.0
    assert m["scenario"]["market"]["assets"][1]["name"] == "BTC"         # the other default asset kept
    assert {r["vol"] for r in m["scenario"]["market"]["regimes"].values()} == {0.001}
    assert m["config"]["appraisal.probe_arousal"] == {"none": 0.0, "low": 0.1, "medium": 0.3, "high": 0.9}
    first = pl.read_parquet(out / "market" / "*.parquet").filter((pl.col("asset") == "ETH") & (pl.col("step") == 0))
    assert first["open"][0] == 100.0


def test_set_dotted_unit():
    from sim.errors import InputError
    from sim.scenario import set_dotted
    tree = {"golems": [{"count": 1}, {"count": 2}], "market": {"tape": "x.parquet"}}
    set_dotted(tree, "golems.*.temperament", [0.1, 0.2, 0.3])
    set_dotted(tree, "market.tape.start", "2020-03-09")
    tree["golems"][0]["temperament"][0] = 9                       # each item got its own copy
    assert tree["golems"][1]["temperament"] == [0.1, 0.2, 0.3]
    assert tree["market"]["tape"] == {"path": "x.parquet", "start": "2020-03-09"}
    for bad, msg in (("golems.x.count", "golems is a list"), ("golems.2.count", "no such item"),
                     ("golems..count", "empty key part"), ("golems.0.count.x", "is a number")):
        with pytest.raises(InputError, match=msg):
            set_dotted(tree, bad, 1)


@pytest.mark.parametrize("k", [1, 5])
def test_contrarian_top_k_other_than_3_runs(tmp_path, k):
    """A crash at 12 h turns the mood, so the pool of opposite-valence memories holds more than k."""
    f = _file(tmp_path, GOOD.replace("2h", "1d") + "market:\n  regime_schedule:\n    - {at: 12h, regime: crash}\n")
    out = tmp_path / "o"
    code, text = cli("run", f, "--set", f"contrarian.top_k={k}", "--set", "contrarian.every_ticks=10",
                     "--set", "contrarian.min_confidence=0", "--out", out, "-q")
    assert code == 0, text
    ev = pl.read_parquet(out / "events" / "*.parquet").filter(pl.col("kind") == "contrarian")
    assert ev.height > 0
    found = [(len(p["ids"]), p["pool_n"]) for p in map(json.loads, ev["payload"])]
    assert all(n == min(k, pool) for n, pool in found)      # k of them, or all the pool holds
    assert any(pool >= k for _, pool in found)


def test_validate_checks_the_memory_of_the_run_it_is_told_of():
    """`validate --no-record` estimates as `run --no-record` needs (no buffers, no push wave)."""
    from typer.testing import CliRunner

    from sim.cli import app
    path = str(Path(__file__).resolve().parents[1] / "scenarios" / "population.yaml")
    rec = CliRunner().invoke(app, ["validate", path], env={"GOLEM_MEMORY_LIMIT": "10GiB"})
    plain = CliRunner().invoke(app, ["validate", path, "--no-record"], env={"GOLEM_MEMORY_LIMIT": "10GiB"})
    one_line_error(rec.exit_code, rec.output, "needs about 79.7 GiB", "push wave 55.8 GiB")
    line = one_line_error(plain.exit_code, plain.output, "needs about 22.7 GiB")
    assert "push wave" not in line and "buffers" not in line
