"""Recording (SPEC §13): fixed-schema Parquet tables written incrementally as part files.

Each table is a folder of part files `part-NNNNN.parquet`; a flush writes one part per table with
rows, to a temporary name first and then renames it, so a run killed at any moment leaves every
table readable up to its last flush. Rows are sorted (time, golem, sequence) within a part, and
parts follow simulated time, so the same scenario and seed give byte-identical files.
`manifest.json` (atomic rename too) carries the scenario, config, versions, counts and hashes.
"""
from __future__ import annotations

import hashlib
import json
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numba
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

F64, I64, I32, I16, STR, BOOL = pa.float64(), pa.int64(), pa.int32(), pa.int16(), pa.string(), pa.bool_()
LI64, LF64 = pa.list_(pa.int64()), pa.list_(pa.float64())

SCHEMAS: dict[str, pa.Schema] = {
    "market": pa.schema([("time_ms", I64), ("step", I64), ("asset", STR), ("open", F64), ("high", F64), ("low", F64),
                         ("close", F64), ("volume", F64), ("tvl", F64), ("gas", F64), ("funding_rate", F64),
                         ("regime", STR)]),
    "heartbeats": pa.schema([
        ("time_ms", I64), ("golem_id", I32), ("clade_id", I32), ("tick", I64), ("state_path", STR),
        ("p", F64), ("a", F64), ("d", F64), ("mood_p", F64), ("mood_a", F64), ("mood_d", F64), ("emotion", STR),
        ("label", STR), ("intensity", F64), ("tier", STR), ("exposure", F64), ("target_exposure", F64), ("value", F64), ("pnl", F64), ("cash", F64), ("budget", F64),
        ("vitality", F64), ("phase", STR), ("price", F64), ("regime", STR), ("probe", STR), ("traded", BOOL),
        ("trade_failed", BOOL), ("entries_written", I32), ("flashbulb", BOOL), ("n_retrieved", I32),
        ("retrieval_mean_valence", F64), ("memory_signal", F64), ("marker_valence", F64), ("marker_strength", I32),
        ("marker_escalated", BOOL), ("cache_served", BOOL), ("recalled_p", F64), ("recalled_a", F64)]),
    "retrievals": pa.schema([
        ("time_ms", I64), ("golem_id", I32), ("clade_id", I32), ("tick", I64), ("profile", STR),
        ("query_p", F64), ("query_a", F64), ("query_d", F64), ("ids", LI64), ("scores", LF64),
        ("semantic", LF64), ("temporal", LF64), ("importance", LF64), ("emotional", LF64), ("valences", LF64),
        ("salience_shadow", LI64), ("pool_n", I64), ("pool_mean_emotional", F64), ("pool_mean_valence", F64),
        ("served_mean_emotional", F64), ("served_mean_valence", F64), ("anti_rumination", BOOL),
        ("low_conf_ids", LI64), ("reactivated", I32), ("memory_signal", F64), ("cache_served", BOOL),
        ("contrarian_ids", LI64), ("contrarian_changed", BOOL)]),
    "entries": pa.schema([
        ("id", I64), ("golem_id", I32), ("clade_id", I32), ("created_ms", I64), ("tick", I64), ("category", STR),
        ("topic", STR), ("scope", STR), ("kind", STR), ("event_kind", STR), ("content", STR), ("confidence", F64),
        ("importance", F64), ("salience", F64), ("decay_class", STR), ("ttl_days", F64), ("window_days", F64),
        ("has_tag", BOOL), ("p", F64), ("a", F64), ("d", F64), ("emotion", STR), ("intensity", F64), ("label", STR),
        ("attribution", STR), ("arousal_bias", BOOL), ("flashbulb", BOOL), ("provenance", I32), ("outcome", F64),
        ("has_outcome", BOOL), ("role", STR), ("recall_mode", STR)]),
    "events": pa.schema([("time_ms", I64), ("seq", I64), ("golem_id", I32), ("clade_id", I32), ("tick", I64),
                         ("kind", STR), ("entry_id", I64), ("other_golem", I32), ("value", F64), ("payload", STR)]),
    "snapshots": pa.schema([("flashbulb_id", I64), ("golem_id", I32), ("time_ms", I64), ("step", I64), ("asset", STR),
                            ("close", F64), ("tvl", F64), ("gas", F64), ("regime", STR), ("held", BOOL),
                            ("position_exposure", F64), ("links", LI64)]),
    "tape_events": pa.schema([("time_ms", I64), ("kind", STR), ("asset", STR), ("severity", STR), ("impact", F64),
                              ("duration_ms", I64), ("tokens", STR), ("detect_lag_ms", I64), ("detect_jitter_ms", I64),
                              ("early_detectors", LI64)]),
}
TABLES = tuple(SCHEMAS)
SORT_KEYS = {"heartbeats": ("time_ms", "golem_id"), "retrievals": ("time_ms", "golem_id"), "entries": ("id",),
             "events": ("time_ms", "seq"), "snapshots": ("flashbulb_id", "asset"), "market": ("time_ms", "asset")}


def write_options(schema: pa.Schema) -> dict:
    """Parquet options of a part: zstd; dictionary pages for the string columns only (labels,
    kinds, regimes repeat; dictionary-encoding every float and list column was a third of the
    encoding time and saved nothing); min/max statistics for the scalar columns, which readers
    use to skip row groups (those of the list columns cost another third and nobody filters on
    them). Changing these changes the files' bytes, never the tables they hold."""
    return dict(compression="zstd",
                use_dictionary=[f.name for f in schema if pa.types.is_string(f.type)],
                write_statistics=[f.name for f in schema if not pa.types.is_list(f.type)])


def atomic_write_bytes(path: Path, data: bytes | pa.Buffer) -> None:
    """Write to a temporary name, fsync, rename: the file is whole or absent. A failed write (a
    full disk) removes its temporary and leaves any earlier version of the file in place."""
    from sim.datafiles import check_out_file, open_file
    tmp = path.with_name(path.name + ".tmp")
    try:
        view = memoryview(data).cast("B")
        # a new file (never a link or a file planted under the temporary name), unbuffered: a full
        # disk raises ENOSPC, not a short write
        with open_file(tmp, "wb", buffering=0) as fh:
            while view:
                view = view[fh.write(view):]
            os.fsync(fh.fileno())
        check_out_file(path, "writing")     # replaces a regular file only, never a link, FIFO or device
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            tmp.unlink()
        except OSError:
            pass
        if isinstance(exc, OSError) and exc.filename is None:
            raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc
        raise


def atomic_write_json(path: Path, obj, indent: int | None = 2) -> None:
    """`indent=None` for big machine-read files: json's fast C encoder only runs without indent."""
    atomic_write_bytes(path, (json.dumps(obj, indent=indent, sort_keys=True, default=_json_default) + "\n").encode())


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(type(o))


class Names:
    """A string column given as codes into a fixed tuple of names (an enum's labels, the assets):
    decoded once per flush instead of a Python string per row."""

    __slots__ = ("names", "codes")

    def __init__(self, names: tuple[str, ...], codes):
        self.names, self.codes = tuple(names), np.asarray(codes)

    def __len__(self) -> int:
        return len(self.codes)


class Lists:
    """A list column given as a (rows, k) array and a mask of the cells each row keeps (in
    order): kept as numpy until the flush, where all of a column's chunks become one list array
    (a list array per tick and column was most of the cost of recording the retrievals)."""

    __slots__ = ("values", "mask")

    def __init__(self, values, mask):
        self.values, self.mask = np.asarray(values), np.asarray(mask, dtype=bool)

    def __len__(self) -> int:
        return len(self.mask)


class Formatted:
    """A column chunk the writer thread builds at flush as `fn(columns)` (text assembled by Arrow
    kernels, which release the GIL, so the work leaves the simulation thread without stalling it).

    All of a flush's chunks with the same `fn` and column names are built in one call, over their
    columns concatenated (numpy arrays along the first axis, Arrow arrays, `Names`): every Arrow
    call has a fixed cost, and building each tick's chunk of a few rows alone would pay it for every
    tick (~1 ms per tick of a 1,000-Golem run). `fn` must be one function (not a new lambda per chunk) and must
    only read its columns, which nothing may change later."""

    __slots__ = ("fn", "columns", "n")

    def __init__(self, fn, columns: dict, n: int):
        self.fn, self.columns, self.n = fn, columns, int(n)

    def __len__(self) -> int:
        return self.n


def _concat(parts: list):
    """One column from its chunks' pieces: numpy arrays, Arrow arrays or `Names` (over the union
    of their names, in order of first appearance)."""
    if len(parts) == 1:
        return parts[0]
    if isinstance(parts[0], Names):
        names = tuple(dict.fromkeys(n for p in parts for n in p.names))
        pos = {n: i for i, n in enumerate(names)}
        return Names(names, np.concatenate([np.array([pos[n] for n in p.names], dtype=np.int64)[p.codes] for p in parts]))
    if isinstance(parts[0], pa.Array):
        return pa.concat_arrays(parts)
    return np.concatenate(parts)


class _Growing:
    """One flush interval of a numeric column, copied into one buffer as its chunks come.

    The writer thread then gets one array per column instead of a list of small chunks to
    concatenate, and np.concatenate holds the GIL for all its copying (0.55 ms per 1,000-Golem
    tick at capacity 1,024), which stalled the mind on the simulation thread; the copy here is
    the same bytes, on the thread that produced them, without waiting for anyone."""

    __slots__ = ("data", "n")

    def __init__(self, dtype, capacity: int):
        self.data = np.empty(max(int(capacity), 1024), dtype=dtype)
        self.n = 0

    def grow(self, m: int) -> None:
        """Room for at least `m` values (doubling)."""
        grown = np.empty(max(m, 2 * self.data.size), dtype=self.data.dtype)
        grown[:self.n] = self.data[:self.n]
        self.data = grown

    def __len__(self) -> int:
        return self.n


class Recorder:
    """Buffers rows per table as column chunks and writes a part file per flush.

    Chunks are kept as given and each column becomes one Arrow array at flush: converting at
    every add built hundreds of small Arrow tables per flush, several times the cost."""

    def __init__(self, run_dir: Path, part_start: int = 0):
        self.dir = Path(run_dir)
        self.buf: dict[str, dict[str, list]] = {t: {f.name: [] for f in SCHEMAS[t]} for t in TABLES}
        self.buffered = {t: 0 for t in TABLES}
        self.part = part_start
        self.rows = {t: 0 for t in TABLES}
        self._writing: list[tuple[str, _Part]] = []
        self._after: list[tuple[int, Future]] = []   # jobs queued behind the parts (`after_parts`), by flush
        self.part_sha: dict[str, str] = {}     # "table/part-NNNNN.parquet" -> sha256 of the bytes written
        self._sizes: dict[tuple[str, str], int] = {}     # rows of each numeric column at the last flush
        self._make_dirs()

    def _make_dirs(self) -> None:
        from sim.datafiles import check_dir
        for t in TABLES:
            (self.dir / t).mkdir(parents=True, exist_ok=True)
            check_dir(self.dir / t, f"the folder of the {t} table")    # a real folder: never a link out

    def _write(self, parts: list[tuple[Path, str, dict[str, list]]], background: bool) -> None:
        """A flush's parts (path, table, chunks), handed to the writer thread biggest first; a
        caller that waits for them takes the next one the writer has not, in the same order
        (`_Part`), so that neither thread is left with a big part at the end. A foreground flush
        (the run's end, a stopped run's last rows) is waited for at once: the caller builds the
        biggest part, claimed before the writer can take it, then the others the writer has not
        started, and returns once every part and every job queued by `after_parts` is done (a
        stopped run's last checkpoint commit among them: the run directory does not change after
        the run has returned), with every sha256 kept, raising the first error once every other
        one has landed."""
        jobs = [(f"{table}/{path.name}", _Part(path, table, cols))
                for path, table, cols in sorted(parts, key=lambda p: -_cells(p[2]))]
        mine = None if background or not jobs else jobs[0][1]
        if mine is not None:
            mine.claim()
        for _, part in jobs:
            _WRITER.submit(part.run)
        self._writing += jobs
        if not background:          # with no rows to write too: a checkpoint's commit may be running
            if mine is not None:
                mine.build(hand_back=True)
            self._sync(jobs_before=None)

    def add(self, table: str, columns: dict) -> None:
        """Append rows given as a dict of equal-length columns (schema types): numpy arrays, lists,
        object arrays, Arrow arrays or `Names`. Called a few times a tick for every table, so a
        numeric column's copy into its buffer is written out here rather than as calls."""
        buf = self.buf[table]
        chunks = [columns[name] for name in buf]
        n = len(chunks[0])
        if any(len(c) != n for c in chunks):
            raise ValueError(f"{table}: columns of different lengths {sorted({len(c) for c in chunks})}")
        if not n:
            return
        for (name, col), c in zip(buf.items(), chunks):
            if type(c) is np.ndarray and c.ndim == 1 and c.dtype.kind != "O":
                last = col[-1] if col else None
                if last.__class__ is not _Growing or last.data.dtype != c.dtype:
                    last = _Growing(c.dtype, self._sizes.get((table, name), 0) * 9 // 8)
                    col.append(last)
                m = last.n + n
                if m > last.data.size:
                    last.grow(m)
                last.data[last.n:m] = c
                last.n = m
            else:
                col.append(c)
        self.buffered[table] += n

    def pending(self) -> int:
        return sum(self.buffered.values())

    def flush(self, background: bool = False) -> list[str]:
        """Write one part per non-empty table; returns the part paths written (or being written).

        `background`: the buffered chunks are handed to the writer thread, which builds, sorts,
        encodes (Parquet + zstd) and writes each part while the run goes on (most of that is
        Arrow and numpy work outside the GIL) until the next flush or `sync()`, which wait for
        them. The chunks are never touched again by the run. Part files are still renamed into
        place whole."""
        # the previous flush's parts first (it re-raises their error): so the writer holds at most
        # one flush (sim.resources counts two: that one and the buffers filling), and a part that
        # failed fails the run at the next flush. A job queued behind them (a checkpoint's commit:
        # fsync and sha256 of the state's arrays) may still be running; this flush's parts queue
        # behind it, so the flush after this one has waited for it
        self._sync(jobs_before=self.part)
        written, parts = [], []
        for table, cols in self.buf.items():
            if not self.buffered[table]:
                continue
            path = self.dir / table / f"part-{self.part:05d}.parquet"
            for name, chunks in cols.items():
                grown = [c for c in chunks if isinstance(c, _Growing)]
                if grown:
                    self._sizes[(table, name)] = max(g.n for g in grown)
                    cols[name] = [c.data[:c.n] if isinstance(c, _Growing) else c for c in chunks]
            parts.append((path, table, cols))
            self.rows[table] += self.buffered[table]
            written.append(str(path.relative_to(self.dir)))
            self.buf[table] = {name: [] for name in cols}
            self.buffered[table] = 0
        self._write(parts, background)
        self.part += 1
        return written

    def after_parts(self, fn) -> None:
        """Run `fn(parts)` on the writer thread once every part handed to it so far is on disk (a
        checkpoint's commit). `parts()` returns the sha256 of every part written, by path, or
        raises the error of one that failed. The flush after next waits for it (the next one does
        not, so the run goes on while it works, unless it is a foreground flush), as do `wait_jobs`
        and `sync`, which raise `fn`'s own error."""
        known, writing = dict(self.part_sha), list(self._writing)

        def parts() -> dict[str, str]:
            # the writer runs its queue in order: each of these is written, or being written by the
            # simulation thread that claimed it (`_Part`), which `result` waits for
            return {**known, **{rel: part.done.result() for rel, part in writing}}
        self._after.append((self.part, _WRITER.submit(fn, parts)))

    def wait_jobs(self) -> None:
        """Wait for the jobs queued by `after_parts` (re-raises the first error)."""
        self._sync(jobs_before=None, parts=False)

    def sync(self) -> None:
        """Wait until every part and job handed to the writer thread is done (re-raises the first
        error, once every one of them has landed or failed)."""
        self._sync(jobs_before=None)

    def _sync(self, jobs_before: int | None, parts: bool = True) -> None:
        """Wait for the parts (`parts`) and for the jobs queued before flush `jobs_before` (all
        with None); re-raises the first error once every one waited for has landed or failed.
        Interrupted at once (a second Ctrl-C, while it builds a part or waits for one), it lets
        the interrupt go on and keeps every part and job on its lists: the stopped run's last
        flush waits for them."""
        writing = self._writing if parts else []
        after = [(n, f) for n, f in self._after if jobs_before is None or n < jobs_before]
        for _, part in writing:      # the next one the writer has not taken, as the writer would
            part.run(hand_back=True)
        first = None
        for fut in [part.done for _, part in writing] + [f for _, f in after]:
            try:
                fut.result()
            except BaseException as exc:   # noqa: BLE001 - the first error is the one raised
                if not fut.done():         # the wait itself was interrupted
                    raise
                first = first or exc
        for rel, part in writing:
            if part.done.exception() is None:
                self.part_sha[rel] = part.done.result()
        if parts:
            self._writing = []
        self._after = [job for job in self._after if job not in after]
        if first is not None:
            raise first


def _lowest_priority() -> None:
    """Run the writer thread at the lowest scheduling priority (nice 19; Linux sets it per thread).

    It should only use a core the run leaves idle: the mind's Python runs on one core, while the
    retrieval kernel uses all of them, and a writer competing with the kernel's threads slowed
    the kernel by about as much as it wrote."""
    import threading
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (AttributeError, OSError):    # not Linux, or not allowed: the writer just runs at normal priority
        pass


#: one writer thread for the process; it runs its queue in order, so a job queued by `after_parts`
#: (a checkpoint's commit) runs after the parts it lists
_WRITER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="golem-recorder", initializer=_lowest_priority)


def warm_up() -> None:
    """Make pyarrow's first conversion of Python values on the writer thread, now. Where pandas is
    installed, pyarrow imports it at that first conversion (0.2-0.5 s, holding the GIL), which a
    recorded run's first tick would otherwise wait for; called before the world is built, the
    import overlaps the build. Returns at once; an error is left to the run's own conversion."""
    _WRITER.submit(_first_conversion)


def _first_conversion() -> None:
    try:
        pa.scalar(0)
    except Exception:   # noqa: BLE001 - raised again, where it matters, by the run's conversions
        pass


def _build_and_write(path: Path, table: str, cols: dict[str, list]) -> str:
    return _write_part(path, _build(table, cols))


class _Part:
    """A part handed to the writer thread, built and written by whichever thread claims it first:
    the writer in its turn, or the simulation thread when it must wait for the part anyway (the
    run's last flush; the next flush after a Clade's push wave, whose parts take the writer
    seconds), so that the two cores share the work instead of one waiting on the other. Most of a
    build and its encoding run outside the GIL. `done` holds the sha256 or the error."""

    def __init__(self, path: Path, table: str, cols: dict[str, list]):
        self.args = (path, table, cols)
        self.done: Future = Future()
        self._claim = threading.Lock()

    def claim(self) -> bool:
        """Whether this thread is the one to build the part (the first to ask)."""
        return self._claim.acquire(blocking=False)

    def run(self, hand_back: bool = False) -> None:
        """Build and write the part, unless another thread has claimed it."""
        if self.claim():
            self.build(hand_back)

    def build(self, hand_back: bool = False) -> None:
        """Build and write the claimed part. `hand_back` (the simulation thread): interrupted at
        once (a second Ctrl-C), it leaves the part, still claimed, to a thread of its own, which
        builds it again from its chunks (a part file is written whole or not at all), and lets the
        interrupt go on, so no row is lost and the stop is not delayed. Not the writer thread: a
        checkpoint's commit there may be waiting for this very part."""
        try:
            sha = _build_and_write(*self.args)
        except Exception as exc:   # noqa: BLE001 - raised by whoever waits for the part
            self.done.set_exception(exc)
        except BaseException as exc:
            if hand_back:
                threading.Thread(target=self.build, name="golem-recorder-handback").start()
                raise
            self.done.set_exception(exc)
        else:
            self.done.set_result(sha)
        self.args = None      # the chunks are freed once written


def _cells(cols: dict[str, list]) -> int:
    """A part's values, counted across its columns (a list column's cells included): its build's
    size, near enough to order parts by."""
    return sum(c.values.size if isinstance(c, Lists) else c.n * len(c.columns) if isinstance(c, Formatted)
               else np.size(c) if isinstance(c, np.ndarray) else len(c) for chunks in cols.values() for c in chunks)


def _build(table: str, cols: dict[str, list]) -> pa.Table:
    """The part's table from a table's buffered chunks, in its sort order."""
    schema = SCHEMAS[table]
    t = pa.Table.from_arrays([_column(cols[f.name], f.type) for f in schema], schema=schema)
    order = _sort_order(t, SORT_KEYS.get(table, ()))
    return t if order is None else _take(t, order)


#: a string column of more bytes than this cannot go through one Arrow take, which concatenates
#: the column's chunks first (32-bit offsets)
TAKE_BYTES = 2**31 - 1


def _take(t: pa.Table, order: pa.Array) -> pa.Table:
    """t.take(order); a string column past TAKE_BYTES (a push wave's payload text, built in
    pieces) is taken as one large_string array, FORMAT_ROWS rows of the result at a time, each cast
    back to a string chunk, so the column keeps its type."""
    big = {i for i, f in enumerate(t.schema) if pa.types.is_string(f.type) and t.column(i).nbytes > TAKE_BYTES}
    if not big:
        return t.take(order)
    cols = []
    for i, f in enumerate(t.schema):
        c = t.column(i)
        if i in big:
            whole = pa.concat_arrays([x.cast(pa.large_string()) for x in c.chunks])
            c = pa.chunked_array([whole.take(order.slice(lo, FORMAT_ROWS)).cast(f.type)
                                  for lo in range(0, len(order), FORMAT_ROWS)], type=f.type)
        else:
            c = c.take(order)
        cols.append(c)
    return pa.Table.from_arrays(cols, schema=t.schema)


def _write_part(path: Path, t: pa.Table) -> str:
    """Encode and write one part; returns the sha256 of its bytes (checkpoints list what they cover)."""
    sink = pa.BufferOutputStream()
    pq.write_table(t, sink, **write_options(t.schema))
    data = sink.getvalue()
    atomic_write_bytes(path, data)
    return hashlib.sha256(memoryview(data)).hexdigest()


def _kind(chunk) -> tuple:
    if isinstance(chunk, Names):
        return ("names", chunk.names)
    if isinstance(chunk, Lists):
        return ("lists", chunk.values.shape[1:], chunk.values.dtype)
    if isinstance(chunk, pa.Array):
        return ("arrow",)
    if isinstance(chunk, Formatted):
        return ("formatted", chunk.fn, tuple(chunk.columns))
    if isinstance(chunk, np.ndarray) and chunk.dtype != object:
        # chunks of one kind of number (int32 and int64 ...) concatenate exactly to their common type
        return ("numpy", chunk.dtype.kind)
    return ("python",)  # lists and object arrays: converted element by element


#: rows of a `Formatted` column built in one Arrow call (at ~400 bytes of text a row, well under
#: the 2 GiB a string array can hold)
FORMAT_ROWS = 1 << 20


def _rows(v, lo: int, hi: int):
    """Rows lo..hi of a `Formatted` column's input (numpy array, Arrow array or `Names`)."""
    if isinstance(v, Names):
        return Names(v.names, v.codes[lo:hi])
    if isinstance(v, pa.Array):
        return v.slice(lo, hi - lo)
    return v[lo:hi]


def _column(chunks: list, dtype: pa.DataType) -> pa.Array | pa.ChunkedArray:
    """One Arrow array from a column's chunks, the same as converting each chunk and concatenating.
    NaN means "no value" in every table (an empty pool, a missing funding rate): stored as null."""
    kinds = [_kind(c) for c in chunks]
    if len(set(kinds)) > 1:
        # each kind built once over its chunks, then cut back into the chunks' places
        pieces: list = [None] * len(chunks)
        for kind in dict.fromkeys(kinds):
            idx = [i for i, k in enumerate(kinds) if k == kind]
            built, at = _column([chunks[i] for i in idx], dtype), 0
            for i in idx:
                pieces[i] = built.slice(at, len(chunks[i]))
                at += len(chunks[i])
        if any(isinstance(p, pa.ChunkedArray) for p in pieces):
            return pa.chunked_array([c for p in pieces for c in (p.chunks if isinstance(p, pa.ChunkedArray) else [p])],
                                    type=dtype)
        return pa.concat_arrays(pieces)
    kind = kinds[0]
    if kind[0] == "names":
        codes = np.arange(len(kind[1]))[np.concatenate([c.codes for c in chunks])]  # numpy's index rules
        return pa.array(kind[1], type=dtype).take(codes)
    if kind[0] == "lists":
        return list_column(np.concatenate([c.values for c in chunks]), np.concatenate([c.mask for c in chunks]),
                           dtype.value_type)
    if kind[0] == "arrow":
        return pa.concat_arrays(chunks)
    if kind[0] == "formatted":
        cols = {k: _concat([c.columns[k] for c in chunks]) for k in kind[2]}
        n = sum(c.n for c in chunks)
        if n <= FORMAT_ROWS:
            return kind[1](cols).cast(dtype)
        # a string array holds at most 2 GiB of text (32-bit offsets): a push wave's rows are built
        # in pieces of FORMAT_ROWS, one chunk each, so the column keeps its type whatever its size
        return pa.chunked_array([kind[1]({k: _rows(v, lo, lo + FORMAT_ROWS) for k, v in cols.items()}).cast(dtype)
                                 for lo in range(0, n, FORMAT_ROWS)], type=dtype)
    if kind[0] == "numpy":
        return pa.array(chunks[0] if len(chunks) == 1 else np.concatenate(chunks), type=dtype, from_pandas=True)
    return pa.array([x for c in chunks for x in _py(c)], type=dtype, from_pandas=True)


def _sort_order(t: pa.Table, keys: tuple[str, ...]) -> pa.Array | None:
    """Indices of the stable sort of `t` by `keys`, or None when the rows already are in that
    order (the usual case: rows arrive in time order), which saves a take of the whole table."""
    if not keys:
        return None
    cols = [t.column(k) for k in keys]
    if all(pa.types.is_integer(c.type) and c.null_count == 0 for c in cols):
        tie = np.ones(max(t.num_rows - 1, 0), dtype=bool)  # row pairs equal on the keys so far
        for c in cols:
            v = c.to_numpy()
            if (tie & (v[1:] < v[:-1])).any():
                break
            tie &= v[1:] == v[:-1]
        else:
            return None
    return pc.sort_indices(t, sort_keys=[(k, "ascending") for k in keys])  # stable: ties keep insertion order


def list_column(values: np.ndarray, mask: np.ndarray, dtype: pa.DataType) -> pa.Array:
    """A list<dtype> column from a (rows, k) array and a mask of the cells to keep, in row order
    (NaN kept cells become null): offsets, values and validity in one numba pass that releases
    the GIL, since it runs on the writer thread beside the simulation (numpy's cumsum and boolean
    indexing held it, and stalled the simulation's Python for as long)."""
    values = np.ascontiguousarray(values).astype(dtype.to_pandas_dtype(), copy=False)
    offsets, flat, valid, nulls = _pack_lists(values, np.ascontiguousarray(mask, dtype=bool))
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little")) if nulls else None
    flat_arr = pa.Array.from_buffers(dtype, len(flat), [bitmap, pa.py_buffer(flat)], null_count=nulls)
    return pa.ListArray.from_arrays(pa.Array.from_buffers(pa.int32(), len(offsets), [None, pa.py_buffer(offsets)]),
                                    flat_arr)


@numba.njit(cache=True, nogil=True)
def _pack_lists(values, mask):
    """(offsets int32, kept cells in row order, their validity (not NaN), number of NaNs)."""
    rows, k = mask.shape
    offsets = np.empty(rows + 1, np.int32)
    n = 0
    for i in range(rows):
        offsets[i] = n
        for j in range(k):
            n += mask[i, j]
    offsets[rows] = n
    flat = np.empty(n, values.dtype)
    valid = np.empty(n, np.bool_)
    nulls = 0
    m = 0
    for i in range(rows):
        for j in range(k):
            if mask[i, j]:
                v = values[i, j]
                flat[m] = v
                valid[m] = v == v
                nulls += v != v
                m += 1
    return offsets, flat, valid, nulls


#: columns of at least this many floats are formatted one distinct value at a time (`json_floats`)
DISTINCT_MIN = 256


def json_floats(x) -> pa.Array:
    """Each float as `json.dumps` writes it (Python's shortest repr; NaN, Infinity), without a
    Python call per value.

    A long column is formatted once per distinct bit pattern (so -0.0 and 0.0 stay apart) and
    taken back to its rows, when at most half its values are distinct: a Clade's push wave carries
    one tag, confidence and mood level to hundreds of thousands of rows, and formatting each costs
    ~150 ns where Arrow's hash encoding costs ~20."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    if x.size >= DISTINCT_MIN:
        enc = pc.dictionary_encode(pa.array(x.view(np.int64)))
        distinct = enc.dictionary.to_numpy().view(np.float64)
        if 2 * distinct.size <= x.size:
            return _shortest(distinct).take(enc.indices)
    return _shortest(x)


def _shortest(x: np.ndarray) -> pa.Array:
    """`json_floats` value by value. Arrow's shortest-digits cast gives the same digits as repr,
    but drops the '.0' of integral values (given back here) and switches to exponent notation at
    other magnitudes: below 1e-4 and from about 1e10 (those, and non-finite values, go through
    json itself; they are rare in the tables)."""
    s = pc.cast(pa.array(x), pa.string())
    ax = np.abs(x)
    odd = ~np.isfinite(x) | ((ax < 1e-4) & (x != 0)) | (ax >= 1e9)
    with np.errstate(invalid="ignore"):     # signalling NaNs
        integral = (x == np.floor(x)) & ~odd
    if integral.any():
        s = pc.if_else(pa.array(integral), pc.binary_join_element_wise(s, ".0", ""), s)
    if odd.any():
        fix = np.full(x.size, None, dtype=object)
        fix[odd] = [json.dumps(v) for v in x[odd].tolist()]
        s = pc.if_else(pa.array(odd), pa.array(fix, type=pa.string()), s)
    return s


def signed_fixed2(x) -> pa.Array:
    """Each float as Python's f"{v:+.2f}" writes it (a sign always, '-0.00' for small negatives,
    two decimals rounded half to even on the exact binary value), without a Python call per
    value. np.rint(100 * v) is that rounding wherever 100 * v lies more than 1e-6 from a half: for
    |v| < 1e6 the product's own rounding error is below 2**-26. Values that near a tie, larger
    ones and non-finite ones go through Python."""
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):   # huge and non-finite values go through Python
        y = x * 100.0
        r = np.rint(y)
        odd = ~(np.abs(x) < 1e6) | (np.abs(np.abs(y - r) - 0.5) <= 1e-6)
    m = np.where(odd, 0.0, np.abs(r)).astype(np.int64)
    cents = pc.utf8_lpad(pc.cast(pa.array(m % 100), pa.string()), width=2, padding="0")
    sign = Names(("+", "-"), np.signbit(x).astype(np.int8))
    s = join_strings(sign, pc.cast(pa.array(m // 100), pa.string()), ".", cents)
    if odd.any():
        fix = np.full(x.size, None, dtype=object)
        fix[odd] = [f"{v:+.2f}" for v in x[odd].tolist()]
        s = pc.if_else(pa.array(odd), pa.array(fix, type=pa.string()), s)
    return s


def json_objects(columns: dict) -> pa.Array:
    """Row i: the JSON `json.dumps({k: v[i] ...}, sort_keys=True)` writes, from (at least one)
    columns: bool arrays, integer arrays, float arrays (`json_floats`), Arrow lists of ints, or
    string arrays already holding JSON text (`json_int_lists`)."""
    parts: list = []
    for j, key in enumerate(sorted(columns)):
        v = columns[key]
        if isinstance(v, pa.Array) and pa.types.is_list(v.type):
            text = join_strings("[", pc.binary_join(pc.cast(v, pa.list_(pa.string())), ", "), "]")
        elif isinstance(v, pa.Array):
            text = v
        elif v.dtype == np.bool_:
            text = Names(("false", "true"), v.astype(np.int8))
        elif v.dtype.kind in "iu":
            text = json_ints(v)
        else:
            text = json_floats(v)
        parts += [("{" if j == 0 else ", ") + json.dumps(key) + ": ", text]
    return join_strings(*parts, "}")


def json_objects_by_kind(columns: dict) -> pa.Array:
    """`json_objects` for rows of several kinds with different keys: row i holds the columns named
    "<k>:<key>" for its kind k = columns["kind"][i] (every column spans all rows)."""
    kind = np.asarray(columns["kind"])
    keys: dict[int, dict] = {}
    for name, v in columns.items():
        if name != "kind":
            k, key = name.split(":", 1)
            keys.setdefault(int(k), {})[key] = v
    pieces, rows = [], []
    for k in np.unique(kind).tolist():
        at = np.flatnonzero(kind == k)
        cols = {key: v.take(pa.array(at)) if isinstance(v, pa.Array) else np.asarray(v)[at]
                for key, v in keys.get(k, {}).items()}
        pieces.append(json_objects(cols) if cols else pa.repeat(pa.scalar("{}", pa.string()), at.size))
        rows.append(at)
    where = np.empty(kind.size, dtype=np.int64)
    where[np.concatenate(rows)] = np.arange(kind.size)
    return pa.concat_arrays(pieces).take(pa.array(where))


def json_int_lists(rows: list) -> pa.Array:
    """Each list of ints as JSON ("[1, 2]", "[]"); Python, a few µs per row."""
    return pa.array(["[" + ", ".join(map(str, r)) + "]" for r in rows], type=pa.string())


def json_ints(x) -> pa.Array:
    return pc.cast(pa.array(np.asarray(x, dtype=np.int64)), pa.string())


def json_strings(x) -> pa.Array:
    """JSON string literals of an object array of str, or of `Names` (json.dumps once per name)."""
    if isinstance(x, Names):
        values, inverse = x.names, x.codes
    else:
        values, inverse = np.unique(np.asarray(x, dtype=object).astype(str), return_inverse=True)
        values = values.tolist()
    return pa.array([json.dumps(v) for v in values], type=pa.string()).take(pa.array(np.asarray(inverse).ravel()))


def join_strings(*parts) -> pa.Array:
    """Concatenate, row by row, string arrays (Arrow or `Names`) and constant strings."""
    parts = [_column([p], pa.string()) if isinstance(p, Names) else p for p in parts]
    return pc.binary_join_element_wise(*parts, "")


def _py(v):
    if isinstance(v, np.ndarray) and v.dtype == object:
        return v.tolist()
    return v


def table_files(run_dir: Path, table: str) -> list[Path]:
    return sorted((Path(run_dir) / table).glob("part-*.parquet"))


def content_hashes(run_dir: Path) -> dict[str, str]:
    """sha256 over each table's part files, in order: the byte-identity fingerprint of a run."""
    from sim.datafiles import read_bytes
    out = {}
    for t in TABLES:
        h = hashlib.sha256()
        for f in table_files(run_dir, t):
            h.update(f.name.encode())
            h.update(read_bytes(f))
        out[t] = h.hexdigest()
    return out


def _part_file(f: Path):
    """A part file opened as a run's file (sim.datafiles: no link followed, no FIFO read)."""
    from sim.datafiles import open_file
    return open_file(f, "rb")


def row_counts(run_dir: Path) -> dict[str, int]:
    def rows(f):
        with _part_file(f) as fh:
            return pq.ParquetFile(fh).metadata.num_rows
    return {t: sum(rows(f) for f in table_files(run_dir, t)) for t in TABLES}


def read_table(run_dir: Path, table: str) -> pa.Table:
    files = table_files(run_dir, table)
    if not files:
        return SCHEMAS[table].empty_table()
    tables = []
    for f in files:
        with _part_file(f) as fh:
            tables.append(pq.read_table(fh))
    return pa.concat_tables(tables)
