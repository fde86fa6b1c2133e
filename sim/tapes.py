"""Tapes: recorded market data, imported from real OHLCV bars (SPEC §12, §13).

A tape is what the market process replays instead of a generator: one row per bar with the bar's
OPEN time, so that a Golem acting at ``time_ms`` can only see bars that have already opened and
nothing that happens later (no look-ahead).  Importing is strict on purpose: a silently repaired
price series would bias every run that replays it, so every defect is a :class:`TapeError` that
names the file, the row and what was expected, and nothing else escapes (a run driver can catch
one exception type and show the message to the researcher).

Tape schema (exact column order and dtypes, see :data:`TAPE_SCHEMA`)::

    time_ms Int64   bar open time, ms since the epoch, UTC
    bar_ms  Int64   bar length in ms (the median spacing of the file, the same on every row)
    asset   Utf8
    open, high, low, close, volume            Float64
    gas, tvl, funding_rate                    Float64, null where absent
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import os
import re
import tempfile
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import polars as pl

from sim.yaml_input import open_regular, read_input

try:  # polars raises Rust panics as PanicException, which derives from BaseException
    from polars.exceptions import PanicException as _PanicException
except ImportError:  # pragma: no cover - very old polars
    _PanicException = Exception

__all__ = [
    "TAPE_SCHEMA",
    "EVENT_SCHEMA",
    "ExtraSeries",
    "TapeError",
    "detect_events",
    "import_tape",
    "read_tape",
    "write_tape",
]

TAPE_SCHEMA: dict[str, pl.DataType] = {
    "time_ms": pl.Int64,
    "bar_ms": pl.Int64,
    "asset": pl.String,
    "open": pl.Float64,
    "high": pl.Float64,
    "low": pl.Float64,
    "close": pl.Float64,
    "volume": pl.Float64,
    "gas": pl.Float64,
    "tvl": pl.Float64,
    "funding_rate": pl.Float64,
}

EVENT_SCHEMA: dict[str, pl.DataType] = {
    "time_ms": pl.Int64,
    "asset": pl.String,
    "kind": pl.String,
    "severity": pl.String,
    "tokens": pl.String,
    "magnitude": pl.Float64,
}

PRICE_COLUMNS = ("open", "high", "low", "close")
EXTRA_NAMES = ("gas", "tvl", "funding_rate")
_CANONICAL = (*PRICE_COLUMNS, "volume", *EXTRA_NAMES)
_ORDERS = ("strict", "sort", "dedupe")
# unit -> (multiply, floor-divide) to reach milliseconds
_TIME_UNITS = {"s": (1000, 1), "ms": (1, 1), "us": (1, 1000), "ns": (1, 1_000_000)}
# year 1 .. year 9999: keeps every time printable in messages and far from Int64 overflow
_MIN_MS = -62_135_596_800_000
_MAX_MS = 253_402_300_799_999
#: year 1000: a text time before it was written with a short year ('17-08-17' read as 0017)
_MIN_TEXT_MS = -30_610_224_000_000
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_FORMATS = {
    "csv": "csv", "tsv": "csv", "txt": "csv",
    "parquet": "parquet", "pq": "parquet",
    "json": "json", "jsonl": "json", "ndjson": "json",
}
# candidate formats for automatic time parsing, tried in order on normalised strings
# ('T' separator -> space, trailing 'Z'/'UTC' -> '+00:00'); '%.f' also matches no fraction
_AUTO_TIME_FORMATS = (
    "%Y-%m-%d %H:%M:%S%.f",
    "%Y-%m-%d %H:%M:%S%.f%:z",
    "%Y-%m-%d %H:%M:%S%.f%z",
    "%Y-%m-%d %H:%M",
    "%Y-%m-%d %H:%M%:z",
    "%Y-%m-%d",
    "%Y/%m/%d %H:%M:%S%.f",
    "%Y/%m/%d %H:%M",
    "%Y/%m/%d",
)
_ISO_HINT = (
    "an ISO-like date-time such as '2017-08-17 04:00:00' or '2019-09-10T08:00:00.000Z' "
    "(or pass time_format=..., or time_unit='s'|'ms'|'us'|'ns' for epoch numbers)"
)
#: gas is kept in gwei; a file in wei is scaled on import (gas_unit='wei')
GAS_UNITS = {"gwei": 1.0, "wei": 1e-9}
#: above this a gas price in gwei is not plausible (Ethereum's daily mean never passed ~1,000 gwei;
#: wei values are ~1e9 times larger): the range check that catches a file in the wrong unit
GAS_MAX_GWEI = 100_000.0
# time-column names tried, in order, when none is given (compared without case, spaces, '_', '()')
_OPEN_TIME_NAMES = ("opentime", "timeopen", "opentimestamp", "barstart", "periodstart", "start")
_CLOSE_TIME_NAMES = ("closetime", "timeclose", "closetimestamp", "barend", "periodend", "end")
_TIME_NAMES = ("timestamp", *_OPEN_TIME_NAMES, "time", "datetime", "date", "dateutc", "unixtimestamp", "unix", "ts",
               *_CLOSE_TIME_NAMES)
_VOL_SPIKE_MULT = 4.0
_HIGH_VOLUME_MULT = 3.0


class TapeError(ValueError):
    """The one documented error type: bad tape input.

    The message names the file, the row (1-based data row, or the timestamp) and what was
    expected, so a researcher can fix the data without reading a traceback.
    """


@dataclass(frozen=True)
class ExtraSeries:
    """A side series (gas, TVL or funding rate) kept in its own file and joined onto the bars.

    It is joined as-of backward on time: each bar gets the last value known at or before its open
    time (never a later one, so no look-ahead), and null before the series' first value.
    """

    path: str | Path
    column: str
    name: str
    time_col: str | None = None        # None: found by name like the bars' (timestamp, open time, date ...)
    time_format: str | None = None
    time_unit: str | None = None
    sep: str = ","
    records_key: str | None = None     # JSON: the key whose value holds the records

    def __post_init__(self) -> None:
        if self.name not in EXTRA_NAMES:
            raise TapeError(
                f"{self.path}: extra series name {self.name!r} is not allowed; "
                f"expected one of {', '.join(EXTRA_NAMES)}"
            )


# --------------------------------------------------------------------------- helpers


def _fmt_ms(ms: int) -> str:
    """Render epoch ms as a UTC time for messages (falls back to the raw number)."""
    try:
        dt = datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
        return dt.strftime("%Y-%m-%d %H:%M:%S") + (f".{ms % 1000:03d}" if ms % 1000 else "") + " UTC"
    except (OverflowError, OSError, ValueError):
        return f"{ms} ms"


def _first_true(mask: pl.Series) -> int | None:
    """Index of the first True in a boolean mask (nulls count as False), or None."""
    idx = mask.fill_null(False).arg_true()
    return int(idx[0]) if len(idx) else None


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first[:200]}"


def _resolve_format(path: Path, fmt: str | None) -> str:
    if fmt is not None:
        key = str(fmt).lower()
        if key not in ("csv", "parquet", "json"):
            raise TapeError(f"{path}: unknown fmt {fmt!r}; expected 'csv', 'parquet' or 'json'")
        return key
    ext = path.suffix.lower().lstrip(".")
    if ext not in _FORMATS:
        raise TapeError(
            f"{path}: cannot tell the format from the extension {path.suffix!r}; expected "
            ".csv, .parquet or .json/.jsonl (or pass fmt='csv'|'parquet'|'json')"
        )
    return _FORMATS[ext]


#: a JSON tape is parsed whole by Python's json (its objects take ~10x the file): larger files go in as CSV or Parquet
MAX_JSON_BYTES = 64 * 2**20
#: a CSV whose lines end in a lone \r is normalised in memory, up to this size (other CSVs are streamed)
MAX_CR_CSV_BYTES = 64 * 2**20
_CHUNK = 1 << 20
#: rows of a CSV parsed at a time: its text is held a batch at a time, its parsed bars whole
BATCH_ROWS = 250_000


def _read_bytes(path: Path, limit: int) -> bytes:
    data = read_input(path, limit, "a tape file", TapeError)
    if not data.strip():
        raise TapeError(f"{path}: row 1: the file is empty; expected a header and at least one data row")
    return data


def _decode(path: Path, data: bytes) -> str:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise TapeError(f"{path}: line {line}: bytes are not valid UTF-8; expected UTF-8 text") from exc
    return text.lstrip("\ufeff")


def _scan_bytes(path: Path, sep: str) -> tuple[bool, int | None]:
    """One pass over a CSV in 1 MiB pieces (memory does not grow with the file): empty file and
    UTF-8 errors (naming the line) refused. Returns whether some line ends in a lone \\r (which the
    streaming reader does not take for a line end) and, for a file without quotes (where a line is
    a record), its count of non-blank lines (a cell other than spaces and separators), else None."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    filled = re.compile(rb"(?m)^[ \t\r\f\v" + re.escape(sep.encode()) + rb"]*[^ \t\r\f\v\n" +
                        re.escape(sep.encode()) + rb"]")
    lines, lone_cr, prev_cr, content, quoted, nonblank, carry = 0, False, False, False, False, 0, b""
    with os.fdopen(open_regular(path, "a tape file", TapeError), "rb") as fh:
        while chunk := fh.read(_CHUNK):
            try:
                decoder.decode(chunk)
            except UnicodeDecodeError as exc:
                line = lines + chunk[: max(exc.start, 0)].count(b"\n") + 1
                raise TapeError(f"{path}: line {line}: bytes are not valid UTF-8; expected UTF-8 text") from None
            lines += chunk.count(b"\n")
            content = content or bool(chunk.strip())
            lone_cr = lone_cr or (prev_cr and not chunk.startswith(b"\n")) or \
                re.search(rb"\r(?!\n)", chunk[:-1] if chunk.endswith(b"\r") else chunk) is not None
            prev_cr = chunk.endswith(b"\r")
            quoted = quoted or b'"' in chunk
            if not quoted:
                whole, _, carry = (carry + chunk).rpartition(b"\n")
                nonblank += sum(1 for _ in filled.finditer(whole))
    if not content:
        raise TapeError(f"{path}: row 1: the file is empty; expected a header and at least one data row")
    return lone_cr, None if quoted else nonblank + (1 if filled.match(carry) else 0)


def _text_lines(path: Path, text: str | None):
    """The CSV's text as a stream of lines for the csv module: the normalised text, or the file
    read lazily (universal newlines, BOM dropped)."""
    if text is not None:
        return io.StringIO(text)
    return io.TextIOWrapper(os.fdopen(open_regular(path, "a tape file", TapeError), "rb"),
                            encoding="utf-8-sig", newline="")


def _read_csv(path: Path, sep: str) -> tuple[pl.LazyFrame, str | None, int | None]:
    """The CSV as a lazy frame of text columns (types would be guessed from the first rows and
    misreport later ones), with `_row` (1-based data row) and `_blank` (a row of empty cells).
    The file is scanned, not loaded: only the columns a tape needs are ever collected."""
    if not isinstance(sep, str) or len(sep.encode("utf-8")) != 1 or sep in "\r\n\"":
        raise TapeError(f"{path}: separator {sep!r} is not usable; expected a single one-byte character")
    text = None
    lone_cr, lines = _scan_bytes(path, sep)
    if lone_cr:
        lines = None
        # lines ending in a lone \r (old Mac exports, mixed files): normalised in memory
        try:
            data = _read_bytes(path, MAX_CR_CSV_BYTES)
        except TapeError as exc:
            raise TapeError(f"{exc} (a CSV with lines ending in a lone \\r is read whole; expected \\n or \\r\\n "
                            "line ends for a larger file)") from None
        text = _decode(path, data).replace("\r\n", "\n").replace("\r", "\n")
    source = io.BytesIO(text.encode("utf-8")) if text is not None else path
    try:
        lf = pl.scan_csv(source, separator=sep, infer_schema=False, has_header=True) if text is None else \
            pl.read_csv(source, separator=sep, infer_schema=False, has_header=True).lazy()
        names = lf.collect_schema().names()
    except pl.exceptions.NoDataError as exc:
        raise TapeError(f"{path}: row 1: the file is empty; expected a header and at least one data row") from exc
    except (Exception, _PanicException) as exc:
        raise TapeError(f"{path}: {_csv_diagnosis(path, text, sep)} ({_short(exc)})") from exc
    blank = pl.all_horizontal([pl.col(c).is_null() | (pl.col(c).str.strip_chars() == "") for c in names])
    return (lf.with_row_index("_row", offset=1).with_columns(pl.col("_row").cast(pl.Int64), blank.alias("_blank")),
            text, lines)


def _check_row_count(path: Path, text: str | None, sep: str, got: int, lines: int | None = None) -> None:
    """Every non-blank line after the header is one bar: a reader that merged or skipped lines
    (odd quoting, stray separators) is an error, never a silently shorter tape. `lines`: the
    non-blank lines counted on the bytes (a file without quotes); else the csv module counts the
    records as it streams them."""
    try:
        if lines is None:
            with _text_lines(path, text) as fh:
                lines = sum(1 for r in csv.reader(fh, delimiter=sep) if any(c.strip() for c in r))
    except csv.Error:
        return   # the csv module cannot count it either; polars' own parse stands
    expected = max(lines - 1, 0)
    if got != expected:
        raise TapeError(f"{path}: read {got} data rows but the file has {expected} non-blank lines after the "
                        "header; expected one bar per line (check quoting and separators)")


def _csv_diagnosis(path: Path, text: str | None, sep: str) -> str:
    """Find the row polars choked on (usually a row with too many fields) for the message."""
    try:
        with _text_lines(path, text) as fh:
            rows = csv.reader(fh, delimiter=sep)
            header = next(rows)
            for n, row in enumerate(rows, start=1):
                if len(row) > len(header):
                    return (f"row {n}: {len(row)} fields; expected at most {len(header)} "
                            f"(the header has {len(header)})")
    except (csv.Error, StopIteration, ValueError) as exc:
        return f"not parseable as CSV ({_short(exc)}); expected a CSV file with a header row"
    return "not parseable as CSV; expected a CSV file with a header row"


def _json_cell(value: Any) -> str | None:
    # numbers become their exact text (repr of a float round-trips), so one text parser serves all
    if value is None:
        return None
    if isinstance(value, bool):
        return str(value).lower()  # later rejected as "not a number" / "cannot parse time"
    if isinstance(value, (int, float, str)):
        return str(value) if not isinstance(value, float) else repr(value)
    return json.dumps(value)


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "string", list: "array"}.get(type(value), type(value).__name__)


def _records_under(path: Path, doc: Any, key: str) -> list:
    """doc[key] (dotted keys reach deeper: 'result.rows') as the list of records."""
    cur = doc
    for part in key.split("."):
        if not isinstance(cur, dict) or part not in cur:
            keys = sorted(cur) if isinstance(cur, dict) else []
            raise TapeError(f"{path}: records_key {key!r}: no key {part!r} (found keys {keys}); expected the key "
                            "whose value is the array of records")
        cur = cur[part]
    if not isinstance(cur, list):
        raise TapeError(f"{path}: records_key {key!r}: found JSON {_json_kind(cur)}; expected an array of records")
    return cur


def _read_json(path: Path, data: bytes, records_key: str | None = None) -> pl.DataFrame:
    text = _decode(path, data)
    records: list[tuple[int, Any]]
    try:
        doc = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        doc = None
        records = []
        for lineno, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                records.append((len(records) + 1, json.loads(line)))
            except (json.JSONDecodeError, RecursionError) as exc:
                raise TapeError(
                    f"{path}: row {len(records) + 1} (line {lineno}): not valid JSON ({_short(exc)}); "
                    "expected a JSON array of objects or one JSON object per line"
                ) from exc
    else:
        if records_key is not None:
            records = list(enumerate(_records_under(path, doc, records_key), start=1))
        elif isinstance(doc, list):
            records = list(enumerate(doc, start=1))
        elif isinstance(doc, dict) and any(isinstance(v, list) for v in doc.values()):
            lists = [k for k, v in doc.items() if isinstance(v, list)]
            raise TapeError(f"{path}: a JSON object with keys {list(doc)}; expected an array of records "
                            f"(for records under a key, as pandas' table orient writes them: "
                            f"records_key={lists[0]!r})")
        else:
            records = [(1, doc)]
    if not records:
        raise TapeError(f"{path}: row 1: no records; expected a JSON array of objects or JSON lines")
    names: dict[str, None] = {}
    clean: list[dict[str, Any]] = []
    for n, rec in records:
        if not isinstance(rec, dict):
            raise TapeError(
                f"{path}: row {n}: found JSON {_json_kind(rec)}; expected a JSON object (one bar)"
            )
        rec = {str(k).strip(): v for k, v in rec.items()}
        names.update(dict.fromkeys(rec))
        clean.append(rec)
    cols = [
        pl.Series(name, [_json_cell(rec.get(name)) for rec in clean], dtype=pl.String)
        for name in names
    ]
    return pl.DataFrame(cols)


@dataclass
class _Raw:
    """One file's columns, not yet collected: `header` (no rows) has the names and types, `lf`
    the rows with `_row` (1-based data row); a CSV also keeps `sep`, its normalised `text` (None
    when streamed) and its non-blank `lines` counted on the bytes (None: the csv module counts)."""

    path: Path
    lf: pl.LazyFrame
    header: pl.DataFrame
    sep: str | None = None
    text: str | None = None
    lines: int | None = None

    def batches(self, columns: list[str]):
        """The named columns and `_row` in order, BATCH_ROWS rows at a time (a CSV's text never
        whole in memory), blank CSV lines left out; once all are read, the count of rows checked
        against the lines the csv module sees, and at least one row."""
        lf = self.lf.filter(~pl.col("_blank")) if self.sep is not None else self.lf
        lf = lf.select(*dict.fromkeys(columns), "_row")
        rows = 0
        try:
            parts = lf.collect_batches(chunk_size=BATCH_ROWS, engine="streaming") if self.sep is not None \
                else [lf.collect()]
            for df in parts:
                rows += df.height
                yield df
        except (Exception, _PanicException) as exc:
            if self.sep is None or isinstance(exc, TapeError):
                raise
            raise TapeError(f"{self.path}: {_csv_diagnosis(self.path, self.text, self.sep)} ({_short(exc)})") from exc
        if self.sep is not None:
            _check_row_count(self.path, self.text, self.sep, rows, self.lines)
        if rows == 0:
            raise TapeError(f"{self.path}: row 1: no data rows; expected a header and at least one data row")


def _read_raw(path: Path, fmt: str | None, sep: str, records_key: str | None = None) -> _Raw:
    """One file's raw columns (names stripped of whitespace and BOM), not yet read for a CSV."""
    kind = _resolve_format(path, fmt)
    text = lines = None
    if kind == "csv":
        lf, text, lines = _read_csv(path, sep)
    else:
        if kind == "json":
            df = _read_json(path, _read_bytes(path, MAX_JSON_BYTES), records_key)
        else:
            df = _read_parquet(path, "Parquet")
        if df.height == 0:
            raise TapeError(f"{path}: row 1: no data rows; expected a header and at least one data row")
        lf = df.lazy().with_row_index("_row", offset=1).with_columns(pl.col("_row").cast(pl.Int64))
    schema = {n: t for n, t in lf.collect_schema().items() if n not in ("_row", "_blank")}
    stripped = [c.strip().lstrip("\ufeff").strip() for c in schema]
    if len(set(stripped)) == len(stripped):
        lf = lf.rename(dict(zip(schema, stripped)))
        schema = dict(zip(stripped, schema.values()))
    if not schema:
        raise TapeError(f"{path}: row 1: no data rows; expected a header and at least one data row")
    return _Raw(path, lf, pl.DataFrame(schema=schema), sep if kind == "csv" else None, text, lines)


def _find_column(df: pl.DataFrame, name: str, explicit: bool) -> str | None:
    """Exact name, else (for default names only) a unique case-insensitive match."""
    if name in df.columns:
        return name
    if explicit:
        stripped = name.strip()
        return stripped if stripped in df.columns else None
    matches = [c for c in df.columns if c.lower() == name.lower()]
    return matches[0] if len(matches) == 1 else None


def _squash(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch not in " _-()[]")


def _time_column(df: pl.DataFrame, time_col: str | None, path: Path, expected: list[str],
                 notes: list[str] | None) -> str:
    """The time column: the one named (exactly, or its only case-insensitive match), else the first
    of the usual names (open times before close times, since a tape is stamped with bar OPEN times).
    Without a name, which column was taken goes into `notes`."""
    if time_col is not None:
        tcol = _find_column(df, time_col, explicit=False)
        if tcol is None:
            raise _missing(path, "time", time_col, df, [time_col, *expected])
        return tcol
    by = {}
    for c in df.columns:
        by.setdefault(_squash(c), c)
    found = [by[n] for n in _TIME_NAMES if n in by]
    if not found:
        raise TapeError(
            f"{path}: header: no time column found (looked for {', '.join(repr(n) for n in _TIME_NAMES[:8])}, ...); "
            f"expected one, or time_col=... naming it; {_found_columns(path, df)}")
    tcol = found[0]
    if notes is not None:
        close = _squash(tcol) in _CLOSE_TIME_NAMES
        also = f"; also found {', '.join(repr(c) for c in found[1:])}" if len(found) > 1 else ""
        notes.append(f"{path}: time column {tcol!r}" + (" (bar CLOSE times: each bar is taken as opening then)"
                                                         if close else "") + also + " (choose with time_col=...)")
    return tcol


def _check_gas(values: pl.Series, rows: pl.Series, path: Path | str, label: str, unit: str) -> None:
    bad = _first_true(values > GAS_MAX_GWEI)
    if bad is not None:
        hint = " (it looks like wei: pass gas_unit='wei')" if unit == "gwei" else ""
        raw = f"{values[bad]:g}" if unit == "gwei" else f"{values[bad] / GAS_UNITS[unit]:g} {unit} = {values[bad]:g} gwei"
        raise TapeError(f"{path}: row {rows[bad]}: {label} value {raw} is above {GAS_MAX_GWEI:,.0f} gwei{hint}; "
                        "expected a gas price in gwei")


def _missing(path: Path, what: str, wanted: str, df: pl.DataFrame, expected: list[str]) -> TapeError:
    return TapeError(
        f"{path}: header: missing required column {wanted!r} ({what}); expected columns "
        f"{', '.join(repr(e) for e in expected)}; {_found_columns(path, df)}"
    )


def _found_columns(path: Path | str, df: pl.DataFrame) -> str:
    """The header as an error may quote it: a short escaped excerpt, and only from a regular file
    named directly (a link may point at a file that is not a tape, such as /etc/shadow)."""
    from sim.errors import clip, escape
    if not os.path.isfile(path) or os.path.islink(path):
        return f"found {df.width} column(s) (not shown: {path} is a link or not a regular file)"
    return "found columns " + clip(escape(", ".join(repr(c) for c in df.columns)), 120)


def _parse_float(col: pl.Series, rows: pl.Series, path: Path, label: str) -> pl.Series:
    """Column -> Float64, naming the first row (`rows`: data row numbers) whose text is not a number."""
    dtype = col.dtype
    if dtype == pl.String:
        text = col.str.strip_chars()
        out = text.cast(pl.Float64, strict=False)
        bad = _first_true(text.is_not_null() & (text != "") & out.is_null())
        if bad is not None:
            raise TapeError(
                f"{path}: row {rows[bad]}: {label} value {text[bad]!r} is not a number; expected a number"
            )
        return out
    if dtype.is_numeric() and dtype != pl.Boolean:
        return col.cast(pl.Float64)
    if dtype == pl.Null:
        return col.cast(pl.Float64)
    raise TapeError(f"{path}: row 1: {label} has type {dtype}; expected numbers")


def _check_numbers(values: pl.Series, rows: pl.Series, path: Path | str, label: str, *,
                   allow_null: bool, minimum: str) -> None:
    """Reject null (unless allowed), NaN, inf and values below the minimum.

    minimum: 'positive' (prices), 'nonnegative' (volume, gas, TVL) or 'any' (funding rate).
    """
    what = {"positive": "a finite positive number", "nonnegative": "a finite number >= 0",
            "any": "a finite number"}[minimum]
    checks = []
    if not allow_null:
        checks.append((values.is_null(), "is missing (null)"))
    checks.append((values.is_nan(), "is NaN"))
    checks.append((values.is_infinite(), "is infinite"))
    if minimum == "positive":
        checks.append((values <= 0, "is not positive"))
    elif minimum == "nonnegative":
        checks.append((values < 0, "is negative"))
    for mask, problem in checks:
        bad = _first_true(mask)
        if bad is not None:
            raise TapeError(
                f"{path}: row {rows[bad]}: {label} {problem} (value {values[bad]}); expected {what}"
            )


def _normalise_time_text(text: pl.Series) -> pl.Series:
    text = text.str.strip_chars()
    text = text.str.replace(r"^(\d{4}[-/]\d{1,2}[-/]\d{1,2})[T ]+", "${1} ")
    return text.str.replace(r"\s*(?:Z|z|UTC|GMT)$", "+00:00")


def _epoch_ms_from_text(text: pl.Series, time_format: str | None, path: Path, label: str) -> pl.Series:
    if time_format is not None:
        try:
            parsed = text.str.strip_chars().str.to_datetime(time_format, strict=False, time_unit="us")
        except (Exception, _PanicException) as exc:
            raise TapeError(
                f"{path}: time_format {time_format!r} for {label} is not usable ({_short(exc)}); "
                "expected a strptime format such as '%Y-%m-%d %H:%M:%S'"
            ) from exc
        return parsed.dt.epoch("ms")
    norm = _normalise_time_text(text)
    out = None
    for f in _AUTO_TIME_FORMATS:   # the first format that reads a row wins; later ones see only the rest
        if out is None:
            out = norm.str.to_datetime(f, strict=False, time_unit="us").dt.epoch("ms")
            continue
        left = (out.is_null() & norm.is_not_null()).arg_true()
        if left.len() == 0:
            break
        out = out.scatter(left, norm.gather(left).str.to_datetime(f, strict=False, time_unit="us").dt.epoch("ms"))
    return out


def _epoch_ms_from_numbers(num: pl.Series, ints: pl.Series | None, unit: str) -> pl.Series:
    mul, div = _TIME_UNITS[unit]
    ms_f = (num * mul / div).floor()
    in_range = ms_f.is_not_nan() & (ms_f >= _MIN_MS) & (ms_f <= _MAX_MS)
    exact = None
    if ints is not None:
        safe = ints.is_not_null() & in_range
        exact = pl.select(
            pl.when(pl.lit(safe)).then(pl.lit(ints) * mul // div).otherwise(None)
        ).to_series()
    approx = pl.select(
        pl.when(pl.lit(in_range)).then(pl.lit(ms_f)).otherwise(None).cast(pl.Int64)
    ).to_series()
    if exact is None:
        return approx
    return pl.select(pl.coalesce([pl.lit(exact), pl.lit(approx)])).to_series()


def _parse_time(col: pl.Series, rows: pl.Series, path: Path, label: str, time_format: str | None,
                time_unit: str | None) -> pl.Series:
    """Time column -> Int64 ms since the epoch, UTC; naive times are taken as UTC. A text year
    has four digits: '17-08-17' is refused (not read as the year 17), unless `time_format` says
    how to read it ('%y-%m-%d')."""
    if time_unit is not None and time_unit not in _TIME_UNITS:
        raise TapeError(f"{path}: time_unit {time_unit!r} for {label}; expected one of s, ms, us, ns")
    dtype = col.dtype
    if isinstance(dtype, pl.Datetime):
        ms = col.dt.epoch("ms")
        expected = "a date-time"
    elif dtype == pl.Date:
        ms = col.cast(pl.Datetime("ms")).dt.epoch("ms")
        expected = "a date"
    elif dtype.is_numeric() and dtype != pl.Boolean:
        if time_unit is None:
            raise TapeError(
                f"{path}: row 1: {label} holds numbers (e.g. {col.drop_nulls().head(1).to_list()}); "
                "expected time_unit='s'|'ms'|'us'|'ns' to say what they count"
            )
        ints = col.cast(pl.Int64) if dtype.is_integer() else None
        ms = _epoch_ms_from_numbers(col.cast(pl.Float64), ints, time_unit)
        expected = f"a finite number of {time_unit} since 1970-01-01 UTC, within years 1..9999"
    elif dtype == pl.String:
        if time_unit is not None:
            text = col.str.strip_chars()
            ints = text.cast(pl.Int64, strict=False)
            ms = _epoch_ms_from_numbers(text.cast(pl.Float64, strict=False), ints, time_unit)
            expected = f"a number of {time_unit} since 1970-01-01 UTC, within years 1..9999"
        else:
            ms = _epoch_ms_from_text(col, time_format, path, label)
            expected = f"format {time_format!r}" if time_format is not None else _ISO_HINT
    else:
        raise TapeError(f"{path}: row 1: {label} has type {dtype}; expected date-times, text or numbers")
    missing = _first_true(col.is_null())
    if missing is not None:
        raise TapeError(f"{path}: row {rows[missing]}: {label} is missing; expected {expected}")
    if dtype == pl.String:
        blank = _first_true(col.str.strip_chars() == "")
        if blank is not None:
            raise TapeError(f"{path}: row {rows[blank]}: {label} is empty; expected {expected}")
        if time_unit is None:
            short = _first_true(ms.is_not_null() & (ms < _MIN_TEXT_MS) &
                                ~col.str.strip_chars().str.contains(r"^\d{4}"))
            if short is not None:
                raise TapeError(f"{path}: row {rows[short]}: {label} value {col[short]!r} has a year of fewer than "
                                "four digits (read as the year "
                                f"{(_EPOCH + timedelta(milliseconds=int(ms[short]))).year}); expected four-digit years "
                                "(for two-digit years pass time_format, e.g. '%y-%m-%d')")
    bad = _first_true(ms.is_null() | (ms < _MIN_MS) | (ms > _MAX_MS))
    if bad is not None:
        hint = ""
        if dtype == pl.String and time_unit is None and time_format is None:
            if col.str.strip_chars().cast(pl.Float64, strict=False)[bad] is not None:
                hint = " (it looks like an epoch number: pass time_unit='s'|'ms'|'us'|'ns')"
        raise TapeError(
            f"{path}: row {rows[bad]}: cannot parse {label} value {col[bad]!r}{hint}; expected {expected}"
        )
    return ms.cast(pl.Int64)


def _load_bars(path: Path, *, fmt: str | None, sep: str, time_col: str | None, time_format: str | None,
               time_unit: str | None, columns: dict[str, str], gas_unit: str = "gwei",
               records_key: str | None = None, notes: list[str] | None = None) -> pl.DataFrame:
    """One bar file -> validated frame (time_ms, prices, volume, present extras, _row).

    Only the columns a tape needs are read, their text a batch at a time (`_Raw.batches`)."""
    raw = _read_raw(path, fmt, sep, records_key)
    head = raw.header
    expected = [*(columns.get(c, c) for c in PRICE_COLUMNS)]
    tcol = _time_column(head, time_col, path, expected, notes)
    expected = [tcol, *expected]
    sources: dict[str, str] = {}
    for canon in _CANONICAL:
        explicit = canon in columns
        src = _find_column(head, columns.get(canon, canon), explicit)
        if src is None:
            if canon in PRICE_COLUMNS:
                raise _missing(path, canon, columns.get(canon, canon), head, expected)
            if explicit:
                raise _missing(path, canon, columns[canon], head, expected)
            continue
        sources[canon] = src
    parts = [_parse_bars(df, tcol, sources, path, time_format, time_unit, gas_unit)
             for df in raw.batches([tcol, *sources.values()])]
    frame = pl.concat(parts) if len(parts) > 1 else parts[0]
    del parts
    if "volume" not in frame.columns:
        frame = frame.with_columns(pl.lit(0.0, dtype=pl.Float64).alias("volume"))
        if notes is not None:
            notes.append(f"{path}: no volume column; volume is 0 on every bar")
    return frame.select("time_ms", *PRICE_COLUMNS, "volume", *(c for c in EXTRA_NAMES if c in frame.columns), "_row")


def _parse_bars(df: pl.DataFrame, tcol: str, sources: dict[str, str], path: Path, time_format: str | None,
                time_unit: str | None, gas_unit: str) -> pl.DataFrame:
    """One batch of a bar file's text columns -> checked numbers (time_ms, prices, volume, extras, _row)."""
    rows = df["_row"]
    out: dict[str, pl.Series] = {
        "time_ms": _parse_time(df[tcol], rows, path, f"time column {tcol!r}", time_format, time_unit)
    }
    for canon, src in sources.items():
        label = f"{canon} (column {src!r})"
        values = _parse_float(df[src], rows, path, label)
        if canon in PRICE_COLUMNS:
            _check_numbers(values, rows, path, label, allow_null=False, minimum="positive")
        elif canon == "volume":
            _check_numbers(values, rows, path, label, allow_null=True, minimum="nonnegative")
            values = values.fill_null(0.0)  # a missing volume is "no volume recorded"
        else:
            _check_numbers(values, rows, path, label, allow_null=True,
                           minimum="any" if canon == "funding_rate" else "nonnegative")
            if canon == "gas":
                values = values * GAS_UNITS[gas_unit]
                _check_gas(values, rows, path, label, gas_unit)
        out[canon] = values.alias(canon)
    _check_ohlc(out["open"], out["high"], out["low"], out["close"], rows, path)
    frame = pl.DataFrame([s.alias(name) for name, s in out.items()])
    return frame.with_columns(rows)


def _check_ohlc(o: pl.Series, h: pl.Series, lo: pl.Series, c: pl.Series, rows: pl.Series, where: Path | str) -> None:
    """A bar's prices are consistent: low <= open, close <= high (a close above the high is a
    corrupt row, not a price to replay)."""
    for mask, what in ((h < lo, "high {h} < low {l}; expected high >= low"),
                       (o > h, "open {o} > high {h}; expected low <= open <= high"),
                       (o < lo, "open {o} < low {l}; expected low <= open <= high"),
                       (c > h, "close {c} > high {h}; expected low <= close <= high"),
                       (c < lo, "close {c} < low {l}; expected low <= close <= high")):
        bad = _first_true(mask)
        if bad is not None:
            raise TapeError(f"{where}: row {rows[bad]}: " + what.format(o=o[bad], h=h[bad], l=lo[bad], c=c[bad]))


def _apply_order(df: pl.DataFrame, order: str, names: list[str], what: str) -> pl.DataFrame:
    """Enforce the `order` policy; df carries _file (index into names) and _row."""
    if order != "strict":
        df = df.sort("time_ms", maintain_order=True)  # stable: equal times keep input order
        if order == "dedupe":
            df = df.unique(subset="time_ms", keep="last", maintain_order=True)
    t = df["time_ms"]
    diff = t.diff()
    bad = _first_true(diff <= 0)
    if bad is None:
        return df

    def where(i: int) -> str:
        return f"{names[df['_file'][i]]}: row {df['_row'][i]}"

    cur, prev = t[bad], t[bad - 1]
    if cur == prev:
        fix = "use order='dedupe' to keep the last bar of each timestamp" if order == "sort" else \
            "use order='sort' to sort, or order='dedupe' to also drop duplicates keeping the last"
        raise TapeError(
            f"{where(bad)}: duplicate {what} timestamp {_fmt_ms(cur)} (also {where(bad - 1)}); "
            f"expected one bar per timestamp ({fix})"
        )
    raise TapeError(
        f"{where(bad)}: {what} timestamp {_fmt_ms(cur)} is earlier than the previous row's "
        f"{_fmt_ms(prev)} ({where(bad - 1)}); expected strictly increasing times "
        "(use order='sort' or order='dedupe')"
    )


def _load_extra(extra: ExtraSeries, order: str, gas_unit: str = "gwei", notes: list[str] | None = None) -> pl.DataFrame:
    path = Path(extra.path)
    raw = _read_raw(path, None, extra.sep, extra.records_key)
    tcol = _time_column(raw.header, extra.time_col, path, [extra.column], notes)
    vcol = _find_column(raw.header, extra.column, explicit=True)
    if vcol is None:
        raise _missing(path, extra.name, extra.column, raw.header, [tcol, extra.column])
    df = pl.concat(list(raw.batches([tcol, vcol])))
    rows = df["_row"]
    time_ms = _parse_time(df[tcol], rows, path, f"time column {tcol!r}", extra.time_format, extra.time_unit)
    label = f"{extra.name} (column {vcol!r})"
    values = _parse_float(df[vcol], rows, path, label)
    _check_numbers(values, rows, path, label, allow_null=False,
                   minimum="any" if extra.name == "funding_rate" else "nonnegative")
    if extra.name == "gas":
        values = values * GAS_UNITS[gas_unit]
        _check_gas(values, rows, path, label, gas_unit)
    frame = pl.DataFrame([time_ms.alias("time_ms"), values.alias(extra.name), rows]).with_columns(
        pl.lit(0, dtype=pl.Int64).alias("_file")
    )
    frame = _apply_order(frame, order, [str(path)], extra.name)
    return frame.select("time_ms", extra.name)


def _guarded(where: str, fn, *args, **kwargs):
    """Run fn, turning any unexpected exception into a TapeError that names the file."""
    try:
        return fn(*args, **kwargs)
    except TapeError:
        raise
    except (Exception, _PanicException) as exc:  # noqa: BLE001 - the documented contract
        raise TapeError(f"{where}: cannot import ({_short(exc)}); expected a valid tape file") from exc


def _import_args(paths, asset, order, gas_unit, columns, extras) -> tuple[list[Path], str, dict, list]:
    """`import_tape`'s arguments checked before any file is read: the paths, their names for
    messages, the column map and the extra series."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    try:
        paths = [Path(p) for p in paths]
    except TypeError as exc:
        raise TapeError(f"paths {paths!r}: expected a list of file paths") from exc
    if not paths:
        raise TapeError("no files given; expected at least one tape file")
    where_all = ", ".join(str(p) for p in paths)
    if order not in _ORDERS:
        raise TapeError(f"{where_all}: order={order!r}; expected one of {', '.join(_ORDERS)}")
    if gas_unit not in GAS_UNITS:
        raise TapeError(f"{where_all}: gas_unit={gas_unit!r}; expected one of {', '.join(GAS_UNITS)}")
    if not isinstance(asset, str) or not asset.strip():
        raise TapeError(f"{where_all}: asset={asset!r}; expected a non-empty name")
    columns = dict(columns or {})
    unknown = sorted(set(columns) - set(_CANONICAL))
    if unknown:
        raise TapeError(
            f"{where_all}: columns maps unknown names {unknown}; expected keys among {', '.join(_CANONICAL)}"
        )
    extras = list(extras or [])
    seen = [e.name for e in extras]
    if len(set(seen)) != len(seen):
        raise TapeError(f"{where_all}: extra series named twice ({seen}); expected each of gas/tvl/funding_rate once")
    return paths, where_all, columns, extras


def _combine(frames: list[pl.DataFrame], paths: list[Path], order: str, extras: list, gas_unit: str,
             notes: list[str] | None, asset: str) -> pl.DataFrame:
    """The files' bars as one ordered tape with its bar length and the extra series joined as-of."""
    names = [str(p) for p in paths]
    df = pl.concat(frames, how="diagonal")
    df = _apply_order(df, order, names, "bar")
    if df.height < 2:
        raise TapeError(
            f"{names[df['_file'][0]]}: row {df['_row'][0]}: only one bar; expected at least two "
            "bars so the bar length can be inferred"
        )
    spacing = df["time_ms"].diff().drop_nulls().sort()
    bar_ms = int(spacing[(len(spacing) - 1) // 2])
    for extra in extras:
        if extra.name in df.columns:
            raise TapeError(
                f"{extra.path}: {extra.name} is given both as a column of the bar file(s) and as an "
                "extra series; expected one source"
            )
        side = _guarded(str(extra.path), _load_extra, extra, order, gas_unit, notes)
        df = df.join_asof(side, on="time_ms", strategy="backward")
    return df.select(
        pl.col("time_ms").cast(pl.Int64),
        pl.lit(bar_ms, dtype=pl.Int64).alias("bar_ms"),
        pl.lit(asset, dtype=pl.String).alias("asset"),
        *[
            (pl.col(c) if c in df.columns else pl.lit(None)).cast(pl.Float64).alias(c)
            for c in (*PRICE_COLUMNS, "volume", *EXTRA_NAMES)
        ],
    )


# --------------------------------------------------------------------------- public API


def import_tape(
    paths: list[str | Path] | str | Path,
    *,
    asset: str = "BTC",
    time_col: str | None = None,
    time_format: str | None = None,
    time_unit: str | None = None,
    columns: dict[str, str] | None = None,
    sep: str = ",",
    order: str = "strict",
    extras: list[ExtraSeries] | None = None,
    fmt: str | None = None,
    gas_unit: str = "gwei",
    records_key: str | None = None,
    notes: list[str] | None = None,
) -> pl.DataFrame:
    """Import OHLCV bar files (CSV, Parquet, JSON array or JSON lines) as one tape.

    Files are concatenated in the given order (e.g. one file per year).  ``columns`` maps canonical
    names (open, high, low, close, volume, and optionally gas, tvl, funding_rate) to the file's
    column names; by default a column is found by its canonical name, case-insensitively.  Volume
    is optional (0 when the column is missing or a value is empty).  Times are bar OPEN times in
    UTC: text parsed with ``time_format`` (strptime) or ISO-like automatically, or numbers counted
    in ``time_unit`` (s|ms|us|ns).  ``order``: 'strict' rejects unsorted or duplicate times,
    'sort' sorts them (duplicates still rejected), 'dedupe' sorts and keeps the last bar of each
    duplicate timestamp (last in file order); the same policy applies to each extra series.
    Without ``time_col`` the time column is found by name (timestamp, open time, time, date, ...;
    open times before close times) and ``notes`` (a list, when given) says which was taken; it
    also says when there is no volume column.  Lines end in \\n, \\r\\n or \\r, mixed freely,
    and a CSV whose parsed rows do not match its non-blank lines is an error.  Gas is stored in
    gwei: ``gas_unit='wei'`` scales a file in wei, and a gas price above GAS_MAX_GWEI is an error
    naming the column.  JSON records may sit under a key (``records_key``: 'data' for pandas'
    table orient).
    ``bar_ms`` is the lower median spacing of the bars, so it is always an observed spacing and
    gaps (exchange outages) do not distort it.  Extra series are joined as-of backward (see
    :class:`ExtraSeries`).  Every defect raises :class:`TapeError`; no other exception escapes.
    """
    paths, where_all, columns, extras = _import_args(paths, asset, order, gas_unit, columns, extras)
    frames = []
    for i, path in enumerate(paths):
        frame = _guarded(str(path), _load_bars, path, fmt=fmt, sep=sep, time_col=time_col,
                         time_format=time_format, time_unit=time_unit, columns=columns, gas_unit=gas_unit,
                         records_key=records_key, notes=notes)
        frames.append(frame.with_columns(pl.lit(i, dtype=pl.Int64).alias("_file")))
    return _guarded(where_all, _combine, frames, paths, order, extras, gas_unit, notes, asset)


def _check_tape(df: Any, where: str) -> None:
    """Validate a tape frame: exact schema, no missing values, sane prices, increasing times."""
    if not isinstance(df, pl.DataFrame):
        raise TapeError(f"{where}: got {type(df).__name__}; expected a polars DataFrame tape")
    if df.columns != list(TAPE_SCHEMA):
        raise TapeError(
            f"{where}: header: columns {df.columns}; expected exactly {list(TAPE_SCHEMA)} in this order"
        )
    for name, dtype in TAPE_SCHEMA.items():
        if df.schema[name] != dtype:
            raise TapeError(f"{where}: header: column {name!r} has type {df.schema[name]}; expected {dtype}")
    if df.height == 0:
        raise TapeError(f"{where}: row 1: the tape has no rows; expected at least one bar")
    rows = pl.Series("_row", range(1, df.height + 1), dtype=pl.Int64)
    for name in ("time_ms", "bar_ms", "asset"):
        bad = _first_true(df[name].is_null())
        if bad is not None:
            raise TapeError(f"{where}: row {bad + 1}: {name} is missing; expected a value")
    bad = _first_true(df["bar_ms"] <= 0)
    if bad is not None:
        raise TapeError(f"{where}: row {bad + 1}: bar_ms {df['bar_ms'][bad]}; expected a positive length")
    for name in PRICE_COLUMNS:
        _check_numbers(df[name], rows, where, name, allow_null=False, minimum="positive")
    _check_numbers(df["volume"], rows, where, "volume", allow_null=False, minimum="nonnegative")
    for name in EXTRA_NAMES:
        _check_numbers(df[name], rows, where, name, allow_null=True,
                       minimum="any" if name == "funding_rate" else "nonnegative")
    _check_ohlc(df["open"], df["high"], df["low"], df["close"], rows, where)
    step = df.select(
        (pl.col("time_ms").diff().over("asset") <= 0).alias("bad")
    )["bad"]
    bad = _first_true(step)
    if bad is not None:
        raise TapeError(
            f"{where}: row {bad + 1}: time {_fmt_ms(df['time_ms'][bad])} is not after the previous bar of "
            f"{df['asset'][bad]!r}; expected strictly increasing times per asset"
        )


def write_tape(df: pl.DataFrame, out_path: str | Path) -> None:
    """Write a validated tape as Parquet with deterministic bytes (same input -> same file).

    Fixed compression, statistics and row-group size make the bytes a function of the data and
    the library versions only, so the run manifest can hash the tape (SPEC §13).  The file is
    written beside the target and renamed into place, so a crash never leaves half a tape.
    """
    from sim.rundir import check_out_file
    out = Path(out_path)
    _check_tape(df, str(out))
    check_out_file(out)          # replaces a regular file only: never a FIFO, device, link or folder
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            df.write_parquet(fh, compression="zstd", compression_level=3, statistics=True,
                             row_group_size=65_536)
        os.replace(tmp, out)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read_tape(path: str | Path) -> pl.DataFrame:
    """Read a tape written by :func:`write_tape`, validating schema and values (TapeError)."""
    p = Path(path)
    df = _read_parquet(p, "a Parquet tape")
    _guarded(str(p), _check_tape, df, str(p))
    return df


def _read_parquet(path: str | Path, expected: str) -> pl.DataFrame:
    """A Parquet file the user named, through the input door (`yaml_input.open_regular`: a regular file)."""
    fd = open_regular(path, f"{expected} file", TapeError)
    try:
        with os.fdopen(fd, "rb") as fh:
            return pl.read_parquet(fh)
    except (Exception, _PanicException) as exc:
        raise TapeError(f"{path}: not a readable Parquet file ({_short(exc)}); expected {expected}") from exc


# --------------------------------------------------------------------------- events


def _prior_median(expr: pl.Expr, window: int) -> pl.Expr:
    """Median of the previous `window` bars (the current bar excluded, so a spike cannot hide
    itself in its own baseline; needs `window` known values, else null = no detection)."""
    return expr.shift(1).rolling_median(window_size=window, min_samples=window)


def _detector_columns(tape: pl.DataFrame, vol_window: int) -> pl.DataFrame:
    """The tape sorted per asset with what the detectors read: the bar's return, low wick and
    range, the medians of the previous vol_window bars, the previous funding rate, high volume."""
    r = pl.col("close") / pl.col("open") - 1.0
    w = pl.col("low") / pl.col("open") - 1.0
    rng = (pl.col("high") - pl.col("low")) / pl.col("open")
    return (
        tape.sort("asset", "time_ms")
        .with_columns(
            r.alias("_r"),
            w.alias("_w"),
            rng.alias("_rng"),
            pl.col("asset").str.to_lowercase().str.replace_all(r"\s+", "-").alias("_tok"),
        )
        .with_columns(
            _prior_median(pl.col("_rng"), vol_window).over("asset").alias("_rng_med"),
            _prior_median(pl.col("volume"), vol_window).over("asset").alias("_vol_med"),
            _prior_median(pl.col("gas"), vol_window).over("asset").alias("_gas_med"),
            pl.col("funding_rate").shift(1).over("asset").alias("_fr_prev"),
        )
        .with_columns(
            ((pl.col("_vol_med") > 0) & (pl.col("volume") > _HIGH_VOLUME_MULT * pl.col("_vol_med")))
            .fill_null(False)
            .alias("_hv"),
        )
    )


def _bar_events(base: pl.DataFrame, crash_return: float, crash_high: float, gas_spike_mult: float,
                funding_abs: float) -> list[pl.DataFrame]:
    """One frame of events per detector of `detect_events`, over `_detector_columns`."""
    hv = pl.when(pl.col("_hv")).then(pl.lit(" high-volume")).otherwise(pl.lit(""))

    def event(mask: pl.Expr, kind: str, severity: pl.Expr, magnitude: pl.Expr,
              qualifiers: pl.Expr) -> pl.DataFrame:
        return base.filter(mask.fill_null(False)).select(
            pl.col("time_ms"),
            pl.col("asset"),
            pl.lit(kind).alias("kind"),
            severity.alias("severity"),
            pl.concat_str([pl.col("_tok"), pl.lit(f" {kind}"), qualifiers]).alias("tokens"),
            magnitude.cast(pl.Float64).alias("magnitude"),
        )

    fr = pl.col("funding_rate")
    deep = pl.col("_w") <= crash_high
    new_extreme = pl.col("_fr_prev").is_null() | (pl.col("_fr_prev") != fr) | (
        pl.col("_fr_prev").abs() < funding_abs
    )
    return [
        event(
            pl.col("_r") <= crash_return, "crash-bar",
            pl.when((pl.col("_r") <= crash_high) | deep).then(pl.lit("high")).otherwise(pl.lit("medium")),
            pl.col("_r"),
            pl.concat_str([pl.when(deep).then(pl.lit(" deep-wick")).otherwise(pl.lit("")), hv]),
        ),
        event(
            (pl.col("_w") <= crash_return) & (pl.col("_r") > crash_return), "crash-wick",
            pl.when(deep).then(pl.lit("high")).otherwise(pl.lit("medium")),
            pl.col("_w"), hv,
        ),
        event(pl.col("_r") >= -crash_return, "pump-bar", pl.lit("low"), pl.col("_r"), hv),
        event(
            (pl.col("_gas_med") > 0) & (pl.col("gas") > gas_spike_mult * pl.col("_gas_med")), "gas-spike",
            pl.when(pl.col("gas") > 2 * gas_spike_mult * pl.col("_gas_med"))
            .then(pl.lit("high")).otherwise(pl.lit("medium")),
            pl.col("gas") / pl.col("_gas_med"), pl.lit(""),
        ),
        event(
            (fr.abs() >= funding_abs) & new_extreme, "funding-extreme",
            pl.when(fr.abs() >= 3 * funding_abs).then(pl.lit("high")).otherwise(pl.lit("medium")),
            fr,
            pl.when(fr < 0).then(pl.lit(" negative")).otherwise(pl.lit(" positive")),
        ),
        event(
            (pl.col("_rng_med") > 0) & (pl.col("_rng") > _VOL_SPIKE_MULT * pl.col("_rng_med")), "vol-spike",
            pl.lit("low"), pl.col("_rng") / pl.col("_rng_med"), hv,
        ),
    ]


def detect_events(
    tape: pl.DataFrame,
    *,
    crash_return: float = -0.05,
    crash_high: float = -0.10,
    gas_spike_mult: float = 3.0,
    funding_abs: float = 0.001,
    vol_window: int = 12,
) -> pl.DataFrame:
    """Find market events in a tape: one row per event, for probes and for analysis.

    Each detector looks only at the bar itself and bars before it (no look-ahead), per asset.
    With r = close/open - 1 (the bar's return) and w = low/open - 1 (its low wick):

    * ``crash-bar``: r <= crash_return.  Severity ``high`` if r <= crash_high or the low wick
      w <= crash_high (token ``deep-wick``), else ``medium``.  magnitude = r.
    * ``crash-wick``: w <= crash_return but r > crash_return — a flash crash that recovered within
      the bar (liquidations happen on wicks).  ``high`` if w <= crash_high, else ``medium``.
      magnitude = w.
    * ``pump-bar``: r >= -crash_return (the symmetric up move).  Severity ``low``.  magnitude = r.
    * ``gas-spike`` (only where gas is known): gas > gas_spike_mult x the median gas of the
      previous vol_window bars.  ``high`` above 2 x gas_spike_mult, else ``medium``.
      magnitude = gas / median.
    * ``funding-extreme``: |funding_rate| >= funding_abs, on the bar where that value appears
      (a new value, or the first bar after a non-extreme one), so an 8 h print joined onto 2 h bars
      fires once.  ``high`` if |funding_rate| >= 3 x funding_abs, else ``medium``.
      magnitude = funding_rate; token ``positive`` or ``negative``.
    * ``vol-spike``: range (high - low)/open > 4 x the median range of the previous vol_window
      bars.  Severity ``low``.  magnitude = range / median.

    Bar events get the token ``high-volume`` when volume > 3 x the median volume of the previous
    vol_window bars.  tokens = "<asset, lower-case> <kind> [qualifiers]".  Rolling medians need
    vol_window known values, so the first vol_window bars never fire rolling detectors.  The output
    (schema :data:`EVENT_SCHEMA`) is deterministic and sorted by (time_ms, asset, kind).
    """
    if not isinstance(vol_window, int) or isinstance(vol_window, bool) or vol_window < 1:
        raise ValueError(f"vol_window={vol_window!r}; expected an integer >= 1")
    if not (crash_return < 0 and crash_high <= crash_return):
        raise ValueError(
            f"crash_return={crash_return}, crash_high={crash_high}; expected crash_high <= crash_return < 0"
        )
    if not (gas_spike_mult > 0 and funding_abs > 0):
        raise ValueError("gas_spike_mult and funding_abs must be positive")
    _check_tape(tape, "tape")

    base = _detector_columns(tape, vol_window)
    parts = _bar_events(base, crash_return, crash_high, gas_spike_mult, funding_abs)
    out = pl.concat(parts, how="vertical").sort("time_ms", "asset", "kind", maintain_order=True)
    return out.select([pl.col(n).cast(t) for n, t in EVENT_SCHEMA.items()])
