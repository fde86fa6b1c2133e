"""Tests for sim.tapes: importing real OHLCV bars as a tape, validation, extras, events."""

from __future__ import annotations

import io
import itertools
import json
import math
import re
from datetime import datetime, timezone
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.tapes import (
    EVENT_SCHEMA,
    TAPE_SCHEMA,
    ExtraSeries,
    TapeError,
    detect_events,
    import_tape,
    read_tape,
    write_tape,
)

H = 3_600_000  # one hour in ms
T0 = 1_700_000_000_000  # 2023-11-14 22:13:20 UTC
DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "btc"


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=timezone.utc).timestamp() * 1000)


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def assert_valid_tape(df: pl.DataFrame) -> None:
    assert list(df.schema.items()) == list(TAPE_SCHEMA.items())
    assert df.height >= 2
    assert df["time_ms"].diff().drop_nulls().min() > 0
    assert df["bar_ms"].n_unique() == 1 and df["bar_ms"][0] > 0
    for c in ("open", "high", "low", "close"):
        col = df[c]
        assert col.null_count() == 0 and col.is_finite().all() and (col > 0).all()
    assert (df["high"] >= df["low"]).all()
    assert df["volume"].null_count() == 0 and (df["volume"] >= 0).all()


# --------------------------------------------------------------------------- formats


def test_csv_custom_separator_and_column_names(tmp_path):
    p = write(
        tmp_path / "bars.csv",
        "date;o;h;l;c\n"
        "2021-01-01 00:00:00;10;12;9;11\n"
        "2021-01-01 01:00:00;11;11.5;10.5;11.25\n"
        "2021-01-01 02:00:00;11.25;13;11;12.5\n",
    )
    tape = import_tape(
        [p], asset="ETH", time_col="date", sep=";",
        columns={"open": "o", "high": "h", "low": "l", "close": "c"},
    )
    assert_valid_tape(tape)
    t = ms("2021-01-01T00:00:00")
    assert tape.to_dicts() == [
        {"time_ms": t, "bar_ms": H, "asset": "ETH", "open": 10.0, "high": 12.0, "low": 9.0,
         "close": 11.0, "volume": 0.0, "gas": None, "tvl": None, "funding_rate": None},
        {"time_ms": t + H, "bar_ms": H, "asset": "ETH", "open": 11.0, "high": 11.5, "low": 10.5,
         "close": 11.25, "volume": 0.0, "gas": None, "tvl": None, "funding_rate": None},
        {"time_ms": t + 2 * H, "bar_ms": H, "asset": "ETH", "open": 11.25, "high": 13.0, "low": 11.0,
         "close": 12.5, "volume": 0.0, "gas": None, "tvl": None, "funding_rate": None},
    ]


def test_csv_iso_variants_time_zones_and_optional_gas_column(tmp_path):
    # 'T' separator, 'Z', an explicit offset and milliseconds all land on the same UTC grid
    p = write(
        tmp_path / "iso.csv",
        "Timestamp,Open,High,Low,Close,Volume,gas\n"
        "2019-09-10T08:00:00Z,1,2,1,2,5,\n"
        "2019-09-10 12:00:00+02:00,2,3,2,3,6,40\n"
        "2019-09-10 12:00:00.000,3,4,3,4,,41.5\n",
    )
    tape = import_tape([p])
    t = ms("2019-09-10T08:00:00")
    assert tape["time_ms"].to_list() == [t, t + 2 * H, t + 4 * H]
    assert tape["bar_ms"].to_list() == [2 * H] * 3
    assert tape["volume"].to_list() == [5.0, 6.0, 0.0]  # empty volume -> 0
    assert tape["gas"].to_list() == [None, 40.0, 41.5]
    assert tape["asset"].to_list() == ["BTC"] * 3


def test_csv_time_format_and_lower_median_bar_length(tmp_path):
    p = write(
        tmp_path / "fmt.csv",
        "timestamp,open,high,low,close\n"
        "10/01/2021 00:00,1,1,1,1\n"
        "10/01/2021 00:15,1,1,1,1\n"
        "10/01/2021 00:30,1,1,1,1\n"
        "10/01/2021 02:00,1,1,1,1\n"
        "10/01/2021 05:00,1,1,1,1\n",
    )
    tape = import_tape([p], time_format="%d/%m/%Y %H:%M")
    t = ms("2021-01-10T00:00:00")
    assert tape["time_ms"].to_list() == [t, t + H // 4, t + H // 2, t + 2 * H, t + 5 * H]
    # spacings 15m, 15m, 90m, 180m: lower median = 15 m despite the gaps
    assert tape["bar_ms"].unique().to_list() == [H // 4]


@pytest.mark.parametrize(
    ("unit", "values"),
    [
        ("s", ["1600000000", "1600003600", "1600007200"]),
        ("ms", ["1600000000000", "1600003600000", "1600007200000"]),
        ("us", ["1600000000000000", "1600003600000000", "1600007200000000"]),
        ("ns", ["1600000000000000000", "1600003600000000000", "1600007200000000000"]),
    ],
)
def test_csv_numeric_epochs(tmp_path, unit, values):
    body = "".join(f"{v},1,2,0.5,1.5,3\n" for v in values)
    p = write(tmp_path / f"epoch_{unit}.csv", "timestamp,open,high,low,close,volume\n" + body)
    tape = import_tape([p], time_unit=unit)
    assert tape["time_ms"].to_list() == [1_600_000_000_000 + i * H for i in range(3)]
    assert tape["bar_ms"][0] == H
    assert tape["close"].to_list() == [1.5] * 3


def test_fractional_epoch_seconds(tmp_path):
    p = write(tmp_path / "f.csv", "timestamp,open,high,low,close\n1.5,1,1,1,1\n3.25,1,1,1,1\n")
    assert import_tape([p], time_unit="s")["time_ms"].to_list() == [1500, 3250]


def test_parquet_with_datetime_and_integer_columns(tmp_path):
    p = tmp_path / "bars.parquet"
    pl.DataFrame(
        {
            "ts": [datetime(2022, 1, 1, 0, 0), datetime(2022, 1, 1, 0, 5), datetime(2022, 1, 1, 0, 10)],
            "open": [100, 101, 102],
            "high": [110.5, 111.0, 112.0],
            "low": [99.0, 100.0, 101.0],
            "close": [101.0, 102.0, 103.0],
            "vol": [1.0, 2.0, 3.0],
        }
    ).write_parquet(p)
    tape = import_tape([p], time_col="ts", columns={"volume": "vol"}, asset="SOL")
    t = ms("2022-01-01T00:00:00")
    assert tape.select("time_ms", "bar_ms", "asset", "open", "high", "volume").rows() == [
        (t, 300_000, "SOL", 100.0, 110.5, 1.0),
        (t + 300_000, 300_000, "SOL", 101.0, 111.0, 2.0),
        (t + 600_000, 300_000, "SOL", 102.0, 112.0, 3.0),
    ]


def test_parquet_epoch_ms_integers_and_tz_aware_datetimes(tmp_path):
    p = tmp_path / "e.parquet"
    pl.DataFrame({"timestamp": [0, 60_000], "open": [1.0, 2.0], "high": [1.0, 2.0],
                  "low": [1.0, 2.0], "close": [1.0, 2.0]}).write_parquet(p)
    assert import_tape([p], time_unit="ms")["time_ms"].to_list() == [0, 60_000]
    with pytest.raises(TapeError, match="time_unit"):
        import_tape([p])  # bare numbers are ambiguous without a unit
    q = tmp_path / "tz.parquet"
    pl.DataFrame({"timestamp": [datetime(2022, 1, 1, 2), datetime(2022, 1, 1, 3)],
                  "open": [1.0, 1.0], "high": [1.0, 1.0], "low": [1.0, 1.0], "close": [1.0, 1.0]}
                 ).with_columns(pl.col("timestamp").dt.replace_time_zone("Europe/Berlin")).write_parquet(q)
    assert import_tape([q])["time_ms"].to_list() == [ms("2022-01-01T01:00:00"), ms("2022-01-01T02:00:00")]


def test_json_array_with_epoch_seconds(tmp_path):
    recs = [
        {"timestamp": 1_600_000_000, "open": 1.0, "high": 2.0, "low": 0.5, "close": 1.5, "volume": 7},
        {"timestamp": 1_600_000_060, "open": 1.5, "high": 2.5, "low": 1.0, "close": 2.0, "volume": 8},
    ]
    p = write(tmp_path / "bars.json", json.dumps(recs))
    tape = import_tape([p], time_unit="s")
    assert tape.select("time_ms", "bar_ms", "open", "high", "low", "close", "volume").rows() == [
        (1_600_000_000_000, 60_000, 1.0, 2.0, 0.5, 1.5, 7.0),
        (1_600_000_060_000, 60_000, 1.5, 2.5, 1.0, 2.0, 8.0),
    ]


def test_json_lines_with_epoch_ms_and_text_times(tmp_path):
    p = write(
        tmp_path / "bars.jsonl",
        '{"t": 1600000000000, "open": 3, "high": 4, "low": 2, "close": 3.5}\n'
        "\n"
        '{"t": 1600000900000, "open": 3.5, "high": 5, "low": 3, "close": 4.5}\n',
    )
    tape = import_tape([p], time_col="t", time_unit="ms")
    assert tape.select("time_ms", "bar_ms", "close", "volume").rows() == [
        (1_600_000_000_000, 900_000, 3.5, 0.0),
        (1_600_000_900_000, 900_000, 4.5, 0.0),
    ]
    q = write(
        tmp_path / "text.ndjson",
        '{"timestamp": "2020-01-01 00:00:00", "open": 1, "high": 1, "low": 1, "close": 1}\n'
        '{"timestamp": "2020-01-01 00:01:00", "open": 1, "high": 1, "low": 1, "close": 1}\n',
    )
    assert import_tape([q])["time_ms"].to_list() == [ms("2020-01-01T00:00:00"), ms("2020-01-01T00:01:00")]


def test_fmt_overrides_extension_and_files_are_concatenated(tmp_path):
    a = write(tmp_path / "a.data", "timestamp,open,high,low,close\n2020-01-01 00:00:00,1,1,1,1\n")
    b = write(tmp_path / "b.data", "timestamp,open,high,low,close\n2020-01-01 01:00:00,2,2,2,2\n")
    tape = import_tape([a, b], fmt="csv")
    assert tape["close"].to_list() == [1.0, 2.0]
    assert tape["bar_ms"].to_list() == [H, H]
    with pytest.raises(TapeError, match=r"a\.data.*extension"):
        import_tape([a])


# --------------------------------------------------------------------------- validation

HEADER = "timestamp,open,high,low,close\n"
GOOD1 = "2020-01-01 00:00:00,1,2,1,2\n"
GOOD2 = "2020-01-01 01:00:00,2,3,2,3\n"


@pytest.mark.parametrize(
    ("name", "text", "kwargs", "row", "expected"),
    [
        ("missing_col.csv", "timestamp,open,high,close\n" + "2020-01-01,1,1,1\n", {},
         "header", r"missing required column 'low'.*found columns 'timestamp', 'open', 'high', 'close'"),
        ("bad_time.csv", HEADER + GOOD1 + "yesterday,1,2,1,2\n", {}, "row 2", r"cannot parse.*'yesterday'"),
        ("bad_format.csv", HEADER + "01.01.2020,1,2,1,2\n" + GOOD2, {"time_format": "%d.%m.%Y"},
         "row 2", r"expected format '%d\.%m\.%Y'"),
        ("epoch_no_unit.csv", HEADER + "1600000000,1,2,1,2\n" + GOOD2, {}, "row 1", "time_unit"),
        ("unsorted.csv", HEADER + GOOD2 + GOOD1, {}, "row 2", r"order='sort'"),
        ("duplicate.csv", HEADER + GOOD1 + GOOD1, {}, "row 2", r"duplicate.*order='dedupe'"),
        ("nan.csv", HEADER + GOOD1 + "2020-01-01 01:00:00,2,3,2,NaN\n", {}, "row 2", r"close.*NaN"),
        ("null.csv", HEADER + "2020-01-01 00:00:00,,2,1,2\n" + GOOD2, {}, "row 1", r"open.*missing"),
        ("inf.csv", HEADER + GOOD1 + GOOD2 + "2020-01-01 02:00:00,2,inf,2,3\n", {}, "row 3",
         r"high.*infinite"),
        ("zero.csv", HEADER + GOOD1 + "2020-01-01 01:00:00,0,3,2,3\n", {}, "row 2", r"open.*not positive"),
        ("negative.csv", HEADER + GOOD1 + "2020-01-01 01:00:00,2,3,-2,3\n", {}, "row 2", r"low.*not positive"),
        ("text_price.csv", HEADER + GOOD1 + "2020-01-01 01:00:00,2,3,2,abc\n", {}, "row 2",
         r"'abc' is not a number"),
        ("high_low.csv", HEADER + GOOD1 + "2020-01-01 01:00:00,2,1,3,2\n", {}, "row 2", r"high 1\.0 < low 3\.0"),
        ("neg_volume.csv", "timestamp,open,high,low,close,volume\n2020-01-01,1,1,1,1,-5\n", {}, "row 1",
         r"volume.*negative"),
        ("empty.csv", "", {}, "row 1", "empty"),
        ("header_only.csv", HEADER, {}, "row 1", "no data rows"),
        ("one_bar.csv", HEADER + GOOD1, {}, "row 1", "at least two bars"),
        ("too_many_fields.csv", HEADER + GOOD1 + "2020-01-01 01:00:00,2,3,2,3,9,9\n", {}, "row 2",
         "fields"),
        ("bad.json", '[{"timestamp": "2020-01-01", "open": 1}, 5]', {}, "row 2", "JSON object"),
        ("bad.jsonl", '{"timestamp": "2020-01-01", "open": 1, "high": 1, "low": 1, "close": 1}\n{oops\n',
         {}, "row 2", "not valid JSON"),
        ("json_bool.json", '[{"timestamp": "2020-01-01", "open": true, "high": 1, "low": 1, "close": 1}]',
         {}, "row 1", "not a number"),
    ],
)
def test_validation_errors_name_file_row_and_expectation(tmp_path, name, text, kwargs, row, expected):
    p = write(tmp_path / name, text)
    with pytest.raises(TapeError) as info:
        import_tape([p], **kwargs)
    msg = str(info.value)
    assert name in msg
    assert row in msg
    assert "expected" in msg
    assert re.search(expected, msg), msg


def test_non_utf8_missing_file_and_garbage_parquet(tmp_path):
    p = tmp_path / "latin1.csv"
    p.write_bytes(HEADER.encode() + GOOD1.encode() + "2020-01-01 01:00:00,2,3,2,3 \xe9\n".encode("latin-1"))
    with pytest.raises(TapeError, match=r"latin1\.csv: line 3: .*UTF-8"):
        import_tape([p])
    with pytest.raises(TapeError, match=r"nope\.csv"):
        import_tape([tmp_path / "nope.csv"])
    q = tmp_path / "junk.parquet"
    q.write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(TapeError, match=r"junk\.parquet.*Parquet"):
        import_tape([q])


def test_unexpected_internal_errors_become_tape_errors(tmp_path, monkeypatch):
    # the contract is "only TapeError escapes", even for failures nobody anticipated
    import sim.tapes as tapes

    def boom(*args, **kwargs):
        raise RuntimeError("surprise")

    p = write(tmp_path / "ok.csv", HEADER + GOOD1 + GOOD2)
    monkeypatch.setattr(tapes, "_parse_time", boom)
    with pytest.raises(TapeError, match=r"ok\.csv: .*RuntimeError: surprise"):
        import_tape([p])


def test_order_across_files_names_the_offending_file(tmp_path):
    a = write(tmp_path / "2021.csv", HEADER + "2021-01-01 00:00:00,1,1,1,1\n2021-01-01 01:00:00,1,1,1,1\n")
    b = write(tmp_path / "2020.csv", HEADER + "2020-01-01 00:00:00,1,1,1,1\n")
    with pytest.raises(TapeError, match=r"2020\.csv: row 1: .*earlier than.*2021\.csv: row 2"):
        import_tape([a, b])
    assert import_tape([a, b], order="sort")["time_ms"].to_list() == [
        ms("2020-01-01T00:00:00"), ms("2021-01-01T00:00:00"), ms("2021-01-01T01:00:00")]


def test_order_sort_and_dedupe(tmp_path):
    p = write(
        tmp_path / "messy.csv",
        HEADER
        + "2020-01-01 02:00:00,3,3,3,3\n"
        + "2020-01-01 00:00:00,1,1,1,1\n"
        + "2020-01-01 01:00:00,2,2,2,2\n"
        + "2020-01-01 00:00:00,9,9,9,9\n",
    )
    with pytest.raises(TapeError, match=r"messy\.csv: row 2: .*order='sort'"):
        import_tape([p])
    # sort: duplicates are still an error, pointing at the later copy and suggesting dedupe
    with pytest.raises(TapeError, match=r"messy\.csv: row 4: duplicate .*also .*messy\.csv: row 2.*order='dedupe'"):
        import_tape([p], order="sort")
    tape = import_tape([p], order="dedupe")
    assert tape["time_ms"].to_list() == [ms("2020-01-01T00:00:00") + i * H for i in range(3)]
    assert tape["close"].to_list() == [9.0, 2.0, 3.0]  # the last 00:00 bar (row 4) wins
    q = write(tmp_path / "shuffled.csv", HEADER + "2020-01-01 02:00:00,3,3,3,3\n" + GOOD1 + GOOD2)
    assert import_tape([q], order="sort")["close"].to_list() == [2.0, 3.0, 3.0]
    with pytest.raises(TapeError, match="order"):
        import_tape([q], order="random")


# --------------------------------------------------------------------------- extras


def test_extra_series_joined_as_of_backward(tmp_path):
    bars = write(
        tmp_path / "bars.csv",
        HEADER + "".join(f"{1_000_000 + i * 3600},{i + 1},{i + 1},{i + 1},{i + 1}\n" for i in range(5)),
    )
    # gas known at 0.5 h, 2 h, 3.5 h; funding (ms, JSON lines) from 1 h on, one value 1 ms late
    gas = write(tmp_path / "gas.csv", "time,gwei\n1001800,10\n1007200,20\n1012600,30\n")
    fund = write(
        tmp_path / "funding.jsonl",
        '{"timestamp": 1003600000, "rate": 0.0001}\n{"timestamp": 1010800001, "rate": -0.002}\n',
    )
    tvl = write(tmp_path / "tvl.csv", "timestamp;usd\n1970-01-01 00:00:00;5e9\n")
    tape = import_tape(
        [bars], time_unit="s",
        extras=[
            ExtraSeries(gas, column="gwei", name="gas", time_col="time", time_unit="s"),
            ExtraSeries(fund, column="rate", name="funding_rate", time_unit="ms"),
            ExtraSeries(tvl, column="usd", name="tvl", sep=";"),
        ],
    )
    assert tape["time_ms"].to_list() == [1_000_000_000 + i * H for i in range(5)]
    assert tape["gas"].to_list() == [None, 10.0, 20.0, 20.0, 30.0]
    # the 3 h value arrives 1 ms after the bar opens, so that bar still sees the old one
    assert tape["funding_rate"].to_list() == [None, 0.0001, 0.0001, 0.0001, -0.002]
    assert tape["tvl"].to_list() == [5e9] * 5


def test_extra_series_errors(tmp_path):
    bars = write(tmp_path / "bars.csv", HEADER + GOOD1 + GOOD2)
    with pytest.raises(TapeError, match="expected one of gas"):
        ExtraSeries(bars, column="x", name="price")
    bad = write(tmp_path / "gas.csv", "timestamp,gwei\n2020-01-01 01:00:00,5\n2020-01-01 00:00:00,6\n")
    with pytest.raises(TapeError, match=r"gas\.csv: row 2: .*order='sort'"):
        import_tape([bars], extras=[ExtraSeries(bad, column="gwei", name="gas")])
    assert import_tape([bars], order="sort", extras=[ExtraSeries(bad, column="gwei", name="gas")])[
        "gas"].to_list() == [6.0, 5.0]
    neg = write(tmp_path / "neg.csv", "timestamp,gwei\n2020-01-01 00:00:00,-1\n")
    with pytest.raises(TapeError, match=r"neg\.csv: row 1: gas.*negative"):
        import_tape([bars], extras=[ExtraSeries(neg, column="gwei", name="gas")])
    with pytest.raises(TapeError, match=r"neg\.csv: header: missing required column 'fee'.*found columns"):
        import_tape([bars], extras=[ExtraSeries(neg, column="fee", name="gas")])
    with_gas = write(tmp_path / "with_gas.csv", "timestamp,open,high,low,close,gas\n"
                     "2020-01-01 00:00:00,1,1,1,1,3\n2020-01-01 01:00:00,1,1,1,1,4\n")
    good = write(tmp_path / "good.csv", "timestamp,gwei\n2020-01-01 00:00:00,1\n")
    with pytest.raises(TapeError, match="both"):
        import_tape([with_gas], extras=[ExtraSeries(good, column="gwei", name="gas")])


# --------------------------------------------------------------------------- write / read


def test_write_read_round_trip_is_byte_deterministic(tmp_path):
    p = write(tmp_path / "b.csv", HEADER + GOOD1 + GOOD2 + "2020-01-01 02:00:00,3,4,3,4\n")
    tape = import_tape([p])
    a, b = tmp_path / "a.parquet", tmp_path / "sub" / "b.parquet"
    write_tape(tape, a)
    write_tape(import_tape([p]), b)
    assert a.read_bytes() == b.read_bytes()
    back = read_tape(a)
    assert back.equals(tape) and back.schema == tape.schema
    assert sorted(x.name for x in tmp_path.iterdir() if x.name.startswith(".")) == []  # no temp left


def test_read_and_write_reject_bad_tapes(tmp_path):
    p = write(tmp_path / "b.csv", HEADER + GOOD1 + GOOD2)
    tape = import_tape([p])
    wrong = tmp_path / "wrong.parquet"
    tape.drop("tvl").write_parquet(wrong)
    with pytest.raises(TapeError, match=r"wrong\.parquet: header: .*expected exactly"):
        read_tape(wrong)
    bad_rows = tmp_path / "bad_rows.parquet"
    tape.with_columns(pl.Series("low", [1.0, 9.0])).write_parquet(bad_rows)
    with pytest.raises(TapeError, match=r"bad_rows\.parquet: row 2: high 3\.0 < low 9\.0"):
        read_tape(bad_rows)
    back = tmp_path / "back.parquet"
    tape.reverse().write_parquet(back)
    with pytest.raises(TapeError, match=r"back\.parquet: row 2: .*increasing"):
        read_tape(back)
    junk = write(tmp_path / "junk.parquet", "not parquet")
    with pytest.raises(TapeError, match=r"junk\.parquet"):
        read_tape(junk)
    with pytest.raises(TapeError, match=r"missing\.parquet"):
        read_tape(tmp_path / "missing.parquet")
    with pytest.raises(TapeError, match=r"out\.parquet: row 1: open is NaN"):
        write_tape(tape.with_columns(pl.Series("open", [math.nan, 2.0])), tmp_path / "out.parquet")
    assert not (tmp_path / "out.parquet").exists()


# --------------------------------------------------------------------------- events


def _tape(asset: str, rows: list[tuple]) -> pl.DataFrame:
    """rows: (open, high, low, close, volume, gas, funding_rate), one per hour from T0."""
    return pl.DataFrame(
        {
            "time_ms": [T0 + i * H for i in range(len(rows))],
            "bar_ms": [H] * len(rows),
            "asset": [asset] * len(rows),
            "open": [r[0] for r in rows],
            "high": [r[1] for r in rows],
            "low": [r[2] for r in rows],
            "close": [r[3] for r in rows],
            "volume": [r[4] for r in rows],
            "gas": [r[5] for r in rows],
            "tvl": [None] * len(rows),
            "funding_rate": [r[6] for r in rows],
        },
        schema=TAPE_SCHEMA,
    )


def test_detect_events_hand_computed():
    calm = (100.0, 101.0, 99.0, 100.0, 10.0, 1.0, 0.0001)  # range 0.02
    eth = _tape("ETH", [
        calm, calm, calm,
        # r = -0.08 (crash), wick -0.12 (high), volume 5x, range 0.125 = 6.25 x 0.02, funding new -0.0015
        (100.0, 100.5, 88.0, 92.0, 50.0, 1.0, -0.0015),
        # gas 5 > 3 x median(1,1,1) = 3 (medium, <= 6); same funding value -> no new event
        (92.0, 93.0, 91.0, 92.5, 10.0, 5.0, -0.0015),
        # r = 99/92.5 - 1 = +0.0703 pump; funding -0.004 >= 3 x 0.001 (high); range 0.078 < 4 x 0.0217
        (92.5, 99.2, 92.0, 99.0, 10.0, 1.0, -0.004),
        # wick 93/99 - 1 = -0.0606 with r = -0.0101 (crash-wick); gas 7 > 6 x median(1,5,1) (high)
        (99.0, 99.5, 93.0, 98.0, 10.0, 7.0, 0.0002),
    ])
    btc = _tape("BTC", [
        (100.0, 101.0, 99.0, 100.0, 10.0, None, None),
        (100.0, 101.0, 99.0, 100.0, 10.0, None, None),
        (100.0, 101.0, 99.0, 100.0, 10.0, None, None),
        (100.0, 100.0, 93.0, 94.0, 10.0, None, None),  # r = -0.06, wick -0.07: medium crash
    ])
    ev = detect_events(pl.concat([eth, btc]), vol_window=3)
    assert list(ev.schema.items()) == list(EVENT_SCHEMA.items())
    got = [(t - T0) // H for t in ev["time_ms"]]
    rows = list(zip(got, ev["asset"], ev["kind"], ev["severity"], ev["tokens"]))
    assert rows == [
        (3, "BTC", "crash-bar", "medium", "btc crash-bar"),
        (3, "ETH", "crash-bar", "high", "eth crash-bar deep-wick high-volume"),
        (3, "ETH", "funding-extreme", "medium", "eth funding-extreme negative"),
        (3, "ETH", "vol-spike", "low", "eth vol-spike high-volume"),
        (4, "ETH", "gas-spike", "medium", "eth gas-spike"),
        (5, "ETH", "funding-extreme", "high", "eth funding-extreme negative"),
        (5, "ETH", "pump-bar", "low", "eth pump-bar"),
        (6, "ETH", "crash-wick", "medium", "eth crash-wick"),
        (6, "ETH", "gas-spike", "high", "eth gas-spike"),
    ]
    assert ev["magnitude"].to_list() == pytest.approx(
        [-0.06, -0.08, -0.0015, 6.25, 5.0, -0.004, 99 / 92.5 - 1, 93 / 99 - 1, 7.0]
    )
    # deterministic, and order of input rows does not matter
    assert detect_events(pl.concat([btc, eth]), vol_window=3).equals(ev)
    # with a longer window the rolling detectors have no history yet; only bar rules remain
    kinds = detect_events(eth, vol_window=12)["kind"].to_list()
    assert kinds == ["crash-bar", "funding-extreme", "funding-extreme", "pump-bar", "crash-wick"]


def test_detect_events_thresholds_and_empty_result():
    calm = (100.0, 101.0, 99.0, 100.0, 10.0, None, None)
    tape = _tape("X", [calm, calm, (100.0, 100.0, 96.0, 97.0, 10.0, None, None)])
    assert detect_events(tape).height == 0
    ev = detect_events(tape, crash_return=-0.02, crash_high=-0.04)
    assert ev.select("kind", "severity", "tokens").rows() == [("crash-bar", "high", "x crash-bar deep-wick")]
    with pytest.raises(ValueError):
        detect_events(tape, vol_window=0)
    with pytest.raises(TapeError):
        detect_events(tape.drop("gas"))


# --------------------------------------------------------------------------- fuzz

_counter = itertools.count()
_NAMES = ["timestamp", "open", "high", "low", "close", "volume", "gas", "x", "Open", "", "time stamp"]
_CELLS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-10**20, 10**20).map(str),
    st.sampled_from(["", "nan", "NaN", "-1", "0", "abc", "1e309", "2020-01-01 00:00:00", "2020-13-45",
                     "1600000000", "\"", "null", "1,5"]),
    st.text(max_size=6),
)
_TIMES = [f"2020-01-01 {h:02d}:00:00" for h in range(6)]


@st.composite
def _malformed(draw):
    kind = draw(st.sampled_from(["bytes", "csv", "json", "jsonl", "parquet", "good_ish"]))
    if kind == "bytes":
        return draw(st.sampled_from([".csv", ".json", ".parquet"])), draw(st.binary(max_size=200))
    if kind == "good_ish":
        # well-formed bars in shuffled order, sometimes with one duplicate row or one bad cell
        n = draw(st.integers(0, 6))
        times = draw(st.permutations(_TIMES))[:n]
        rows = []
        for t in times:
            lo = draw(st.floats(0.5, 2.0))
            hi = lo + draw(st.floats(0.0, 1.0))
            rows.append([t, repr(lo), repr(hi), repr(lo), repr(hi), repr(draw(st.floats(0, 10)))])
        if rows and draw(st.booleans()):
            rows.append(list(draw(st.sampled_from(rows))))
        if rows and draw(st.booleans()):
            rows[draw(st.integers(0, len(rows) - 1))][draw(st.integers(0, 5))] = draw(_CELLS)
        text = "timestamp,open,high,low,close,volume\n" + "".join(",".join(r) + "\n" for r in rows)
        return ".csv", text.encode("utf-8", "surrogatepass")
    if kind == "csv":
        names = draw(st.lists(st.sampled_from(_NAMES) | st.text(max_size=5), min_size=0, max_size=7))
        n = draw(st.integers(0, 6))
        times = draw(st.permutations(_TIMES))[:n]
        lines = [",".join(names)]
        for i in range(n):
            cells = [draw(_CELLS) if draw(st.booleans()) else str(draw(st.floats(0.5, 2.0)))
                     for _ in names]
            if names and names[0] == "timestamp" and draw(st.booleans()):
                cells[0] = times[i]
            lines.append(",".join(cells))
        text = "\n".join(lines) + "\n"
        if draw(st.booleans()):
            text = text[: draw(st.integers(0, len(text)))]
        return ".csv", text.encode("utf-8", "surrogatepass")
    if kind in ("json", "jsonl"):
        value = st.one_of(st.none(), st.booleans(), st.floats(), st.integers(), st.text(max_size=5),
                          st.sampled_from(_TIMES))
        record = st.dictionaries(st.sampled_from(_NAMES), value, max_size=7)
        doc = draw(st.one_of(st.lists(record, max_size=5), record, value,
                             st.lists(value, max_size=3)))
        if kind == "json":
            text = json.dumps(doc)
        else:
            text = "\n".join(json.dumps(r) for r in (doc if isinstance(doc, list) else [doc]))
        if draw(st.booleans()):
            text = text[: draw(st.integers(0, len(text)))]
        return ("." + kind), text.encode("utf-8", "surrogatepass")
    n = draw(st.integers(0, 4))
    cols = draw(st.dictionaries(st.sampled_from(_NAMES[:7]),
                                st.lists(st.floats() | st.none(), min_size=n, max_size=n), max_size=6))
    buf = io.BytesIO()
    pl.DataFrame(cols, schema={k: pl.Float64 for k in cols}).write_parquet(buf)
    data = buf.getvalue()
    if draw(st.booleans()):
        data = data[: draw(st.integers(0, len(data)))]
    return ".parquet", data


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(case=_malformed(), order=st.sampled_from(["strict", "sort", "dedupe"]),
       time_unit=st.sampled_from([None, None, "s", "ms"]))
def test_fuzz_only_tape_error_escapes(tmp_path, case, order, time_unit):
    ext, data = case
    p = tmp_path / f"fuzz{next(_counter)}{ext}"
    p.write_bytes(data)
    unit = None if ext == ".csv" and b"timestamp,open" in data[:14] else time_unit
    try:
        tape = import_tape([p], order=order, time_unit=unit)
    except TapeError as exc:
        assert p.name in str(exc)
    else:
        assert_valid_tape(tape)


def test_fuzz_accepts_a_valid_file(tmp_path):
    # guards the fuzz test against a module that rejects everything
    p = write(tmp_path / "ok.csv", "timestamp,open,high,low,close,volume\n"
              + "".join(f"{t},1,2,0.5,1.5,3\n" for t in _TIMES))
    assert_valid_tape(import_tape([p]))


# --------------------------------------------------------------------------- real data


@pytest.mark.skipif(not DATA.exists(), reason="shared market data absent")
def test_black_thursday_is_a_high_severity_crash():
    tape = import_tape(
        [DATA / "BTC_USDT_2h.csv"],
        extras=[ExtraSeries(DATA / "funding_rate_BTCUSDT.csv", column="funding_rate", name="funding_rate")],
    )
    assert_valid_tape(tape)
    assert tape["bar_ms"][0] == 2 * H
    ev = detect_events(tape)
    days = ev.with_columns(pl.from_epoch("time_ms", time_unit="ms").dt.date().cast(pl.String).alias("day"))
    crashes = days.filter(
        pl.col("day").is_in(["2020-03-12", "2020-03-13"])
        & (pl.col("kind") == "crash-bar") & (pl.col("severity") == "high")
    )
    assert crashes.height >= 1
    # the 2020-03-12 22:00 bar fell 17.5 % (5819.12 -> 4800.00)
    worst = crashes.sort("magnitude").row(0, named=True)
    assert worst["time_ms"] == ms("2020-03-12T22:00:00")
    assert worst["magnitude"] == pytest.approx(4800.0 / 5819.12 - 1)
    # funding hit its floor (-0.003) at 2020-03-13 08:00: a high funding-extreme event
    fund = days.filter((pl.col("kind") == "funding-extreme") & (pl.col("severity") == "high"))
    assert ms("2020-03-13T08:00:00") in fund["time_ms"].to_list()
