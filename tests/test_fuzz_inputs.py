"""Property: whatever scenario file, `--set` values and GOLEM_* environment a user gives,
`validate` either accepts it — and then a short run finishes with finite tables — or refuses it
with exit status 2 and one line under 500 characters, within 10 s of CPU time. Nothing else (a traceback, a
hang, exit 1) ever happens.

The generator covers the schema: every scenario field and every config key, with values from
each class the issue lists (in range, at the bounds, past them, NaN and infinities, wrong types,
booleans, integers of thousands of digits, 2**63) and the YAML structures (duplicate keys, alias
bombs, recursive aliases, deep nesting, keys with newlines or ANSI escapes, empty files,
several documents, object tags), plus --set items into lists (golems.0.count, golems.*.asset)
and malformed ones.

The default run checks 300 cases (a run for one accepted case in five, at most half an hour of
simulated time and 300 heartbeats of its fastest Golem, so it stays under a minute); the longer run is
    GOLEM_FUZZ_EXAMPLES=5000 GOLEM_FUZZ_RUN_EVERY=1 .venv/bin/python -m pytest tests/test_fuzz_inputs.py -n 0 -s -q --basetemp=/tmp/golem-fuzz
and prints its counts (ok / exit 2 / other).
"""
from __future__ import annotations

import json
import math
import os
import signal
import tempfile
import time
from collections import Counter
from pathlib import Path

import polars as pl
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from golem.config import default_table

EXAMPLES = int(os.environ.get("GOLEM_FUZZ_EXAMPLES", "300"))
RUN_EVERY = int(os.environ.get("GOLEM_FUZZ_RUN_EVERY", "5"))
#: the fuzzed worlds share the machine: anything bigger is refused as not fitting (exit 2)
ENV = {"GOLEM_MEMORY_LIMIT": "1GiB"}
COUNTS: Counter = Counter()

# --------------------------------------------------------------------------- values by class
BIG = [2**31, 2**53 + 1, 2**63, 2**64, -(2**63), 10**30, int("7" * 4000)]
ODD = [float("nan"), float("inf"), float("-inf"), True, False, None, "abc", "", "1e5", [1, 2], {"a": 1},
       "bad\nvalue", "\x1b[31mred"]
BAD = st.one_of(st.sampled_from(ODD), st.sampled_from(BIG), st.sampled_from([-1, -0.5, 0, 1e308, -1e308, 5e-324]))
BAD_DURATIONS = st.sampled_from([0, -1, ".nan", ".inf", 2**63, "9999999d", "3x", "", True, "1e3", [1], "-3h",
                                 int("9" * 500), "200000w", "1ms", "0.1s"])


def in_range(key: str, v):
    """A valid value for a config key: its default, near it, or at the bounds of its range."""
    from golem.config import RANGES
    if isinstance(v, bool):
        return st.booleans()
    if isinstance(v, dict):
        return st.fixed_dictionaries({}, optional={k: st.floats(0, 1) for k in v})
    if isinstance(v, str):
        from golem.config import CHOICES
        return st.sampled_from(CHOICES.get(key, (v,)))
    r = RANGES.get(key, {})
    lo = r.get("ge", r.get("gt", 0))
    hi = r.get("le", r.get("lt", 2 * abs(v) + 1))
    if isinstance(v, int):
        lo, hi = int(lo) + (1 if "gt" in r else 0), int(hi) - (1 if "lt" in r else 0)
        return st.one_of(st.just(v), st.integers(max(lo, v // 2), min(hi, max(v * 2, lo + 1))), st.sampled_from([lo, hi]))
    lo_ok = lo if "ge" in r or not r else lo + 1e-9
    hi_ok = hi if "le" in r or not r else hi - 1e-9
    return st.one_of(st.just(v), st.floats(max(lo_ok, min(v / 2, v * 2)), min(hi_ok, max(v * 2, v / 2, lo_ok)),
                                           allow_nan=False), st.sampled_from([lo_ok, hi_ok]))


def past_range(key: str, v):
    """An invalid value for a config key: past a bound, NaN, infinite, a wrong type, a boolean."""
    from golem.config import RANGES
    r = RANGES.get(key, {})
    past = [r[k] - 1 for k in ("ge",) if k in r] + [r[k] for k in ("gt",) if k in r] + \
           [r[k] + 1 for k in ("le",) if k in r] + [r[k] for k in ("lt",) if k in r]
    return st.one_of(st.sampled_from(past or [-1]), BAD)


# a valid world: small (1-3 groups of 1-3 Golems), short, every field in range
valid_group = st.fixed_dictionaries({"count": st.integers(1, 3)}, optional={
    "asset": st.sampled_from(["ETH", "BTC"]), "clade": st.sampled_from(["a", "b"]),
    "strategy": st.sampled_from(["momentum", "mean_reversion", "hodl"]),
    "temperament": st.lists(st.floats(-1, 1), min_size=3, max_size=3),
    "budget": st.floats(0.01, 1e6), "capital": st.floats(1, 1e9), "exposure": st.floats(0, 1),
    "spread": st.floats(0, 1), "interval": st.sampled_from(["5m", 300, "10m", 60, "2h", 1, "90s", "bar"]),
    "start": st.sampled_from([0, "10m", 100, "2h"]), "prefill": st.integers(0, 50),
})
valid_event = st.fixed_dictionaries({"kind": st.sampled_from(["exploit", "rug_pull", "depeg", "gas_spike",
                                                              "oracle_failure", "flash_crash", "liquidation"]),
                                     "at": st.sampled_from(["10m", "30m", 600, 0, "3h"])}, optional={
    "asset": st.sampled_from(["ETH", "BTC"]), "severity": st.sampled_from(["none", "low", "medium", "high"]),
    "impact": st.floats(-0.5, 0.5), "duration": st.sampled_from(["10m", "1h", 0, 60]),
    "gas_multiplier": st.floats(0.1, 100), "detect_lag": st.sampled_from([0, "5m"]),
    "detect_jitter": st.sampled_from([0, "5m"]), "early_detectors": st.lists(st.integers(0, 5), max_size=3),
})
valid_regime = st.fixed_dictionaries({}, optional={
    "drift": st.floats(-0.01, 0.01), "vol": st.floats(0, 0.05), "jump_rate": st.floats(0, 0.2),
    "jump_size": st.floats(-0.3, 0.3), "mean_duration_s": st.sampled_from([3600.0, 86400.0, 1e9, 1.0]),
})
valid_market = st.fixed_dictionaries({}, optional={
    "step_s": st.sampled_from([300.0, 60.0, 900.0, 1.0, 7200.0]), "correlation": st.floats(0, 1),
    "assets": st.tuples(st.floats(0.01, 1e6), st.floats(0.01, 1e6)).map(
        lambda p: [{"name": "ETH", "price": p[0]}, {"name": "BTC", "price": p[1], "beta": 0.8}]),
    "regimes": st.tuples(valid_regime, valid_regime).map(lambda r: {"calm": r[0], "bull": dict(r[1], next={"calm": 1})}),
    "events": st.lists(valid_event, max_size=2),
    "gas": st.fixed_dictionaries({}, optional={"base_gwei": st.floats(0.1, 1000), "vol": st.floats(0, 1)}),
})
CONFIG_KEYS = [(s, k, v) for s, keys in default_table().items() for k, v in keys.items()]


@st.composite
def valid_overrides(draw):
    out = {}
    for _ in range(draw(st.integers(0, 3))):
        s, k, v = draw(st.sampled_from(CONFIG_KEYS))
        out[f"{s}.{k}"] = draw(in_range(f"{s}.{k}", v))
    return out


@st.composite
def valid_scenario(draw):
    doc = {"name": draw(st.sampled_from(["t", "ü-world", "x y"])),
           "duration": draw(st.sampled_from(["30m", "1h", "2h", "90m", 1800, 3600.0, "1h30m", "3d", "1y", "1w"])),
           "golems": draw(st.lists(valid_group, min_size=1, max_size=3))}
    if draw(st.booleans()):
        doc["seed"] = draw(st.integers(0, 2**63 - 1))
    if draw(st.booleans()):
        m = draw(valid_market)
        if "regimes" in m:
            m["initial_regime"] = "calm"
        doc["market"] = m
    if draw(st.booleans()):
        doc["overrides"] = draw(valid_overrides())
    if draw(st.integers(0, 3)) == 0:
        doc["clades"] = [{"name": "a", "latency": draw(st.sampled_from([0, "2s", 30])),
                          "jitter": draw(st.sampled_from([0, "1s"]))}]
    return doc


# ------------------------------------------------------------------------------- mutations
SCENARIO_PATHS = [("duration",), ("seed",), ("name",), ("golems", 0, "count"), ("golems", 0, "interval"),
                  ("golems", 0, "start"), ("golems", 0, "temperament"), ("golems", 0, "exposure"),
                  ("golems", 0, "capital"), ("golems", 0, "budget"), ("golems", 0, "prefill"), ("golems", 0, "spread"),
                  ("golems", 0, "asset"), ("golems", 0, "strategy"), ("golems",), ("market",), ("market", "step_s"),
                  ("market", "correlation"), ("market", "assets"), ("market", "regimes"), ("market", "events"),
                  ("market", "tape"), ("market", "initial_regime"), ("market", "gas"), ("overrides",), ("clades",)]
MUTATIONS = ["scenario", "scenario", "config", "config", "unknown", "structure", "set", "env"]
STRUCTURE = ["duplicate", "bomb", "recursive", "deep", "ansi_key", "empty", "comment", "list", "two_docs", "tag",
             "tab", "latin1", "bigint", "truncated", "deep_flow", "bomb_overrides", "huge_list", "dup_nested",
             "long_list"]


def _put(doc, path, value):
    cur = doc
    for p in path[:-1]:
        if isinstance(cur, list):
            cur = cur[p] if p < len(cur) else cur[0]
        else:
            cur = cur.setdefault(p, {}) if isinstance(cur.get(p, {}), dict) else cur[p]
            if not isinstance(cur, (dict, list)):
                return
    if isinstance(cur, dict):
        cur[path[-1]] = value
    elif isinstance(cur, list) and cur:
        cur[0] = value


@st.composite
def bad_scenario_value(draw, path):
    last = path[-1]
    if last in ("duration", "interval", "start"):
        return draw(st.one_of(BAD_DURATIONS, BAD))
    if last == "events":
        return [draw(st.fixed_dictionaries({"kind": st.sampled_from(["meteor", "exploit"]),
                                            "at": st.one_of(BAD_DURATIONS, st.just("1h"))},
                                           optional={"impact": BAD, "duration": BAD_DURATIONS, "asset": BAD,
                                                     "gas_multiplier": BAD, "early_detectors": st.just([-1, 2**40])}))]
    if last == "regimes":
        return {"calm": draw(st.fixed_dictionaries({}, optional={"drift": st.sampled_from([1.0, 0.5, float("nan")]),
                                                                 "vol": BAD, "jump_rate": BAD, "jump_size": BAD,
                                                                 "mean_duration_s": BAD,
                                                                 "next": st.sampled_from([{"calm": 0}, {"x": 1},
                                                                                          {"calm": -1}])}))}
    if last == "assets":
        return draw(st.sampled_from([[], [{"name": "ETH", "price": 0}], [{"name": "ETH", "price": 1}] * 2,
                                     [{"name": "", "price": 1}], [{"name": "ETH", "price": float("inf")}], "ETH"]))
    if last == "tape":
        return draw(st.sampled_from(["missing.parquet", {"path": "missing.parquet", "crash_return": -1}, "",
                                     {"path": ""}, {"path": "x", "crash_high": 0.5}, {"path": "x", "start": "2020-13-01"}]))
    if last == "temperament":
        return draw(st.sampled_from([[0, 2, 0], [0, 0], [float("nan")] * 3, "calm", [0, 0, 0, 0]]))
    return draw(BAD)


@st.composite
def world(draw):
    """(scenario document, structural spoiling or None, --set items, environment)."""
    doc = draw(valid_scenario())
    sets: list[str] = []
    if draw(st.booleans()):
        s, k, v = draw(st.sampled_from(CONFIG_KEYS))
        sets.append(f"{s}.{k}={_yaml_value(draw(in_range(f'{s}.{k}', v)))}")
    if draw(st.integers(0, 2)) == 0:
        sets.append(draw(st.sampled_from(["golems.0.count=2", "golems.*.asset=BTC", "golems.-1.interval=10m",
                                          "market.regimes.*.vol=0.001", "duration=45m", "seed=5",
                                          "golems.*.temperament=[0.1, 0.2, 0.3]", "market.assets.0.price=100",
                                          "appraisal.probe_arousal.high=0.9", "market.events.0.at=20m"])))
    env: dict = {}
    how = None
    for _ in range(draw(st.sampled_from([0, 0, 1, 1, 1, 2]))):
        kind = draw(st.sampled_from(MUTATIONS))
        if kind == "scenario":
            path = draw(st.sampled_from(SCENARIO_PATHS))
            _put(doc, path, draw(bad_scenario_value(path)))
        elif kind == "config":
            s, k, v = draw(st.sampled_from(CONFIG_KEYS))
            value = draw(past_range(f"{s}.{k}", v))
            if draw(st.booleans()):
                doc.setdefault("overrides", {})[f"{s}.{k}"] = value
            else:
                sets.append(f"{s}.{k}={_yaml_value(value)}")
        elif kind == "unknown":
            where = draw(st.sampled_from(["top", "golem", "market", "override", "set", "section"]))
            typo = draw(st.sampled_from(["duraton", "colour", "cont", "top_kk", "asset\nx", "k\x1b[1m"]))
            if where == "top":
                doc[typo] = 1
            elif where == "golem":
                doc["golems"][0][typo] = 1
            elif where == "market":
                doc.setdefault("market", {})[typo] = 1
            elif where == "override":
                doc.setdefault("overrides", {})[f"retrieval.{typo}"] = 1
            elif where == "section":
                doc.setdefault("overrides", {})[f"{typo}.x"] = 1
            else:
                sets.append(f"{typo}=1")
        elif kind == "structure":
            how = draw(st.sampled_from(STRUCTURE))
        elif kind == "set":
            sets.append(draw(st.sampled_from([
                "noequals", "=5", "wat.x=1", "retrieval.top_k.x=1", "golems..count=1", "golems.5.count=1",
                "golems.asset=ETH", "golems.x.count=1", "retreival.top_k=3", "retrieval.top_k=[*a, &a 1]",
                "seed=&a [*a]", "duration.x=1", "golems.0.count.x=1", "market.tape.path=missing.parquet",
                "golems.0.asset=DOGE", "seed=" + "9" * 5000, "market.events.9.at=1h", "golems.*.count=0"])))
        else:
            env = draw(st.fixed_dictionaries({}, optional={
                "GOLEM_REFLEX": st.sampled_from(["on", "off", "maybe", "1", ""]),
                "GOLEM_REFLEX_MAX_PER_TURN": st.sampled_from(["2", "9", "lots", "-1"]),
                "GOLEM_SALIENCE_RANK": st.sampled_from(["live", "OFF", "sometimes"]),
                "GOLEM__retrieval__top_k": st.sampled_from(["4", "0", "x"]),
                "GOLEM__retrieval": st.just("5"), "GOLEM__nosuch__key": st.just("1"),
                "GOLEM_MEMORY_LIMIT": st.sampled_from(["1MiB", "lots", "2GB"])}))
    return doc, how, sets, env


def spoil(text: str, how: str | None) -> bytes:
    if how is None:
        return text.encode()
    bomb = "".join(f"{c}: &{c} [{', '.join(['*' + p] * 9) if p else ', '.join(['lol'] * 9)}]\n"
                   for p, c in zip(["", "a", "b", "c", "d", "e", "f"], "abcdefg"))
    if how == "latin1":
        return text.encode() + "name2: caf\xe9\n".encode("latin-1")
    return {
        "duplicate": lambda: text + "name: again\n",
        "dup_nested": lambda: text.replace("count:", "count: 1\n    count:", 1),
        "bomb": lambda: text + bomb,
        "bomb_overrides": lambda: text + "overrides: {retrieval: [&a [lol, lol, lol], &b [*a, *a, *a], [*b, *b]]}\n",
        "recursive": lambda: text + "loop: &x [1, *x]\n",
        "deep": lambda: text + "description:\n" + "".join("  " * (i + 1) + f"k{i}:\n" for i in range(60)) + "    x\n",
        "deep_flow": lambda: text + "description: " + "[" * 1200 + "]" * 1200 + "\n",
        "ansi_key": lambda: text + '"k\\e[31m\\nx": 1\n',
        "empty": lambda: "",
        "comment": lambda: "# nothing here\n",
        "list": lambda: "- 1\n- 2\n",
        "two_docs": lambda: text + "---\nname: b\n",
        "tag": lambda: text + "x: !!python/object/apply:os.system [echo hi]\n",
        "tab": lambda: "name: t\n\tduration: 1h\n",
        "bigint": lambda: text + "seed: " + "9" * 5000 + "\n",
        "truncated": lambda: text[: len(text) // 2],
        "huge_list": lambda: text + "description: [" + ", ".join(["1"] * 300_000) + "]\n",
        "long_list": lambda: text + "description: [" + ", ".join(["1"] * 80_000) + "]\n",
    }[how]().encode()


def _yaml_value(v) -> str:
    """A --set value as a user would type it."""
    if isinstance(v, float) and math.isnan(v):
        return ".nan"
    if isinstance(v, float) and math.isinf(v):
        return ".inf" if v > 0 else "-.inf"
    if isinstance(v, str):
        return v
    if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > 4000:
        return "9" * 1300
    return yaml.safe_dump(v, default_flow_style=True, width=10**9).strip().removesuffix("...").strip()


# ------------------------------------------------------------------------------ the property
class Timeout(Exception):
    pass


def _alarm(_signum, _frame):
    raise Timeout


def _dump(doc) -> str:
    class Dumper(yaml.SafeDumper):
        pass

    Dumper.add_representer(float, lambda d, v: d.represent_scalar(
        "tag:yaml.org,2002:float", ".nan" if math.isnan(v) else (".inf" if v > 0 else "-.inf") if math.isinf(v)
        else repr(v)))
    return yaml.dump(doc, Dumper=Dumper, allow_unicode=True, sort_keys=False, width=10**9)


def finite_tables(run: Path) -> None:
    """A finished run: every float column free of infinities (structural entries' window is the one
    legitimate inf), the heartbeats' affect and money columns present and finite, prices > 0."""
    if list((run / "heartbeats").glob("*.parquet")):      # none when every Golem starts after the end
        hb = pl.read_parquet(run / "heartbeats" / "*.parquet")
        for c in ("p", "a", "d", "intensity", "exposure", "value", "cash", "budget", "vitality", "price"):
            assert hb[c].null_count() == 0 and hb[c].is_finite().all(), c
        assert hb.select(pl.col("p", "a", "d").abs().max()).max_horizontal()[0] <= 1.0
    mk = pl.read_parquet(run / "market" / "*.parquet")
    assert (mk["close"] > 0).all() and mk["close"].is_finite().all()
    for t in ("heartbeats", "market", "entries", "retrievals", "events", "snapshots"):
        files = sorted((run / t).glob("*.parquet"))
        if not files:
            continue
        df = pl.read_parquet(files)
        for c, dt in df.schema.items():
            if dt == pl.Float64 and not (t == "entries" and c == "window_days"):
                assert not df[c].is_infinite().any(), (t, c)


def check_case(root: Path, doc: dict, how, sets: list[str], env: dict) -> str:
    from typer.testing import CliRunner

    from sim.cli import app
    case = Path(tempfile.mkdtemp(dir=root))
    f = case / "s.yaml"
    f.write_bytes(spoil(_dump(doc), how))
    args = ["validate", str(f)] + [x for s in sets for x in ("--set", s)]
    t0, c0 = time.perf_counter(), time.process_time()
    r = CliRunner().invoke(app, args, env={**ENV, **env})
    took, cpu = time.perf_counter() - t0, time.process_time() - c0
    out = r.output
    if r.exit_code == 2:
        lines = out.strip().splitlines()
        assert len(lines) == 1 and len(lines[0]) < 500 and "Traceback" not in out, (args, out)
        # 10 s of work (CPU time: a loaded machine stretches the wall clock, not the work), and
        # never a hang (60 s of wall time)
        assert cpu < 10 and took < 60, (cpu, took, args)
        return "exit 2"
    assert r.exit_code == 0 and r.exception is None, (args, r.exit_code, out, r.exception)
    COUNTS["accepted"] += 1
    if COUNTS["accepted"] % RUN_EVERY:
        return "ok"
    # a short run: at most half an hour of simulated time and 300 heartbeats of the fastest Golem (a
    # 1 s heartbeat for half an hour is 1,800 ticks, ~9 s: most of the fuzzing's run time)
    from sim.resources import interval_s
    from sim.run import prepare
    sc, cfg = prepare(f, sets=sets, environ={**ENV, **env})[:2]
    dur = min(sc.duration_s, 1800.0, 300 * min(interval_s(sc, g, cfg) for g in sc.golems))
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(120)
    try:
        # the duration as YAML reads a float back (5e-324 without a dot would be a string)
        yaml_dur = yaml.safe_dump(dur).splitlines()[0]
        r = CliRunner().invoke(app, ["run", str(f), *args[2:], "--set", f"duration={yaml_dur}", "--out", str(case / "run"),
                                     "-q"], env={**ENV, **env})
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    assert r.exit_code == 0 and r.exception is None, (args, r.output, r.exception)
    m = json.loads((case / "run" / "manifest.json").read_text())
    assert m["status"] == "complete"
    finite_tables(case / "run")
    COUNTS["runs"] += 1
    return "ok"


def test_inputs_are_accepted_and_run_or_refused_in_one_line(tmp_path):
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    COUNTS.clear()

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES <= 300, database=None,
              suppress_health_check=list(HealthCheck))
    @given(case=world())
    def check(case):
        doc, how, sets, env = case
        try:
            COUNTS[check_case(tmp_path, doc, how, sets, env)] += 1
        except AssertionError:
            COUNTS["other"] += 1
            raise
    check()
    total = COUNTS["ok"] + COUNTS["exit 2"] + COUNTS["other"]
    print(f"\nfuzzed inputs: {total} cases: ok {COUNTS['ok']} (of which run {COUNTS['runs']}), exit 2 "
          f"{COUNTS['exit 2']}, anything else {COUNTS['other']}")
    assert COUNTS["other"] == 0 and total >= EXAMPLES
    assert COUNTS["ok"] >= EXAMPLES // 5 and COUNTS["runs"] >= 1      # the generator reaches valid worlds
