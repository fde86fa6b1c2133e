"""Inputs that are not what they look like: special files given as inputs, valid-looking numbers
that overflow, tapes whose rows contradict themselves or lack history, and what `validate`
must refuse because `run` would. Each is one line, exit 2, quickly; nothing hangs or fills memory."""
from __future__ import annotations

import math
import os
import re
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from conftest import cli, table

GOOD = """name: t
duration: 2h
golems:
  - {count: 2}
"""


def in_time(fn, seconds: float = 20.0):
    """fn() in a thread that must finish within `seconds` (a FIFO read would block forever)."""
    box: dict = {}

    def go():
        try:
            box["out"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            box["exc"] = exc
    t = threading.Thread(target=go, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"still running after {seconds} s"
    if "exc" in box:
        raise box["exc"]
    return box["out"]


def one_line(code: int, out: str, *expect: str) -> str:
    assert code == 2, out
    assert "Traceback" not in out
    lines = out.strip().splitlines()
    assert len(lines) == 1, out
    for e in expect:
        assert e in lines[0], (e, lines[0])
    return lines[0]


# ------------------------------------------------------------------------------ special files
@pytest.fixture(params=["fifo", "/dev/zero", "/dev/urandom"])
def special(request, tmp_path) -> tuple[Path, str]:
    """(a special file, what the error calls it)."""
    if request.param == "fifo":
        p = tmp_path / "pipe.csv"
        os.mkfifo(p)
        return p, "is a FIFO (named pipe)"
    return Path(request.param), "is a character device"


def test_special_files_as_scenario_config_sweep_and_tape_are_refused_at_once(special, tmp_path):
    path, kind = special
    good = tmp_path / "s.yaml"
    good.write_text(GOOD)
    one_line(*in_time(lambda: cli("validate", path)), str(path), kind, "expected a YAML file")
    one_line(*in_time(lambda: cli("validate", good, "--config", path)), str(path), kind)
    one_line(*in_time(lambda: cli("sweep", path, "--out", tmp_path / "sw")), str(path), kind)
    one_line(*in_time(lambda: cli("validate", good, "--set", f"market.tape={path}")), str(path), kind,
             "expected a Parquet tape file")
    one_line(*in_time(lambda: cli("import-tape", path, "--format", "csv", "--out", tmp_path / "t.parquet")),
             str(path), kind, "expected a tape file")
    one_line(*in_time(lambda: cli("import-tape", path, "--format", "json", "--out", tmp_path / "t.parquet")),
             str(path), kind)
    assert not (tmp_path / "t.parquet").exists() and not (tmp_path / "sw").exists()


def test_a_directory_and_a_symlink_to_a_device(tmp_path):
    link = tmp_path / "zero.yaml"
    link.symlink_to("/dev/zero")
    one_line(*in_time(lambda: cli("validate", link)), "is a character device")   # fstat of the opened file
    one_line(*cli("validate", tmp_path), "is a directory")


def test_input_reads_stop_at_their_cap(tmp_path):
    """The cap holds whatever the file says its size is: at most limit + 1 bytes are read."""
    from sim.errors import InputError
    from sim.yaml_input import read_input
    f = tmp_path / "a.txt"
    f.write_bytes(b"x" * 100)
    assert read_input(f, 100, "a file") == b"x" * 100
    with pytest.raises(InputError, match=r"larger than 99 bytes; expected a file of at most 99 bytes"):
        read_input(f, 99, "a file")
    with pytest.raises(InputError, match="is a character device"):
        read_input("/dev/zero", 10, "a file")


def test_json_tapes_have_a_size_cap(tmp_path, monkeypatch):
    from sim import tapes
    from sim.tapes import TapeError, import_tape
    f = tmp_path / "b.json"
    f.write_text('[{"timestamp": "2020-01-01", "open": 1, "high": 1, "low": 1, "close": 1}]')
    monkeypatch.setattr(tapes, "MAX_JSON_BYTES", 20)
    with pytest.raises(TapeError, match=r"b\.json: larger than 20 bytes"):
        import_tape([f])


# ------------------------------------------------------------------------------ numbers that overflow
def _gas_spikes(n: int, mult: float, base: float = 30.0, gap_h: float = 0.0) -> str:
    ev = "\n".join(f"    - {{kind: gas_spike, at: {1 + i * gap_h}h, duration: 1h, gas_multiplier: {mult}}}"
                   for i in range(n))
    return GOOD + f"market:\n  gas: {{base_gwei: {base}}}\n  events:\n{ev}\n"


@pytest.mark.parametrize("text, expect", [
    # 500 overlapping spikes: 30 x 1e6^500 gwei is inf; the second already passes 1e12 (30 x 1e12 = 3e13)
    (_gas_spikes(500, 1e6), ["market.events.1.gas_multiplier", "gas reaches 3e+13 gwei", "at most 1e+12 gwei"]),
    # 1,000 gwei x 1,000 x 1,000 = 1e9 fits; x 1,001 a third time (1.001e12) does not
    (_gas_spikes(3, 1000.0, base=1000.0).replace("gas_multiplier: 1000.0}\n",
                                                 "gas_multiplier: 1001.0}\n"),
     ["market.events.2.gas_multiplier", "1e+12 gwei"]),
    (GOOD.replace("count: 2", "count: 2, budget: 5.0e-324"), ["golems.0.budget", "greater than or equal to 0.01"]),
    (GOOD.replace("count: 2", "count: 2, capital: 1.0e-300"), ["golems.0.capital", "greater than or equal to 0.01"]),
    (GOOD + "market: {assets: [{name: X, price: 1.0e-320}]}\n", ["market.assets.0.price", "0.000000000001"]),
])
def test_values_that_overflow_are_refused_at_validate(tmp_path, text, expect):
    f = tmp_path / "s.yaml"
    f.write_text(text)
    one_line(*cli("validate", f), *expect)


def test_stacked_impacts_that_take_a_price_below_the_least_price_are_refused(tmp_path):
    """74 flash crashes of log impact -10 at once: ETH at 3000 x e^-740 = 1.3e-318 (positive, but
    any trade's units = money / price would be inf); 70 of them (3000 x e^-700 = 3e-301) too."""
    for n, value in ((74, "1.259867e-318"), (70, "2.95")):
        ev = "\n".join("    - {kind: flash_crash, at: 1h, asset: ETH, duration: 5m, impact: -10}" for _ in range(n))
        f = tmp_path / "s.yaml"
        f.write_text(GOOD.replace("2h", "3h").replace("count: 2", "count: 2, asset: ETH") + f"market:\n  events:\n{ev}\n")
        one_line(*cli("validate", f), "market: the close price of ETH is " + value, "at bar 12 (1.0 h)",
                 "finite and at least 1e-12")


def test_spikes_that_do_not_overlap_and_spikes_under_the_cap_are_valid(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(_gas_spikes(3, 1e6, gap_h=2))             # one at a time: 3e7 gwei each
    assert cli("validate", f)[0] == 0
    f.write_text(_gas_spikes(3, 1000.0, base=1000.0))       # 1e3 x 1e3^3 = 1e12 exactly: at the cap
    assert cli("validate", f)[0] == 0


def test_the_least_money_and_price_give_finite_tables(tmp_path):
    """Near the bounds (a cent of budget and capital, a price of 1e-10, gas stacked to 1e12 gwei)
    every money and affect column of the run is finite."""
    f = tmp_path / "s.yaml"
    f.write_text(_gas_spikes(2, 1e6, base=1.0).replace(
        "count: 2}", "count: 2, budget: 0.01, capital: 0.01, asset: X}") +
        "  assets: [{name: X, price: 1.0e-10}]\n")
    code, out = cli("run", f, "--out", tmp_path / "r", "-q", "--set", "duration=3h")
    assert code == 0, out
    hb = table(tmp_path / "r", "heartbeats")
    assert hb.height > 0
    for c in ("value", "cash", "budget", "vitality", "price", "p", "a", "d"):
        assert hb[c].is_finite().all(), c
    assert table(tmp_path / "r", "market")["gas"].is_finite().all()


# ------------------------------------------------------------------------------ validate = run
@pytest.mark.parametrize("params, expect", [
    ("{trend_window: 100}", "trend_window: 100; expected an integer from 1 to 63"),
    ("{trend_window: 2.5}", "trend_window: 2.5; expected an integer"),
    ("{trend_scale: 'nan'}", "trend_scale: 'nan'; expected a finite number from 0 to 10000"),
    ("{trend_scale: [1, 2]}", "trend_scale: [1, 2]; expected a finite number"),
    ("{trend_scale: 1.0e+5}", "trend_scale: 100000.0; expected a finite number from 0 to 10000"),
])
def test_validate_refuses_the_strategy_params_a_run_refuses(tmp_path, params, expect):
    f = tmp_path / "s.yaml"
    f.write_text(GOOD.replace("count: 2", f"count: 2, strategy: mean_reversion, strategy_params: {params}"))
    line = one_line(*cli("validate", f), "golems.0.strategy_params", "mean_reversion", expect)
    assert ":4:" in line
    # the run reads its parameters through the same check: the strategy itself refuses them
    from golem import strategies
    with pytest.raises(ValueError, match=re.escape(expect)):
        strategies.trend(None, **__import__("yaml").safe_load(params))


def test_good_strategy_params_are_valid(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(GOOD.replace("count: 2", "count: 2, strategy_params: {trend_window: 63, trend_scale: 10000}"))
    assert cli("validate", f)[0] == 0


@pytest.mark.parametrize("text, expect", [
    (GOOD.replace("name: t", "name: " + "x" * 100_000), ["name", "at most 200 characters"]),
    (GOOD.replace("2h", "36500d"), ["duration", "10,512,002 market steps of 2 assets", "at most 4,194,304"]),
])
def test_huge_names_and_durations_are_answered_at_once(tmp_path, text, expect):
    f = tmp_path / "s.yaml"
    f.write_text(text)
    t0 = time.perf_counter()
    one_line(*cli("validate", f), *expect)
    assert time.perf_counter() - t0 < 5


# ------------------------------------------------------------------------------ tapes
T0 = datetime(2022, 1, 1, tzinfo=timezone.utc)


def _bars(n: int, step: timedelta, seed: int = 0, vol: float = 0.03) -> tuple[list[str], np.ndarray]:
    """n OHLC rows (open = previous close) from a seeded random walk, and their closes."""
    rng = np.random.default_rng(seed)
    close = 10.0 * np.exp(np.cumsum(rng.normal(0.0, vol, n)))
    opn = np.concatenate([[10.0], close[:-1]])
    o, c = opn.tolist(), close.tolist()
    rows = [f"{(T0 + i * step):%Y-%m-%d %H:%M:%S},{o[i]!r},{max(o[i], c[i]) * 1.01!r},"
            f"{min(o[i], c[i]) * 0.99!r},{c[i]!r},1000" for i in range(n)]
    return rows, close


def _tape(tmp_path: Path, n: int, step: timedelta, seed: int = 0) -> tuple[Path, np.ndarray]:
    from sim.tapes import import_tape, write_tape
    rows, close = _bars(n, step, seed)
    src = tmp_path / "bars.csv"
    src.write_text("timestamp,open,high,low,close,volume\n" + "\n".join(rows) + "\n")
    out = tmp_path / "tape.parquet"
    write_tape(import_tape([src], asset="LUNA"), out)
    return out, close


def _tape_scenario(tmp_path: Path, tape: Path, start: datetime, duration: str) -> Path:
    f = tmp_path / "tape.yaml"
    f.write_text(f"name: tape\nduration: {duration}\nmarket:\n  tape: {{path: {tape}, start: '{start.isoformat()}'}}\n"
                 "golems:\n  - {count: 2, asset: tape, interval: bar}\n")
    return f


@pytest.mark.parametrize("step_days", [1, 7])
def test_daily_and_weekly_tapes_take_reference_vol_auto_from_the_60_bars_before_the_start(tmp_path, step_days):
    """SPEC §2.1: for bars of a day or longer, the standard deviation of the log returns of the 60
    bars before the start (close to close, sample deviation), per sqrt(bar length)."""
    from sim.run import prepare, build_tape
    step = timedelta(days=step_days)
    tape, close = _tape(tmp_path, 200, step, seed=step_days)
    start = 120
    f = _tape_scenario(tmp_path, tape, T0 + start * step, f"{3 * step_days}d")
    sc, cfg, _, seed = prepare(f)
    t = build_tape(sc, seed, cfg, str(f))
    r = np.log(close[start - 60:start] / close[start - 61:start - 1])      # the 60 returns up to the start
    by_hand = math.sqrt(sum((x - r.mean()) ** 2 for x in r) / 59)
    assert t.normal_vol[0] == pytest.approx(by_hand, rel=1e-12)
    assert t.reference_rate("auto", 300.0)[0] == pytest.approx(by_hand / math.sqrt(step_days * 86400), rel=1e-12)
    assert "60 bars before the start" in t.normal_source
    code, out = cli("run", f, "--out", tmp_path / "r", "-q")
    assert code == 0, out
    assert table(tmp_path / "r", "heartbeats")["a"].is_finite().all()


def test_a_daily_tape_without_60_bars_of_history_is_refused_by_validate_as_by_run(tmp_path):
    from sim.scenario import InputError
    from sim.run import prepare, build_world, build_tape
    tape, _ = _tape(tmp_path, 200, timedelta(days=1))
    f = _tape_scenario(tmp_path, tape, T0 + timedelta(days=30), "3d")
    expect = ["appraisal.reference_vol: auto", "needs 61 bars before it; the tape has 30", "expected a number"]
    one_line(*cli("validate", f), str(tape), *expect)
    sc, cfg, _, seed = prepare(f)     # the run's own check, with the tape built without it
    from sim.tape_market import tape_from_file
    with pytest.raises(InputError, match="needs 61 bars before it"):
        build_world(sc, cfg, tape_from_file(sc), seed)
    assert cli("validate", f, "--set", "appraisal.reference_vol=0.004")[0] == 0   # a number needs no history


def _csv(tmp_path: Path, rows: list[str], name: str = "b.csv") -> Path:
    f = tmp_path / name
    f.write_text("timestamp,open,high,low,close\n" + "".join(rows))
    return f


def test_two_digit_years_are_refused_unless_the_format_says_so(tmp_path):
    from sim.tapes import TapeError, import_tape
    f = _csv(tmp_path, ["17-08-17,1,2,0.5,1\n", "17-08-18,1,2,0.5,1\n"])
    with pytest.raises(TapeError, match=r"row 1: time column 'timestamp' value '17-08-17' has a year of fewer than "
                                        r"four digits \(read as the year 17\).*time_format, e\.g\. '%y-%m-%d'"):
        import_tape([f])
    tape = import_tape([f], time_format="%y-%m-%d")
    assert tape["time_ms"][0] == int(datetime(2017, 8, 17, tzinfo=timezone.utc).timestamp() * 1000)


@pytest.mark.parametrize("row, expect", [
    ("2020-01-02,1,2,0.5,2.5\n", r"row 2: close 2\.5 > high 2\.0; expected low <= close <= high"),
    ("2020-01-02,1,2,0.5,0.4\n", r"row 2: close 0\.4 < low 0\.5"),
    ("2020-01-02,3,2,0.5,1\n", r"row 2: open 3\.0 > high 2\.0"),
    ("2020-01-02,0.1,2,0.5,1\n", r"row 2: open 0\.1 < low 0\.5"),
    ("2020-01-02,1,0.4,0.5,1\n", r"row 2: high 0\.4 < low 0\.5"),
])
def test_ohlc_must_agree_with_itself(tmp_path, row, expect):
    from sim.tapes import TapeError, import_tape
    f = _csv(tmp_path, ["2020-01-01,1,2,0.5,1\n", row, "2020-01-03,1,2,0.5,1\n"])
    with pytest.raises(TapeError, match=expect):
        import_tape([f])


def test_blank_lines_are_not_bars_and_rows_keep_their_numbers(tmp_path):
    from sim.tapes import TapeError, import_tape
    f = _csv(tmp_path, ["2020-01-01,1,2,0.5,1\n", "2020-01-02,1,2,0.5,1\n", "\n", "\n"])
    assert import_tape([f]).height == 2                                # trailing blank lines
    f = _csv(tmp_path, ["2020-01-01,1,2,0.5,1\n", "\n", " , , , , \n", "2020-01-02,1,2,0.5,1\n",
                        "2020-01-03,1,2,0.5,x\n", "\r\n"])
    with pytest.raises(TapeError, match=r"row 5: close \(column 'close'\) value 'x' is not a number"):
        import_tape([f])


def test_a_large_csv_is_read_column_by_column_in_batches(tmp_path, monkeypatch):
    """Only the columns a tape needs are collected from the scanned CSV (a minute-bar export's
    other columns never enter memory), a batch of rows at a time, and the line count streams from
    the file; the tape is the same whatever the batch size."""
    import sim.tapes as tapes
    rows, _ = _bars(50, timedelta(minutes=1))
    f = tmp_path / "wide.csv"
    f.write_text("timestamp,open,high,low,close,volume,junk1,junk2\n" + "".join(r + ",a,b\n" for r in rows))
    whole = tapes.import_tape([f])
    seen = []
    real = tapes._parse_bars

    def spy(df, *args):
        seen.append((df.columns, df.height))
        return real(df, *args)
    monkeypatch.setattr(tapes, "_parse_bars", spy)
    monkeypatch.setattr(tapes, "BATCH_ROWS", 16)
    assert tapes.import_tape([f]).equals(whole)
    assert [n for _, n in seen] == [16, 16, 16, 2]
    assert all(c == ["timestamp", "open", "high", "low", "close", "volume", "_row"] for c, _ in seen)
    lines = f.read_text().splitlines(keepends=True)
    lines[37] = lines[37].replace(",1000,a,b", ",x,a,b")           # data row 37: in the third batch
    f.write_text("".join(lines))
    with pytest.raises(tapes.TapeError, match=r"row 37: volume \(column 'volume'\) value 'x' is not a number"):
        tapes.import_tape([f])


@pytest.mark.parametrize("text", [
    "t,o\n2020-01-01,1\n\n , \n,,\n2020-01-02,2",                 # blank, spaces and separators only; no final \n
    "t,o\r\n2020-01-01,1\r\n\r\n2020-01-02,2\r\n \t\r\n",           # \r\n line ends
    "\n\nt,o\n" + "2020-01-01,1\n" * 40 + "\n" * 5,                 # blank lines before the header and after
])
def test_the_line_count_on_bytes_agrees_with_the_csv_module(tmp_path, monkeypatch, text):
    """A file without quotes is counted on its bytes as it streams (1 MiB pieces; here 7 bytes, so
    lines straddle the pieces): the same count of non-blank lines as the csv module's."""
    import csv
    import io

    import sim.tapes as tapes
    f = tmp_path / "c.csv"
    f.write_bytes(text.encode())
    by_csv = sum(1 for r in csv.reader(io.StringIO(text, newline="")) if any(c.strip() for c in r))
    monkeypatch.setattr(tapes, "_CHUNK", 7)
    assert tapes._scan_bytes(f, ",") == (False, by_csv)
    f.write_bytes(text.replace("2020-01-01", '"2020-01-01"').encode())
    assert tapes._scan_bytes(f, ",")[1] is None                      # quotes: the csv module counts


@pytest.mark.filterwarnings("ignore::RuntimeWarning")   # numpy on the inf prices, before the check
def test_a_value_that_overflows_during_the_run_fails_the_run(tmp_path, monkeypatch):
    """What validate cannot see fails the run: prices made inf after an hour, past the market's
    own check (switched off here), reach the heartbeats; the first heartbeat that would record one
    stops the run: exit 1, the manifest failed, saying which value; no inf in the tables written."""
    import json

    import sim.run as run
    real = run.generate

    def inf_prices(*args, **kwargs):
        tape = real(*args, **kwargs)
        for a in (tape.open, tape.high, tape.low, tape.close):
            a[12:] = math.inf
        return tape
    monkeypatch.setattr(run, "generate", inf_prices)
    monkeypatch.setattr(run, "check_tape", lambda tape, where: None)
    f = tmp_path / "s.yaml"
    f.write_text(GOOD.replace("2h", "3h"))
    code, out = cli("run", f, "--out", tmp_path / "r", "-q")
    assert code == 1, out
    m = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert m["status"] == "failed", m
    assert "heartbeats.value is inf for Golem 0 at time_ms 3600000: a value overflowed" in m["error"], m
    assert "heartbeats.value is inf" in out
    hb = table(tmp_path / "r", "heartbeats")
    assert hb["time_ms"].max() == 3_600_000 - 300_000 and hb["price"].is_finite().all()


def test_a_plug_in_strategy_may_carry_its_own_parameter_check(tmp_path):
    """docs/api.md: `fn.check_params` is called with the scenario's parameters when the plug-in is
    loaded, before the run starts (validate never runs a plug-in file's code)."""
    (tmp_path / "mine.py").write_text(
        "def cautious(view, ceiling=0.5):\n    return view.price * 0 + ceiling\n\n"
        "def _check(ceiling=0.5):\n    if not 0 <= ceiling <= 1:\n"
        "        raise ValueError(f'ceiling: {ceiling!r}; expected a share from 0 to 1')\n\n"
        "cautious.check_params = _check\n")
    f = tmp_path / "s.yaml"
    f.write_text(GOOD.replace("count: 2", "count: 2, strategy: mine.py:cautious, strategy_params: {ceiling: 3}"))
    one_line(*cli("run", f, "--out", tmp_path / "r", "-q"), "golems.0.strategy_params",
             "ceiling: 3; expected a share from 0 to 1")
    assert not (tmp_path / "r").exists()


def test_a_csv_with_lone_cr_line_ends_has_a_size_cap(tmp_path, monkeypatch):
    import sim.tapes as tapes
    f = tmp_path / "mac.csv"
    f.write_bytes(b"timestamp,open,high,low,close\r2020-01-01,1,2,0.5,1\r2020-01-02,1,2,0.5,1\r")
    assert tapes.import_tape([f]).height == 2
    monkeypatch.setattr(tapes, "MAX_CR_CSV_BYTES", 40)
    with pytest.raises(tapes.TapeError, match=r"mac\.csv: larger than 40 bytes.*lone \\r is read whole"):
        tapes.import_tape([f])
