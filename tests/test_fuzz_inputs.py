"""Properties over what a user can hand golem-sim (issue 61, item 7), each example run through the
real CLI in this process under a 60 s limit (a hang fails it), each outcome held to the README's
exit-status table: 0 or a refusal in one line under 500 characters (exit 2; exit 1 only where the
table allows it), never a traceback, an "internal error" or a control character printed raw.

* scenarios, `--set` values and GOLEM_* environment (`world()`): every scenario field and config
  key, with values of each class (in range, at the bounds, past them, NaN and infinities also as
  YAML spells them, wrong types, booleans, integers of thousands of digits, 2**63), YAML structures
  (duplicate keys, alias bombs, recursive aliases, deep nesting, keys with newlines or ANSI escapes,
  empty files, several documents, object tags), names with markup, escapes, other scripts or
  thousands of characters, --set items into lists and malformed ones, bytes that are not UTF-8.
  `validate` accepts within 10 s of CPU time or refuses; an accepted world (one in five) then runs
  (at most half an hour of simulated time and 300 heartbeats of its fastest Golem) to a complete
  manifest and finite tables.
* tapes (`tape_csv()`): random walks of OHLCV bars in every time format import-tape reads, spoiled
  (blank lines, two-digit years, inconsistent OHLC, missing or renamed columns, odd cells, bytes
  that are not UTF-8), as a file, a link to a file outside, a FIFO or a folder, to an --out that may
  be a FIFO, a link or a folder: a tape of exactly the bars written, or a refusal; nothing outside
  touched or quoted.
* planted run directories (`run_op`): a small complete run and the same run stopped with two
  checkpoints (made once per module), damaged 0-3 times (bytes flipped or cut, parts deleted or
  stray, files replaced by links to a file outside or by FIFOs, manifest and checkpoint fields
  edited with or without their checksum recomputed), then `report`, `replay --verify` or `resume`:
  a planted link or FIFO refused, the file outside unchanged, exit 0 only with the recorded tables.

The default suite runs 200 scenarios, 120 tapes and 15 run directories, plus the issue's
reproducers (`@example`; ~1 minute, derandomized so CI sees the same examples); the long run draws
GOLEM_FUZZ_EXAMPLES of each, at random:
    GOLEM_FUZZ_EXAMPLES=5000 .venv/bin/python -m pytest tests/test_fuzz_inputs.py -n 0 -s -q --basetemp=/tmp/golem-fuzz
(GOLEM_FUZZ_RUN_EVERY=1 runs every accepted scenario, not one in five) and prints its counts per
target. scripts/fuzz_inputs.py reuses these checks for whole-file mutations and damaged checkpoints.
"""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import stat
import tempfile
import time
from collections import Counter
from pathlib import Path

import polars as pl
import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from golem.config import default_table

EXAMPLES = int(os.environ.get("GOLEM_FUZZ_EXAMPLES", "200"))
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


#: names a user might give: markup and escapes a terminal would act on, other scripts, long ones
NAMES = ["t", "ü-world", "x y", "[/]", "[link=https://example.org]a[/link]", "[bold red]b", "\x1b[31mred\x1b[0m",
         "a\tb", "a\nb", "名前\u200b", "\u202eevil", "x" * 5_000, "🙂" * 300, "<script>alert(1)</script>",
         "%s%n{0}", "..", "/etc/passwd"]


@st.composite
def valid_scenario(draw):
    doc = {"name": draw(st.sampled_from(NAMES)),
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
MUTATIONS = ["scenario", "scenario", "config", "config", "unknown", "structure", "set", "env", "bytes"]
#: --set items holding bytes that are not UTF-8, as the shell hands them over (surrogate escapes)
UNDECODABLE_SETS = ["name=caf\udce9", "golems.0.asset=\udcff\udcfe", "\udcff=1", "retrieval.top_k=\udc80",
                    "market.tape.path=t\udcff.parquet"]
STRUCTURE = ["duplicate", "bomb", "recursive", "deep", "ansi_key", "empty", "comment", "list", "two_docs", "tag",
             "tab", "latin1", "bigint", "truncated", "deep_flow", "bomb_overrides", "huge_list", "dup_nested",
             "long_list"] + [f"spell|{k}|{v}" for k in ("count", "budget", "capital", "seed", "exposure", "prefill")
                             for v in (".NaN", "-.INF", "+.inf", "1.0e+999", "-1.0e999", "1.0e-400", "4.9e-324",
                                       "1e400", "0x7fffffffffffffff", "0o777", "1_000_000", "nan", "1.7976931348623157e308")]


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
                "golems.0.asset=DOGE", "seed=" + "9" * 5000, "market.events.9.at=1h", "golems.*.count=0",
                "name=[/]", "name=\x1b[2J", "name=" + "y" * 100_000])))
        elif kind == "bytes":
            sets.append(draw(st.sampled_from(UNDECODABLE_SETS)))
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
    if how.startswith("spell|"):           # a number spelled as YAML spells it: NaN, infinities, hex, underflow
        _, key, spelling = how.split("|")
        return text.replace(f"{key}: ", f"{key}: {spelling} #", 1).encode()
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


# ------------------------------------------------------------------------- one command, checked
class Hung(BaseException):
    """Raised by the per-command time limit: not an Exception, so no handler of the code under test takes it."""


def _expire(_signum, _frame):
    raise Hung


def invoke(args: list, env: dict | None = None, limit: float = 60.0) -> tuple[str, int, str, float]:
    """('ok' | 'hang' | 'crash', exit status, output, seconds) of `golem-sim ARGS` in this process,
    stopped after `limit` seconds of wall time (a FIFO opened for reading blocks until a writer comes)."""
    from typer.testing import CliRunner

    from sim.cli import app
    old = signal.signal(signal.SIGALRM, _expire)
    signal.setitimer(signal.ITIMER_REAL, limit)
    t0 = time.perf_counter()
    try:
        r = CliRunner().invoke(app, [str(a) for a in args], env={**ENV, **(env or {})})
    except Hung:
        return "hang", -1, "", time.perf_counter() - t0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    took = time.perf_counter() - t0
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        return "crash", r.exit_code, f"{type(r.exception).__name__}: {r.exception}", took
    return "ok", r.exit_code, r.output, took


#: the README's exit statuses (SIGTERM's 143 cannot come from an input)
EXIT_STATUSES = (0, 1, 2, 130)
#: a control character printed raw (a name's ANSI escape reaching the terminal); tab and newline are layout
RAW_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\x9b]")


def problem(result: tuple, allowed: tuple = (0, 2), verify: bool = False) -> str | None:
    """None, or what is wrong with a command's outcome: a hang, a traceback or escaped exception, an
    exit status outside `allowed` (a subset of the README's table), an "internal error", a refusal
    that is not one line under 500 characters, or a control character printed unescaped. (`replay
    --verify` exit 1 is a report: a line per difference.)"""
    status, code, out, _ = result
    if status != "ok":
        return f"{status}: {out[:300]}"
    if code not in EXIT_STATUSES or code not in allowed:
        return f"exit {code}: {out[:300]}"
    if "Traceback" in out or "internal error" in out:
        return f"traceback/internal error: {out[:300]}"
    if code and not (clean_error(out) or verify and code == 1 and all(0 < len(x) < 500 for x in out.splitlines())):
        return f"exit {code} but not one line: {out[:300]}"
    if RAW_CONTROL.search(out):
        return f"raw control character printed: {out[:300]!r}"
    return None


def clean_error(out: str) -> bool:
    lines = out.strip().splitlines()
    return len(lines) == 1 and len(lines[0]) < 500 and "Traceback" not in out


def snapshot(folder: Path) -> dict:
    """Every file under `folder` by kind, content and mtime (what "left as it was" means)."""
    out = {}
    for p in sorted(folder.rglob("*")):
        st_ = p.lstat()
        out[str(p)] = (stat.S_IFMT(st_.st_mode), p.read_bytes() if p.is_file() and not p.is_symlink() else None,
                       st_.st_mtime_ns)
    return out


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
                assert not df[c].is_nan().any() and not df[c].is_infinite().any(), (t, c)


def _report(name: str, counts: Counter, examples: int) -> None:
    print(f"\n{name}: {counts['tried']} examples ({examples} asked): " +
          ", ".join(f"{k} {v}" for k, v in sorted(counts.items()) if k != "tried"))


# --------------------------------------------------------------- scenarios, --set and environment
def _dump(doc) -> str:
    class Dumper(yaml.SafeDumper):
        pass

    Dumper.add_representer(float, lambda d, v: d.represent_scalar(
        "tag:yaml.org,2002:float", ".nan" if math.isnan(v) else (".inf" if v > 0 else "-.inf") if math.isinf(v)
        else repr(v)))
    return yaml.dump(doc, Dumper=Dumper, allow_unicode=True, sort_keys=False, width=10**9)


def check_case(root: Path, doc: dict, how, sets: list[str], env: dict) -> str:
    case = Path(tempfile.mkdtemp(dir=root))
    f = case / "s.yaml"
    f.write_bytes(spoil(_dump(doc), how))
    args = ["validate", str(f)] + [x for s in sets for x in ("--set", s)]
    c0 = time.process_time()
    r = invoke(args, env)
    cpu = time.process_time() - c0
    assert problem(r) is None, ([a[:300] for a in args], problem(r))
    # 10 s of work (CPU time: a loaded machine stretches the wall clock, not the work)
    assert cpu < 10, (cpu, args)
    if r[1] == 2:
        return "exit 2"
    COUNTS["accepted"] += 1
    if COUNTS["accepted"] % RUN_EVERY:
        return "ok"
    # a short run: at most half an hour of simulated time and 300 heartbeats of the fastest Golem (a
    # 1 s heartbeat for half an hour is 1,800 ticks, ~9 s: most of the fuzzing's run time)
    from sim.resources import interval_s
    from sim.run import prepare
    sc, cfg = prepare(f, sets=sets, environ={**ENV, **env})[:2]
    dur = min(sc.duration_s, 1800.0, 300 * min(interval_s(sc, g, cfg) for g in sc.golems))
    # the duration as YAML reads a float back (5e-324 without a dot would be a string)
    yaml_dur = yaml.safe_dump(dur).splitlines()[0]
    r = invoke(["run", str(f), *args[2:], "--set", f"duration={yaml_dur}", "--out", str(case / "run"), "-q"], env,
               limit=120)
    assert problem(r, (0,)) is None, (args, problem(r))
    m = json.loads((case / "run" / "manifest.json").read_text())
    assert m["status"] == "complete"
    finite_tables(case / "run")
    COUNTS["runs"] += 1
    return "ok"


def test_scenarios_and_sets_are_accepted_and_run_or_refused_in_one_line(tmp_path):
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    COUNTS.clear()

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES <= 300, database=None,
              suppress_health_check=list(HealthCheck))
    @given(case=world())
    # the issue's reproducers, always tried: inf from a tiny budget, a tiny price, 500 overlapping gas
    # spikes; rich markup in a name; a --set value that is not UTF-8; a name of 100,000 characters
    @example(case=({"name": "t", "duration": "1h", "golems": [{"count": 2, "budget": 5e-324}]}, None, [], {}))
    @example(case=({"name": "t", "duration": "1h", "golems": [{"count": 2}],
                    "market": {"assets": [{"name": "ETH", "price": 1e-320}]}}, None, [], {}))
    @example(case=({"name": "t", "duration": "1h", "golems": [{"count": 2}], "market": {"events": [
        {"kind": "gas_spike", "at": "10m", "duration": "1h", "gas_multiplier": 100}] * 500}}, None, [], {}))
    @example(case=({"name": "[/]", "duration": "1h", "golems": [{"count": 2}]}, None, ["name=caf\udce9"], {}))
    @example(case=({"name": "t", "duration": "1h", "golems": [{"count": 2}]}, None, ["name=" + "y" * 100_000], {}))
    def check(case):
        doc, how, sets, env = case
        try:
            COUNTS[check_case(tmp_path, doc, how, sets, env)] += 1
        except AssertionError:
            COUNTS["other"] += 1
            raise
    check()
    total = COUNTS["ok"] + COUNTS["exit 2"] + COUNTS["other"]
    print(f"\nfuzzed scenarios: {total} cases: ok {COUNTS['ok']} (of which run {COUNTS['runs']}), exit 2 "
          f"{COUNTS['exit 2']}, anything else {COUNTS['other']}")
    assert COUNTS["other"] == 0 and total >= EXAMPLES
    assert COUNTS["ok"] >= EXAMPLES // 5 and COUNTS["runs"] >= 1      # the generator reaches valid worlds


# ------------------------------------------------------------------------------------ tapes
TAPE_EXAMPLES = int(os.environ.get("GOLEM_FUZZ_EXAMPLES", "120"))
SECRET = b"root:$6$not-a-tape:19000:0:99999:7:::\n"
TIME_FORMATS = ["epoch_s", "epoch_ms", "iso", "iso_z", "space", "two_digit_year", "slashes"]
#: spoilings that leave every bar as written (the tape must then hold exactly these bars)
HARMLESS = {"blank_trailing", "blank_middle", "crlf", "bom", "quoted", "spaces", "extra_column"}
SPOILS = sorted(HARMLESS | {"high_below_close", "low_above_open", "cell", "duplicate_time", "unsorted", "latin1",
                            "missing_cell", "extra_cell", "drop_column", "empty", "header_only", "markup", "long_cell",
                            "nul", "lone_cr", "rename_column"})
#: the issue's findings, drawn more often: a close above the high, an open below the low, a trailing blank line
ISSUE_SPOILS = ["high_below_close", "low_above_open", "blank_trailing"]
CELLS = ["nan", "NaN", "inf", "-inf", "", "-1", "0", "1e400", "1e-320", "abc", "1,5", "0x10", "9" * 400, "[/]",
         "\x1b[31m", "1e308", "2**64"]


@st.composite
def tape_csv(draw):
    """(CSV bytes, the bars as written or None when a spoiling changed them, import-tape options)."""
    returns = draw(st.lists(st.floats(-0.2, 0.2), min_size=draw(st.sampled_from([1, 2, 2, 2])), max_size=40))
    bar = draw(st.sampled_from([60, 300, 3600, 7200, 86400, 604800]))
    t = draw(st.integers(1_000_000_000, 1_900_000_000)) // bar * bar
    price = draw(st.one_of(st.floats(1e-6, 1e9), st.sampled_from([1e-300, 1e300, 5e-324, 1.0])))
    bars = []
    for r in returns:
        o, c = price, price * (1 + r)
        h, lo = max(o, c) * (1 + abs(r) / 3), min(o, c) * (1 - abs(r) / 4)
        bars.append([t, o, h, lo, c, abs(r) * 1e6])
        t, price = t + bar, c
    fmt = draw(st.sampled_from(TIME_FORMATS))
    if fmt == "slashes" and bar < 86400:      # a date alone names a day
        fmt = "iso"
    opts: list[str] = []

    def when(s: int) -> str:
        from datetime import datetime, timezone
        d = datetime.fromtimestamp(s, tz=timezone.utc)
        return {"epoch_s": str(s), "epoch_ms": str(s * 1000), "iso": d.strftime("%Y-%m-%dT%H:%M:%S"),
                "iso_z": d.strftime("%Y-%m-%dT%H:%M:%SZ"), "space": d.strftime("%Y-%m-%d %H:%M:%S"),
                "two_digit_year": d.strftime("%y-%m-%d %H:%M"), "slashes": d.strftime("%d/%m/%Y")}[fmt]
    if fmt == "slashes":
        opts += ["--time-format", "%d/%m/%Y"]
    header = draw(st.sampled_from([["time", "open", "high", "low", "close", "volume"],
                                   ["Date", "Open", "High", "Low", "Close", "Volume"],
                                   ["timestamp", "o", "h", "l", "c", "v"],
                                   ["open_time", "open", "high", "low", "close", "volume"]]))
    rows = [[when(b[0])] + [repr(x) for x in b[1:]] for b in bars]
    spoils = draw(st.lists(st.sampled_from(SPOILS + 3 * ISSUE_SPOILS), max_size=draw(st.sampled_from([0, 0, 1, 1, 2, 3])), unique=True))
    exact = set(spoils) <= HARMLESS
    i = draw(st.integers(0, len(rows) - 1))
    col = draw(st.integers(1, 5))
    for sp in sorted(spoils, key=lambda sp: sp not in ("high_below_close", "low_above_open")):   # numbers first
        if sp == "high_below_close":
            rows[i][2] = repr(float(rows[i][4]) * 0.9)
        elif sp == "low_above_open":
            rows[i][3] = repr(float(rows[i][1]) * 1.1)
        elif sp == "cell":
            rows[i][draw(st.integers(0, len(rows[i]) - 1))] = draw(st.sampled_from(CELLS))
        elif sp == "duplicate_time":
            rows.insert(i, list(rows[i]))
        elif sp == "unsorted" and len(rows) > 1:
            rows.reverse()
        elif sp == "missing_cell":
            del rows[i][min(col, len(rows[i]) - 1)]
        elif sp == "extra_cell":
            rows[i].append("7")
        elif sp == "drop_column":
            for r in [header] + rows:
                if len(r) > col:
                    del r[col]
        elif sp == "rename_column":
            header[col] = draw(st.sampled_from(["close", "", "price", "Open", "ope n"]))
        elif sp == "extra_column":
            header.append("trades")
            for r in rows:
                r.append("3")
        elif sp == "quoted":
            rows = [[f'"{c}"' for c in r] for r in rows]
        elif sp == "spaces":
            rows = [[f" {c} " if k else c for k, c in enumerate(r)] for r in rows]
        elif sp == "markup":
            rows[i][0] = draw(st.sampled_from(["[/]", "[link=x]y", "\x1b[2J", "名前"]))
        elif sp == "long_cell":
            rows[i][min(col, len(rows[i]) - 1)] = "1" * 100_000
    if header[1] not in ("open", "Open"):
        opts += [x for c, h in zip(("open", "high", "low", "close", "volume"), header[1:]) for x in ("--col", f"{c}={h}")]
    if fmt in ("epoch_s", "epoch_ms") and draw(st.integers(0, 3)):
        opts += ["--time-unit", "s" if fmt == "epoch_s" else "ms"]
    if draw(st.integers(0, 4)) == 0:
        opts += ["--order", draw(st.sampled_from(["sort", "dedupe", "strict", "random"]))]
    nl = "\r\n" if "crlf" in spoils else "\n"
    lines = [",".join(header)] + [",".join(r) for r in rows]
    if "blank_middle" in spoils and len(lines) > 2:
        lines.insert(2, "")
    text = nl.join(lines) + nl + (nl * draw(st.integers(1, 3)) if "blank_trailing" in spoils else "")
    if "empty" in spoils:
        text = ""
    elif "header_only" in spoils:
        text = lines[0] + nl
    data = text.encode()
    if "bom" in spoils:
        data = b"\xef\xbb\xbf" + data
    if "latin1" in spoils:
        data = data.replace(b"\n", b"\ncaf\xe9,", 1)
    if "nul" in spoils:
        data = data[: len(data) // 2] + b"\x00" + data[len(data) // 2:]
    if "lone_cr" in spoils:
        data = data.replace(b"\n", b"\r")
    kind = draw(st.sampled_from(["file"] * 12 + ["link", "fifo", "directory", "missing"]))
    out_kind = draw(st.sampled_from(["new"] * 8 + ["regular", "fifo", "link", "directory", "no_parent"]))
    return data, (bars if exact and "--order" not in opts else None), opts, kind, out_kind, fmt


def check_tape(root: Path, data: bytes, bars, opts: list[str], kind: str, out_kind: str, fmt: str) -> str:
    case = Path(tempfile.mkdtemp(dir=root))
    outside = case / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(SECRET)
    f = case / "bars.csv"
    if kind == "file":
        f.write_bytes(data)
    elif kind == "link":
        f.symlink_to(outside / "secret")
    elif kind == "fifo":
        os.mkfifo(f)
    elif kind == "directory":
        f.mkdir()
    out = case / ("nowhere/t.parquet" if out_kind == "no_parent" else "t.parquet")
    if out_kind == "regular":
        out.write_bytes(b"old")
    elif out_kind == "fifo":
        os.mkfifo(out)
    elif out_kind == "link":
        out.symlink_to(outside / "secret")
    elif out_kind == "directory":
        out.mkdir()
    before = snapshot(outside)
    r = invoke(["import-tape", f, "--out", out, "--asset", "BTC", *opts], limit=60)
    assert problem(r) is None, (opts, kind, out_kind, problem(r))
    assert snapshot(outside) == before, "a file outside was touched"
    assert SECRET.decode().split(":")[1] not in r[2], "the linked file's content was printed"
    if out_kind in ("fifo", "link", "directory"):
        assert stat.S_IFMT(out.lstat().st_mode) == {"fifo": stat.S_IFIFO, "link": stat.S_IFLNK,
                                                    "directory": stat.S_IFDIR}[out_kind], "--out replaced"
    if r[1] == 2:
        return "exit 2"
    assert kind == "file", f"a {kind} read as a tape"
    tape = pl.read_parquet(out)
    for c in ("open", "high", "low", "close"):
        assert tape[c].is_finite().all() and (tape[c] > 0).all(), c
    assert tape["volume"].is_finite().all() and (tape["volume"] >= 0).all()
    assert tape.select((pl.col("low") <= pl.min_horizontal("open", "close")) &
                       (pl.col("high") >= pl.max_horizontal("open", "close")))[:, 0].all(), "OHLC inconsistent"
    assert (tape["time_ms"].diff().drop_nulls() > 0).all()
    years = tape.select(pl.from_epoch("time_ms", time_unit="ms").dt.year())["time_ms"]
    assert years.min() >= 1970 and years.max() <= 2100, f"years {years.min()}..{years.max()} ({fmt})"
    if bars is not None:                     # the bars as written, every one, unchanged
        assert tape.height == len(bars), (tape.height, len(bars))
        assert tape["time_ms"].to_list() == [b[0] * 1000 for b in bars]
        for k, c in enumerate(("open", "high", "low", "close", "volume"), start=1):
            assert tape[c].to_list() == [b[k] for b in bars], c
    return "ok"


def test_tapes_are_imported_as_written_or_refused_in_one_line(tmp_path):
    """import-tape over generated CSVs (random walks of 1-40 bars of a minute to a week, every time
    format it reads, then spoiled: blank lines, two-digit years, inconsistent OHLC, missing or
    renamed columns, odd cells, bytes that are not UTF-8), a tape that is a link to a file outside,
    a FIFO or a folder, and an --out that is a FIFO, a link or a folder: exit 0 with a tape holding
    exactly the bars written (finite, OHLC-consistent, increasing, years as written) or exit 2 in
    one line; the file outside unchanged and never quoted, an --out special file left as it was."""
    counts: Counter = Counter()

    @settings(max_examples=TAPE_EXAMPLES, deadline=None, derandomize=TAPE_EXAMPLES <= 300, database=None,
              suppress_health_check=list(HealthCheck))
    @given(case=tape_csv())
    # the issue's reproducers: two-digit years (read as year 17), a close above the high
    @example(case=(b"time,open,high,low,close,volume\n17-03-01 00:00,1,1.1,0.9,1,5\n17-03-01 01:00,1,1.1,0.9,1,5\n",
                   None, [], "file", "new", "two_digit_year"))
    @example(case=(b"time,open,high,low,close,volume\n2017-03-01 00:00,1,1.1,0.9,1.2,5\n2017-03-01 01:00,1,1.1,0.9,1,5\n",
                   None, [], "file", "new", "space"))
    @example(case=(b"time,open,high,low,close,volume\n2017-03-01 00:00,1,1.1,0.9,1,5\n2017-03-01 01:00,1,1.1,0.9,1,5\n",
                   None, [], "link", "fifo", "space"))
    def check(case):
        counts["tried"] += 1
        try:
            counts[check_tape(tmp_path, *case)] += 1
        except AssertionError:
            counts["other"] += 1
            raise
    check()
    _report("fuzzed tapes", counts, TAPE_EXAMPLES)
    assert counts["other"] == 0 and counts["ok"] >= TAPE_EXAMPLES // 10


# ---------------------------------------------------------------------- planted run directories
RUN_EXAMPLES = int(os.environ.get("GOLEM_FUZZ_EXAMPLES", "15"))
SMALL = """name: fuzz
duration: 2h
seed: 3
overrides: {recording.flush_every_s: 1800, grimoire.capacity: 64}
golems:
  - {count: 1, clade: a, asset: ETH}
  - {count: 1, clade: b, asset: BTC, interval: 450}
"""


@pytest.fixture(scope="module")
def small_runs(tmp_path_factory):
    """A complete 2-Golem run of 2 h, and the same run stopped at 1.6 h with two checkpoints."""
    from conftest import complete_and_stopped
    from sim.recorder import content_hashes
    d = tmp_path_factory.mktemp("fuzz-runs")
    complete_and_stopped(d, SMALL, 1.6 * 3600)
    return d, {k: content_hashes(d / k) for k in ("complete", "stopped")}


JSON_VALUES = st.sampled_from([None, "x", -1, 0, 8, 2**64, 1.5, float("inf"), [], {}, [1], {"a": 1}, True,
                               "../../outside/secret", "0" * 64])
MANIFEST_KEYS = ["status", "seed", "scenario", "config", "files", "hashes", "row_counts", "format", "stopped_at_s",
                 "tape", "sets", "versions", "failure", "scenario.duration", "scenario.golems", "config.retrieval"]
CHECKPOINT_KEYS = ["format", "now_s", "part", "pending", "stats", "tape", "parts", "arrays_sha256", "array_offsets",
                   "grimoire", "rng", "seed"]
USED_NAMES = ["manifest.json", "manifest.json.tmp", ".reserve", ".lock", "log.jsonl", "report.html", "heartbeats",
              "market", "events", "checkpoint", "checkpoint/spare.arrays"]
run_op = st.one_of(
    # the issue's own: a flipped byte inside a part's data, a part deleted, a stray part
    st.tuples(st.sampled_from(["flip_part", "flip_part", "delete_part", "stray"]), st.integers(0, 10**6),
              st.integers(0, 10**6)),
    st.tuples(st.sampled_from(["flip", "truncate"]), st.integers(0, 10**6), st.integers(0, 10**6)),
    st.tuples(st.sampled_from(["delete", "stray", "link", "fifo"]), st.integers(0, 10**6), st.booleans()),
    st.tuples(st.sampled_from(["link_name", "fifo_name"]), st.sampled_from(USED_NAMES), st.booleans()),
    st.tuples(st.just("manifest"), st.sampled_from(MANIFEST_KEYS), JSON_VALUES, st.booleans()),
    st.tuples(st.just("checkpoint"), st.sampled_from(CHECKPOINT_KEYS), JSON_VALUES, st.booleans(), st.booleans()),
)


def _files(run: Path) -> list[Path]:
    return sorted(p for p in run.rglob("*") if p.is_file() and not p.is_symlink())


def _set(doc: dict, dotted: str, value) -> None:
    *up, last = dotted.split(".")
    for k in up:
        doc = doc.setdefault(k, {}) if isinstance(doc, dict) else {}
    if isinstance(doc, dict):
        if value is None and last in doc and dotted != "failure":
            del doc[last]
        else:
            doc[last] = value


def _regular(p: Path) -> bool:
    """A regular file, not a link: what `plant` may read and edit (a planted FIFO would block it)."""
    return p.is_file() and not p.is_symlink()


def plant(run: Path, outside: Path, op: tuple) -> bool:
    """Apply one damage to `run`; True when it planted a link or special file at a name the run uses."""
    from sim import checkpoint as ckm
    from sim import rundir
    files = _files(run)
    kind = op[0]
    parts = [f for f in files if f.suffix == ".parquet"]
    if kind in ("flip_part", "delete_part", "stray"):
        if not parts:
            return False
        files, kind = parts, kind.removesuffix("_part")
        if kind == "flip":                      # inside the data pages, between the header and the footer
            size = files[op[1] % len(files)].stat().st_size
            op = (kind, op[1], size // 4 + op[2] % max(size // 4, 1))
    if kind in ("flip", "truncate", "delete", "stray", "link", "fifo") and not files:
        return False
    if kind in ("flip", "truncate"):
        f = files[op[1] % len(files)]
        data = bytearray(f.read_bytes())
        if kind == "truncate" or not data:
            f.write_bytes(bytes(data[: op[2] % (len(data) + 1)]))
        else:
            data[op[2] % len(data)] ^= 1 << (op[2] % 8)
            f.write_bytes(bytes(data))
    elif kind == "delete":
        files[op[1] % len(files)].unlink()
    elif kind == "stray":
        f = parts[op[1] % len(parts)]
        k = (99 if op[2] % 2 else 0) + op[1] % 7
        while f.with_name(f"part-{k:05d}.parquet").exists():
            k += 1
        shutil.copy(f, f.with_name(f"part-{k:05d}.parquet"))
    elif kind in ("link", "fifo", "link_name", "fifo_name"):
        p = files[op[1] % len(files)] if kind in ("link", "fifo") else run / op[1]
        if p.is_dir() and not p.is_symlink():
            if kind.startswith("fifo"):
                return False
            moved = outside / f"{p.name}-moved"
            if moved.exists():
                return False
            shutil.move(p, moved)
            p.symlink_to(moved)
            return True
        if p.is_symlink() or p.exists():
            p.unlink()
        if not p.parent.is_dir() or p.parent.is_symlink():
            return False
        if kind.startswith("link"):
            p.symlink_to(outside / "secret")
        else:
            os.mkfifo(p)
        return True
    elif kind == "manifest":
        _, key, value, reseal = op
        mp = run / "manifest.json"
        if not _regular(mp):
            return False
        try:
            m = json.loads(mp.read_bytes())
        except (ValueError, OSError):
            return False
        if not isinstance(m, dict):
            return False
        m.pop("sha256", None)
        _set(m, key, value)
        if reseal:
            rundir.write_manifest(run, m)
        else:
            mp.write_text(json.dumps(m))
    else:
        _, key, value, reseal, newest = op
        states = [s for s in sorted((run / "checkpoint").glob("state-*.json")) if _regular(s)]
        if not states or (run / "checkpoint").is_symlink():
            return False
        s = states[-1 if newest else 0]
        try:
            meta = json.loads(s.read_bytes())
        except (ValueError, OSError):
            return False
        if not isinstance(meta, dict):
            return False
        meta.pop("sha256", None)
        meta[key] = value
        if reseal:
            ckm._write_meta(s, meta)
        else:
            s.write_text(json.dumps(meta))
    return False


COMMANDS = {"complete": ["report", "replay", "replay", "resume"], "stopped": ["report", "resume", "resume", "replay"]}


def _modes(run: Path) -> list[int]:
    """The lstat modes of every name below `run`, links not followed."""
    out = []
    for top, dirs, files in os.walk(run, followlinks=False):
        out += [os.lstat(os.path.join(top, n)).st_mode for n in dirs + files]
    return out


def check_run_dir(root: Path, small_runs, base: str, ops: list, cmd: str) -> str:
    from sim.recorder import content_hashes
    src, hashes = small_runs
    case = Path(tempfile.mkdtemp(dir=root))
    run = case / "run"
    shutil.copytree(src / base, run, symlinks=True)
    outside = case / "outside"
    outside.mkdir()
    (outside / "secret").write_bytes(SECRET)
    for op in ops:
        plant(run, outside, op)
    # what is planted is what the run directory holds after every op (a later op may remove a plant:
    # rewriting the manifest replaces a linked manifest.json.tmp): a link or a special file anywhere in it
    planted = any(not (stat.S_ISREG(m) or stat.S_ISDIR(m)) for m in _modes(run))
    before = snapshot(outside)
    args = {"report": ["report", run, "-q"], "replay": ["replay", run, "--verify"], "resume": ["resume", run, "-q"]}[cmd]
    r = invoke(args, limit=60)
    allowed = {"report": (0, 2), "replay": (0, 1, 2), "resume": (0, 1, 2)}[cmd]
    assert problem(r, allowed, cmd == "replay") is None, (base, ops, cmd, problem(r, allowed, cmd == "replay"))
    assert snapshot(outside) == before, (base, ops, cmd, "a file outside the run was touched")
    assert SECRET.decode().split(":")[1] not in r[2], (base, ops, cmd, "the linked file's content was printed")
    if planted:
        assert r[1] == 2, (base, ops, cmd, "a planted link or special file was not refused", r[2][:300])
    if r[1] != 0:
        return f"exit {r[1]}"
    # exit 0: what the command read is what the run recorded (a resume: what the uninterrupted run recorded)
    if cmd == "resume":
        m = json.loads((run / "manifest.json").read_text())
        assert m["status"] == "complete", (base, ops, m["status"])
        assert content_hashes(run) == hashes["complete"], (base, ops, "resume: tables differ from the complete run")
        finite_tables(run)
    else:
        assert content_hashes(run) == hashes[base], (base, ops, cmd, "exit 0 over damaged tables")
    return "ok"


def test_planted_run_directories_are_refused_or_read_as_recorded(tmp_path, small_runs):
    """report / replay --verify / resume over a small complete run and the same run stopped with
    two checkpoints, after 1-3 damages: bytes flipped or cut in any file, files deleted, stray
    parts, any file or a name the run uses (manifest, log, .lock, .reserve, report.html, a table or
    the checkpoint folder) replaced by a link to a file outside or by a FIFO, manifest or
    checkpoint fields set to odd JSON with or without their checksum recomputed. Exit statuses
    from the README's table, one line, no hang; a planted link or FIFO refused (exit 2); the file
    outside unchanged and never quoted; exit 0 only with the tables the run recorded (resume: those
    of the uninterrupted run, complete and finite)."""
    counts: Counter = Counter()

    @settings(max_examples=RUN_EXAMPLES, deadline=None, derandomize=RUN_EXAMPLES <= 300, database=None,
              suppress_health_check=list(HealthCheck))
    @given(base=st.sampled_from(["complete", "stopped"]), ops=st.lists(run_op, min_size=0, max_size=3),
           pick=st.integers(0, 3))
    # the issue's reproducers: links at .reserve, manifest.json.tmp, checkpoint/spare.arrays, log.jsonl, a
    # table folder; a FIFO as manifest or .lock; a flipped byte, a deleted part of an interrupted run; a
    # stray part taken in by resume; a manifest without its sha256; a newest checkpoint of "format": 8
    @example(base="stopped", ops=[("link_name", ".reserve", False)], pick=1)
    @example(base="stopped", ops=[("link_name", "manifest.json.tmp", False)], pick=1)
    @example(base="stopped", ops=[("link_name", "checkpoint/spare.arrays", False)], pick=1)
    @example(base="complete", ops=[("link_name", "log.jsonl", False)], pick=1)
    @example(base="complete", ops=[("link_name", "heartbeats", False)], pick=1)
    @example(base="stopped", ops=[("fifo_name", "manifest.json", False)], pick=0)
    @example(base="stopped", ops=[("fifo_name", ".lock", False)], pick=1)
    @example(base="stopped", ops=[("flip_part", 0, 0)], pick=0)
    @example(base="stopped", ops=[("delete_part", 3, 0)], pick=0)
    @example(base="stopped", ops=[("stray", 5, 1)], pick=1)
    @example(base="complete", ops=[("manifest", "status", "complete", False)], pick=1)
    @example(base="stopped", ops=[("checkpoint", "format", 8, False, True)], pick=1)
    def check(base, ops, pick):
        counts["tried"] += 1
        try:
            counts[check_run_dir(tmp_path, small_runs, base, ops, COMMANDS[base][pick])] += 1
        except AssertionError:
            counts["other"] += 1
            raise
    check()
    _report("fuzzed run directories", counts, RUN_EXAMPLES)
    assert counts["other"] == 0 and counts["ok"] >= 1 and counts["exit 2"] >= 1
