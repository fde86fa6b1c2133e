"""What Parquet's options do to the recorder's encoding time and file size, on a recorded run.

    python tests/benchmarks/parquet_options.py RUN_DIR [--rounds 3] [--json]

For each table, its largest part is read back and encoded again in memory (no disk) with the
options the recorder writes (`sim.recorder.write_options`) and with each variation below, the best
of `--rounds`; every variation reads back to the same table. The recorder encodes its parts on the
writer thread, beside the retrieval kernel on a 2-core machine, so this time is what recording
takes from the run; a part of a 1,000-Golem bench run (`_run.py --capacity 1024 --duration 1d
--no-floor --out DIR`) is ~72,000 rows of a table.

    as recorded     zstd (Arrow's default level), dictionaries for string columns, statistics
                    for the scalar columns
    zstd level 1    the same at zstd's fastest level
    lz4             lz4 instead of zstd
    uncompressed    no compression (what the encoding itself costs)
    byte split      byte-stream-split for the float columns (and float lists), zstd
    no statistics   no min/max statistics at all
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from sim.recorder import TABLES, table_files, write_options  # noqa: E402


def _floats(schema: pa.Schema) -> list[str]:
    def is_float(t):
        return pa.types.is_floating(t) or (pa.types.is_list(t) and pa.types.is_floating(t.value_type))
    return [f.name for f in schema if is_float(f.type)]


def variations(schema: pa.Schema) -> dict[str, dict]:
    base = write_options(schema)
    return {
        "as recorded": base,
        "zstd level 1": {**base, "compression_level": 1},
        "lz4": {**base, "compression": "lz4"},
        "uncompressed": {**base, "compression": "none"},
        "byte split": {**base, "use_byte_stream_split": _floats(schema)},
        "no statistics": {**base, "write_statistics": False},
    }


def encode(t: pa.Table, options: dict, rounds: int) -> tuple[float, int, pa.Buffer]:
    """Best time of `rounds` encodings of `t` in memory, the size and the bytes."""
    best, data = float("inf"), None
    for _ in range(rounds):
        sink = pa.BufferOutputStream()
        t0 = time.perf_counter()
        pq.write_table(t, sink, **options)
        best = min(best, time.perf_counter() - t0)
        data = sink.getvalue()
    return best, data.size, data


def measure(run: Path, rounds: int = 3) -> list[dict]:
    rows = []
    for table in TABLES:
        files = table_files(run, table)
        if not files:
            continue
        part = max(files, key=lambda f: f.stat().st_size)
        t = pq.read_table(part)
        for name, options in variations(t.schema).items():
            s, size, data = encode(t, options, rounds)
            if not pq.read_table(pa.BufferReader(data)).equals(t):
                raise AssertionError(f"{table}, {name}: the encoded part reads back different")
            rows.append(dict(table=table, part=part.name, rows=t.num_rows, options=name, ms=s * 1e3, mb=size / 1e6))
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run", type=Path)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    rows = measure(a.run, a.rounds)
    if a.json:
        print(json.dumps(rows))
        return
    base = {r["table"]: r for r in rows if r["options"] == "as recorded"}
    print(f"{'table':<12} {'rows':>8} {'options':<14} {'ms':>8} {'MB':>7} {'time':>6} {'size':>6}")
    for r in rows:
        b = base[r["table"]]
        print(f"{r['table']:<12} {r['rows']:>8,} {r['options']:<14} {r['ms']:>8.1f} {r['mb']:>7.2f} "
              f"{r['ms'] / b['ms']:>6.2f} {r['mb'] / b['mb']:>6.2f}")


if __name__ == "__main__":
    main()
