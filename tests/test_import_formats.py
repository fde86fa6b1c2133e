"""Real tapes in any format: `golem-sim import-tape` on the layouts real data comes in,
and scenarios on a tape (`interval: bar`, `asset: tape`), each through the `golem-sim` command line:
in this process (the commands' messages and files are what is read), the scenario tapes imported by
a real `golem-sim` process."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import polars as pl
import pytest

from conftest import flat, golem_here, golem_process
from sim.tapes import TapeError, read_tape

ROOT = Path(__file__).resolve().parents[1]
T0 = datetime(2020, 1, 1, tzinfo=timezone.utc)
MIN10 = 600_000


golem = golem_here


def bar_rows(n=50, step=timedelta(minutes=10), start=T0):
    return [((start + i * step), 100.0 + i, 101.0 + i, 99.0 + i, 100.5 + i, 10.0 + i) for i in range(n)]


def bars_csv(path: Path, rows, header="timestamp,open,high,low,close,volume", ends=None):
    lines = [header] + [f"{t:%Y-%m-%d %H:%M:%S},{o},{h},{lo},{c},{v}" for t, o, h, lo, c, v in rows]
    ends = ends or ["\n"] * len(lines)
    path.write_bytes("".join(line + e for line, e in zip(lines, ends)).encode())
    return path


def ms(t: datetime) -> int:
    return int(t.timestamp() * 1000)


# ------------------------------------------------------------------------------------ line endings
@pytest.mark.parametrize("ends", [
    ["\r"] + ["\n"] * 50,                                  # header ends in \r, the rest in \n
    ["\n"] * 10 + ["\r\n"] * 10 + ["\r"] * 10 + ["\n"] * 21,   # all three, mixed
])
def test_mixed_line_endings_keep_every_bar_and_volume(tmp_path, ends):
    src = bars_csv(tmp_path / "bars.csv", bar_rows(), ends=ends)
    r = golem("import-tape", src, "--out", tmp_path / "t.parquet")
    assert r.returncode == 0, r.stderr
    t = read_tape(tmp_path / "t.parquet")
    assert t.height == 50
    assert t["time_ms"][0] == ms(T0)
    assert t["volume"].to_list() == [10.0 + i for i in range(50)]
    assert "50 bars of BTC (10 min bars)" in flat(r.stdout)   # the bar length as people write it


def test_a_row_the_reader_loses_is_an_error_not_a_shorter_tape(tmp_path):
    from sim.tapes import _check_row_count
    text = "timestamp,open\n2020-01-01,1\n2020-01-02,2\n2020-01-03,3\n"
    with pytest.raises(TapeError, match=r"read 2 data rows but the file has 3 non-blank lines"):
        _check_row_count(Path("x.csv"), text, ",", 2)
    _check_row_count(Path("x.csv"), text + "\n\n", ",", 3)   # blank lines are not bars
    streamed = tmp_path / "s.csv"            # the file itself, read as a stream
    streamed.write_text(text + "\n \n")
    with pytest.raises(TapeError, match=r"read 2 data rows but the file has 3 non-blank lines"):
        _check_row_count(streamed, None, ",", 2)
    _check_row_count(streamed, None, ",", 3)


def test_missing_volume_column_is_said(tmp_path):
    src = tmp_path / "b.csv"
    src.write_text("timestamp,open,high,low,close\n2020-01-01 00:00,1,1,1,1\n2020-01-01 00:10,1,1,1,1\n")
    r = golem("import-tape", src, "--out", tmp_path / "t.parquet")
    assert r.returncode == 0, r.stderr
    assert "no volume column; volume is 0 on every bar" in flat(r.stderr)


# ------------------------------------------------------------------------------------ time columns
def test_without_time_col_open_times_are_taken_and_named(tmp_path):
    src = tmp_path / "k.csv"
    rows = ["close_time,open_time,open,high,low,close"]
    for i in range(3):
        o = T0 + timedelta(hours=i)
        rows.append(f"{o + timedelta(hours=1) - timedelta(milliseconds=1):%Y-%m-%d %H:%M:%S.%f},"
                    f"{o:%Y-%m-%d %H:%M:%S},1,1,1,1")
    src.write_text("\n".join(rows) + "\n")
    r = golem("import-tape", src, "--out", tmp_path / "t.parquet")
    assert r.returncode == 0, r.stderr
    assert "time column 'open_time'; also found 'close_time' (choose with --time-col ...)" in flat(r.stderr)
    assert read_tape(tmp_path / "t.parquet")["time_ms"].to_list() == [ms(T0) + i * 3_600_000 for i in range(3)]
    r = golem("import-tape", src, "--out", tmp_path / "t2.parquet", "--time-col", "open_time")
    assert r.returncode == 0 and "time column" not in r.stderr      # named: nothing to say


def etherscan_gas(path: Path) -> Path:
    """Etherscan's daily average gas price export: quoted, M/D/YYYY dates, epoch seconds, wei."""
    rows = ['"Date(UTC)","UnixTimeStamp","Value (Wei)"']
    for d in range(4):
        day = datetime(2019, 12, 30, tzinfo=timezone.utc) + timedelta(days=d)
        rows.append(f'"{day.month}/{day.day}/{day.year}","{int(day.timestamp())}","{(20 + d) * 10**9}"')
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.mark.parametrize("how", [
    ["--extra", "gas=GAS:Value (Wei)@Date(UTC)", "--extra-time-format", "gas=%m/%d/%Y"],
    ["--extra", "gas=GAS:Value (Wei)@UnixTimeStamp", "--extra-time-unit", "gas=s"],
])
def test_per_extra_time_format_and_unit_and_gas_in_wei(tmp_path, how):
    bars = bars_csv(tmp_path / "bars.csv", bar_rows(6, timedelta(hours=12), T0 - timedelta(days=1)))
    gas = etherscan_gas(tmp_path / "gas.csv")
    args = [a.replace("GAS", str(gas)) for a in how]
    r = golem("import-tape", bars, "--out", tmp_path / "t.parquet", *args, "--gas-unit", "wei")
    assert r.returncode == 0, r.stderr
    t = read_tape(tmp_path / "t.parquet")
    # bars from 2019-12-31 00:00 every 12 h; the daily values (2019-12-30: 20 gwei, 12-31: 21, 01-01: 22,
    # 01-02: 23) joined as-of backward: each bar gets the day it falls in
    assert t["gas"].to_list() == [21.0, 21.0, 22.0, 22.0, 23.0, 23.0]


def test_gas_in_wei_without_the_unit_is_refused_naming_the_column(tmp_path):
    bars = bars_csv(tmp_path / "bars.csv", bar_rows(6, timedelta(hours=12), T0 - timedelta(days=1)))
    gas = etherscan_gas(tmp_path / "gas.csv")
    r = golem("import-tape", bars, "--out", tmp_path / "t.parquet", "--extra", f"gas={gas}:Value (Wei)@UnixTimeStamp",
              "--extra-time-unit", "gas=s")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    msg = flat(r.stderr)
    assert "gas (column 'Value (Wei)')" in msg and "above 100,000 gwei" in msg and "--gas-unit wei" in msg
    assert not (tmp_path / "t.parquet").exists()


# ------------------------------------------------------------------------------------ JSON under a key
def test_json_records_under_a_key(tmp_path):
    rows = bar_rows(3)
    doc = {"schema": {"fields": [{"name": "index", "type": "integer"}, {"name": "timestamp", "type": "datetime"}],
                      "primaryKey": ["index"], "pandas_version": "1.4.0"},
           "data": [{"index": i, "timestamp": f"{t:%Y-%m-%dT%H:%M:%S.000}", "open": o, "high": h, "low": lo,
                     "close": c, "volume": v} for i, (t, o, h, lo, c, v) in enumerate(rows)]}
    src = tmp_path / "bars.json"
    src.write_text(json.dumps(doc))
    r = golem("import-tape", src, "--out", tmp_path / "t.parquet")
    assert r.returncode == 2 and "--records-key data" in flat(r.stderr) and "records_key" not in r.stderr
    r = golem("import-tape", src, "--out", tmp_path / "t.parquet", "--records-key", "data")
    assert r.returncode == 0, r.stderr
    t = read_tape(tmp_path / "t.parquet")
    assert t["close"].to_list() == [100.5, 101.5, 102.5] and t["time_ms"][0] == ms(T0)


# ------------------------------------------------------------------------------------ hints
def test_hints_name_the_commands_flags(tmp_path):
    dup = bars_csv(tmp_path / "dup.csv", bar_rows(3) + bar_rows(1))
    r = golem("import-tape", dup, "--out", tmp_path / "t.parquet")
    assert r.returncode == 2 and "--order sort" in r.stderr and "order='" not in r.stderr
    epoch = tmp_path / "e.csv"
    epoch.write_text("timestamp,open,high,low,close\n1577836800,1,1,1,1\n1577837400,1,1,1,1\n")
    r = golem("import-tape", epoch, "--out", tmp_path / "t.parquet")
    assert r.returncode == 2 and "--time-unit s|ms|us|ns" in r.stderr and "time_unit=" not in r.stderr
    odd = tmp_path / "bars.dat"
    odd.write_text("x")
    r = golem("import-tape", odd, "--out", tmp_path / "t.parquet")
    assert r.returncode == 2 and "--format csv|parquet|json" in r.stderr and "fmt=" not in r.stderr
    r = golem("import-tape", odd, "--out", tmp_path / "t.parquet", "--format", "csv")
    assert r.returncode == 2 and "--format" not in r.stderr          # read as CSV now: another complaint


# ------------------------------------------------------------------------------------ scenarios on a tape
@pytest.fixture(scope="module")
def tapes(tmp_path_factory):
    """A 10-minute ETH tape, and a two-asset tape (ETH and SOL on the same bars)."""
    d = tmp_path_factory.mktemp("tapes")
    src = bars_csv(d / "eth.csv", bar_rows(60))
    r = golem_process("import-tape", src, "--asset", "ETH", "--out", d / "eth.parquet", columns=400)
    assert r.returncode == 0, r.stderr
    r = golem_process("import-tape", src, "--asset", "SOL", "--out", d / "sol.parquet", columns=400)
    assert r.returncode == 0, r.stderr
    from sim.tapes import write_tape
    write_tape(pl.concat([read_tape(d / "eth.parquet"), read_tape(d / "sol.parquet")]), d / "two.parquet")
    return d


def tape_scenario(d: Path, tape: Path, golems: str, name="s") -> Path:
    f = d / f"{name}.yaml"
    f.write_text(f"name: {name}\nduration: 2h\nseed: 1\nmarket:\n  tape: {{path: {tape}}}\ngolems:\n{golems}")
    return f


def test_interval_bar_ticks_once_per_bar_and_a_mismatch_warns(tapes, tmp_path):
    five = tape_scenario(tmp_path, tapes / "eth.parquet", "  - {count: 2, asset: ETH}\n", "five")
    r = golem("validate", five)
    assert r.returncode == 0
    assert ("the tape's bars are 10 min long but Golems beat at another cadence (clade-0 every 5 min)"
            in flat(r.stderr)) and "interval: bar" in r.stderr
    bar = tape_scenario(tmp_path, tapes / "eth.parquet", "  - {count: 2, asset: ETH, interval: bar}\n", "bar")
    ten = tape_scenario(tmp_path, tapes / "eth.parquet", "  - {count: 2, asset: ETH, interval: 10m}\n", "ten")
    assert "warning" not in golem("validate", bar).stderr
    for f in (bar, ten):
        r = golem("run", f, "--out", tmp_path / f.stem, "-q")
        assert r.returncode == 0, r.stderr
    hb = pl.read_parquet(tmp_path / "bar" / "heartbeats" / "*.parquet")
    # 2 h of 10-minute bars: a beat at 0, 10, ..., 110 min for each Golem (the run ends at 2 h, exclusive)
    assert sorted(hb.filter(pl.col("golem_id") == 0)["time_ms"].to_list()) == [i * MIN10 for i in range(12)]
    m_bar = json.loads((tmp_path / "bar" / "manifest.json").read_text())
    m_ten = json.loads((tmp_path / "ten" / "manifest.json").read_text())
    assert m_bar["hashes"]["heartbeats"] == m_ten["hashes"]["heartbeats"]   # bar = the tape's 10 min


def test_asset_tape_is_the_tapes_only_asset(tapes, tmp_path):
    f = tape_scenario(tmp_path, tapes / "eth.parquet", "  - {count: 2, asset: tape, interval: bar}\n", "tape")
    named = tape_scenario(tmp_path, tapes / "eth.parquet", "  - {count: 2, asset: ETH, interval: bar}\n", "named")
    for s in (f, named):
        r = golem("run", s, "--out", tmp_path / s.stem, "-q")
        assert r.returncode == 0, r.stderr
    a = json.loads((tmp_path / "tape" / "manifest.json").read_text())["hashes"]
    b = json.loads((tmp_path / "named" / "manifest.json").read_text())["hashes"]
    assert a["heartbeats"] == b["heartbeats"] and a["market"] == b["market"]
    # several assets on the tape: say so, naming the Golem group and the assets
    two = tape_scenario(tmp_path, tapes / "two.parquet", "  - {count: 2, asset: tape}\n", "two")
    r = golem("run", two, "--out", tmp_path / "two", "-q")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "golems.0.asset: 'tape' means the tape's only asset, but the tape holds 2 (ETH, SOL)" in flat(r.stderr)
    # no tape at all
    gen = tmp_path / "gen.yaml"
    gen.write_text("name: g\nduration: 1h\ngolems:\n  - {count: 1, asset: tape}\n")
    r = golem("validate", gen)
    assert r.returncode == 2 and "golem asset 'tape' means the recorded tape's only asset" in flat(r.stderr)
