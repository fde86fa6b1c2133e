"""The recorder buffers column chunks of any kind and writes what converting every add would."""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.recorder import (DISTINCT_MIN, SCHEMAS, SORT_KEYS, Formatted, Lists, Names, Recorder, _column, join_strings, json_floats, json_ints,
                          json_int_lists, json_objects, json_objects_by_kind, json_strings, list_column, read_table, signed_fixed2,
                          write_options)

KINDS = ("flashbulb", "curator", "dream")


def _events(time_ms, kinds, value, seq=None, ints=np.int64) -> dict:
    n = len(time_ms)
    return dict(time_ms=np.asarray(time_ms, dtype=np.int64), seq=np.zeros(n, np.int64) if seq is None else seq,
                golem_id=np.arange(n, dtype=ints), clade_id=[0] * n, tick=np.arange(n), kind=kinds,
                entry_id=pa.array(np.arange(n), pa.int64()), other_golem=np.full(n, -1, ints), value=value,
                payload=["{}"] * n)


def _reference(adds: list[dict]) -> bytes:
    """The part file as the recorder wrote it before buffering: one Arrow table per add, sorted."""
    schema = SCHEMAS["events"]
    plain = [{k: np.array(KINDS, dtype=object)[v.codes] if isinstance(v, Names) else v for k, v in a.items()}
             for a in adds]
    t = pa.concat_tables([pa.Table.from_arrays([c[f.name] if isinstance(c[f.name], pa.Array) else
                                                pa.array(list(c[f.name]), type=f.type, from_pandas=True)
                                                for f in schema], schema=schema) for c in plain])
    t = t.take(pc.sort_indices(t, sort_keys=[(k, "ascending") for k in SORT_KEYS["events"]]))
    sink = pa.BufferOutputStream()
    pq.write_table(t, sink, **write_options(t.schema))
    return sink.getvalue().to_pybytes()


@pytest.mark.parametrize("times", [([1, 2, 2], [3, 5]), ([3, 1, 3], [1, 2])], ids=["in order", "out of order"])
def test_chunks_of_any_kind_write_the_bytes_of_per_add_conversion(tmp_path, times):
    adds = [_events(times[0], Names(KINDS, [0, 2, 1]), np.array([0.5, np.nan, 1.5]), ints=np.int32),
            _events(times[1], np.array(["dream", "curator"], dtype=object), [2.5, float("nan")])]
    rec = Recorder(tmp_path)
    for a in adds:
        rec.add("events", a)
    rec.add("events", _events([], Names(KINDS, []), np.zeros(0)))
    assert rec.pending() == 5
    assert rec.flush() == ["events/part-00000.parquet"]
    assert rec.pending() == 0
    assert (tmp_path / "events" / "part-00000.parquet").read_bytes() == _reference(adds)


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_many_number_chunks_write_the_bytes_of_per_add_conversion(tmp_path_factory, seed):
    """Numeric chunks are copied into one growing buffer per column and flush interval (past its
    first capacity, across dtype switches, sized from the previous flush): the parts are still the
    bytes of converting every add, flush after flush (and an interval of empty adds writes none)."""
    rng = np.random.default_rng(seed)
    tmp = tmp_path_factory.mktemp("many")
    rec = Recorder(tmp)
    for part in range(2):
        adds = []
        for _ in range(int(rng.integers(1, 200))):
            n = int(rng.integers(0, 40))
            value = rng.standard_normal(n)
            value[rng.uniform(size=n) < 0.1] = np.nan
            wide = rng.uniform() < 0.8
            adds.append(_events(np.sort(rng.integers(0, 10**6, n)), Names(KINDS, rng.integers(0, 3, n)), value,
                                ints=np.int64 if wide else np.int32))
            # an int64 chunk after int32 ones (tick is int64 in the table) must not be narrowed
            adds[-1]["tick"] = np.arange(n, dtype=np.int64) + 2**40 if wide else np.arange(n, dtype=np.int32)
            rec.add("events", adds[-1])
        rec.flush(background=bool(part))
        rec.sync()
        path, rows = tmp / "events" / f"part-{part:05d}.parquet", [a for a in adds if len(a["tick"])]
        if rows:
            assert path.read_bytes() == _reference(rows)
        else:               # an interval whose adds were all empty: no part, as for a table with no rows
            assert not path.exists()


def test_flush_sorts_stably(tmp_path):
    rec = Recorder(tmp_path)
    rec.add("events", _events([3, 1, 3], Names(KINDS, [0, 0, 0]), np.array([0.0, 1.0, 2.0])))
    rec.add("events", _events([1, 2], Names(KINDS, [0, 0]), np.array([3.0, 4.0])))
    rec.flush()
    t = read_table(tmp_path, "events")
    assert t["time_ms"].to_pylist() == [1, 1, 2, 3, 3]
    assert t["value"].to_pylist() == [1.0, 3.0, 4.0, 0.0, 2.0]    # equal keys keep the order of arrival


def test_columns_of_different_lengths_are_refused(tmp_path):
    with pytest.raises(ValueError, match="different lengths"):
        Recorder(tmp_path).add("events", dict(_events([1, 2], Names(KINDS, [0, 0]), [0.0, 1.0]), value=[0.0]))


def test_background_flush_writes_the_same_bytes_and_reports_failures(tmp_path, monkeypatch):
    """A periodic flush encodes on the writer thread: after sync() the part is the synchronous one;
    a write that failed there is raised by the next sync, not lost."""
    add = _events([3, 1, 2], ["dream", "curator", "dream"], [0.5, 1.0, np.nan])
    fg, bg = Recorder(tmp_path / "fg"), Recorder(tmp_path / "bg")
    fg.add("events", add)
    bg.add("events", add)
    assert fg.flush() == bg.flush(background=True) == ["events/part-00000.parquet"]
    bg.sync()
    part = "events/part-00000.parquet"
    assert (tmp_path / "bg" / part).read_bytes() == (tmp_path / "fg" / part).read_bytes()
    assert bg.rows["events"] == 3 and not list((tmp_path / "bg" / "events").glob("*.tmp"))

    import sim.recorder as R

    def full_disk(path, data):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(R, "atomic_write_bytes", full_disk)
    bg.add("events", add)
    bg.flush(background=True)
    with pytest.raises(OSError, match="No space"):
        bg.sync()


def test_a_flush_waits_for_the_one_before_and_raises_its_failure(tmp_path, monkeypatch):
    """The writer thread holds at most one flush (the memory estimate counts two: it and the
    buffers filling): a periodic flush waits for the previous flush's parts first, and a part
    that failed fails the very next flush, not only the final sync."""
    import threading

    import sim.recorder as R
    add = _events([3, 1, 2], ["dream", "curator", "dream"], [0.5, 1.0, np.nan])
    gate, real = threading.Event(), R._build_and_write

    def held(path, table, cols):
        gate.wait(timeout=10)
        return real(path, table, cols)
    monkeypatch.setattr(R, "_build_and_write", held)
    rec = Recorder(tmp_path / "r")
    rec.add("events", add)
    rec.flush(background=True)
    rec.add("events", add)
    second = threading.Thread(target=rec.flush, kwargs={"background": True})
    second.start()
    second.join(timeout=0.3)
    assert second.is_alive()                   # waiting for the first flush's part
    gate.set()
    second.join(timeout=10)
    assert not second.is_alive() and "events/part-00000.parquet" in rec.part_sha
    rec.sync()

    def broken(path, table, cols):
        raise OSError(5, "Input/output error", str(path))
    monkeypatch.setattr(R, "_build_and_write", broken)
    rec.add("events", add)
    rec.flush(background=True)
    rec.add("events", add)
    with pytest.raises(OSError, match="Input/output error"):
        rec.flush(background=True)


def test_a_job_after_the_parts_runs_on_the_writer_thread_once_they_are_on_disk(tmp_path, monkeypatch):
    """`after_parts(fn)`: fn runs on the writer thread after every part handed over before it
    (a checkpoint's commit), sees their sha256 (earlier flushes' too), gets the error of a part
    that failed from parts(), and its own error is raised by the next sync."""
    import hashlib
    import threading

    import sim.recorder as R
    add = _events([3, 1, 2], ["dream", "curator", "dream"], [0.5, 1.0, np.nan])
    rec = Recorder(tmp_path / "r")
    seen = []

    def job(parts):
        got = parts()
        seen.append((threading.current_thread().name, got,
                     {k: hashlib.sha256((tmp_path / "r" / k).read_bytes()).hexdigest() for k in got}))
    for _ in range(2):
        rec.add("events", add)
        rec.flush(background=True)
        rec.after_parts(job)
    rec.sync()
    assert [sorted(got) for _, got, _ in seen] == [["events/part-00000.parquet"],
                                                   ["events/part-00000.parquet", "events/part-00001.parquet"]]
    assert all(name.startswith("golem-recorder") and got == on_disk for name, got, on_disk in seen)

    def broken(path, table, cols):
        raise OSError(5, "Input/output error", str(path))
    monkeypatch.setattr(R, "_build_and_write", broken)
    errors = []

    def job2(parts):
        try:
            parts()
        except OSError as exc:
            errors.append(exc)
        raise RuntimeError("the job failed")
    rec.add("events", add)
    rec.flush(background=True)
    rec.after_parts(job2)
    with pytest.raises(OSError, match="Input/output error"):    # the part's error comes first
        rec.sync()
    assert len(errors) == 1 and "part-00002" in str(errors[0])
    rec.after_parts(lambda parts: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        rec.sync()
    rec.sync()                                                   # reported once


def test_the_flush_after_a_job_goes_on_and_the_one_after_that_waits_for_it(tmp_path):
    """A checkpoint's commit (an `after_parts` job: fsync and sha256 of ~220 MB at 1,000 Golems)
    does not hold the next flush: the run goes on while it works, and the next flush's parts queue
    behind it on the writer thread. The flush after that has waited for it; so do `wait_jobs`
    (the next save) and `sync`, which raise its error."""
    import threading
    add = _events([3, 1, 2], ["dream", "curator", "dream"], [0.5, 1.0, np.nan])
    rec = Recorder(tmp_path / "r")
    gate, ran = threading.Event(), []

    def commit(parts):
        gate.wait(timeout=10)
        ran.append(sorted(parts()))
    rec.add("events", add)
    rec.flush(background=True)
    rec.after_parts(commit)
    rec.add("events", add)
    assert rec.flush(background=True) == ["events/part-00001.parquet"]   # returned with the job held
    assert not ran and not (tmp_path / "r" / "events" / "part-00001.parquet").exists()
    gate.set()
    rec.add("events", add)
    rec.flush(background=True)                       # the flush after next: the job has run
    assert ran == [["events/part-00000.parquet"]]
    assert (tmp_path / "r" / "events" / "part-00001.parquet").exists()
    rec.after_parts(lambda parts: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        rec.wait_jobs()
    rec.sync()


def test_the_runs_last_flush_returns_once_the_job_before_it_is_done(tmp_path):
    """A stopped run's last flush (foreground) builds its parts itself while the writer is still
    busy with the previous checkpoint's commit; it returns only once that commit is done too, so
    the run directory (its checkpoints pruned to the last two) does not change after the run has
    returned, and the commit's error is the flush's. So does one with no rows to write."""
    import threading
    add = _events([3, 1, 2], ["dream", "curator", "dream"], [0.5, 1.0, np.nan])
    rec = Recorder(tmp_path / "r")
    started, ran = threading.Event(), []

    def commit(parts):
        started.set()
        time.sleep(0.3)
        ran.append(sorted(parts()))
    rec.add("events", add)
    rec.flush(background=True)
    rec.after_parts(commit)
    assert started.wait(10)
    rec.add("events", add)
    assert rec.flush() == ["events/part-00001.parquet"]
    assert ran == [["events/part-00000.parquet"]]
    rec.after_parts(commit)
    assert rec.flush() == [] and len(ran) == 2          # with no rows to write, too
    rec.after_parts(lambda parts: 1 / 0)
    rec.add("events", add)
    with pytest.raises(ZeroDivisionError):
        rec.flush()
    assert (tmp_path / "r" / "events" / "part-00003.parquet").exists()


def _writer_held(tmp_path, monkeypatch, interrupt_first: bool = False, before_interrupt=None):
    """A Recorder whose writer thread is held by a queued job until `gate` is set, with part 0
    (three events) queued behind it; `writers` lists (part, thread) for every part written, the
    first one raising KeyboardInterrupt instead with `interrupt_first` (after
    `before_interrupt(gate)`)."""
    import threading

    import sim.recorder as recorder
    real = recorder._write_part
    writers: list[tuple[str, str]] = []
    gate = threading.Event()

    def write_part(path, t):
        writers.append((f"{path.parent.name}/{path.name}", threading.current_thread().name))
        if interrupt_first and len(writers) == 1:
            if before_interrupt is not None:
                before_interrupt(gate)
            raise KeyboardInterrupt
        return real(path, t)
    monkeypatch.setattr(recorder, "_write_part", write_part)
    add = _events([3, 1, 2], ["dream", "curator", "dream"], [0.5, 1.0, np.nan])
    rec = Recorder(tmp_path / "r")
    recorder._WRITER.submit(gate.wait, 10)        # the writer is busy (with no job the flushes wait for)
    rec.add("events", add)
    rec.flush(background=True)
    rec.add("events", add)
    return rec, gate, writers


def test_a_flush_that_would_wait_for_the_writer_builds_its_pending_parts_itself(tmp_path, monkeypatch):
    """Parts the writer thread has not started when a flush (or `sync`) must wait for them are
    built and written by the waiting thread instead (a push wave's parts take the writer seconds):
    the same files, and the writer, once free, skips them. A job queued behind them (a checkpoint's
    commit) still sees every part's sha256."""
    import threading
    rec, gate, writers = _writer_held(tmp_path, monkeypatch)
    seen = []
    rec.after_parts(lambda parts: seen.append(parts()))
    rec.flush(background=True)                    # waits for part 0, which the writer has not started
    assert writers == [("events/part-00000.parquet", threading.current_thread().name)]
    gate.set()
    rec.sync()
    assert sorted(rel for rel, _ in writers) == ["events/part-00000.parquet", "events/part-00001.parquet"]
    assert sorted(seen[0]) == ["events/part-00000.parquet"]
    assert rec.part_sha["events/part-00000.parquet"] == seen[0]["events/part-00000.parquet"]
    assert pq.read_table(tmp_path / "r" / "events" / "part-00000.parquet").equals(
        pq.read_table(tmp_path / "r" / "events" / "part-00001.parquet"))


def test_a_part_whose_build_the_simulation_thread_breaks_off_is_written_whole_by_another_thread(tmp_path, monkeypatch):
    """Interrupted at once while it builds a part it took over (a second Ctrl-C), the simulation
    thread lets the interrupt go on and leaves the part to a thread of its own, which writes it
    whole while the writer thread is still busy: the stop is not delayed and no row is lost, and
    the stopped run's last flush waits for that part (its sha256 kept) as for any other."""
    import threading

    rec, gate, writers = _writer_held(tmp_path, monkeypatch, interrupt_first=True)
    part0 = "events/part-00000.parquet"
    with pytest.raises(KeyboardInterrupt):
        rec.flush(background=True)                # takes part 0 over, and is interrupted
    assert writers[0] == (part0, threading.main_thread().name)
    threading.Timer(0.3, gate.set).start()        # the writer is free only after the last flush began
    rec.flush()                                   # the rows the interrupted flush kept: part 1
    assert (part0, "golem-recorder-handback") in writers         # part 0 again, whole
    assert sorted(rec.part_sha) == [part0, "events/part-00001.parquet"]
    assert pq.read_table(tmp_path / "r" / part0).equals(pq.read_table(tmp_path / "r" / "events" / "part-00001.parquet"))


def test_a_flush_stopped_while_it_waits_for_a_part_keeps_waiting_for_it_at_the_last_flush(tmp_path, monkeypatch):
    """A second Ctrl-C while a flush waits for a part the writer thread is writing: the interrupt
    goes on at once, and the stopped run's last flush still waits for that part and keeps its
    sha256 (the manifest is hashed after it has landed)."""
    import threading
    from concurrent.futures import Future

    class Interrupted(Future):
        """A wait interrupted once by a signal, as `Future.result` is when SIGINT arrives."""
        def result(self, timeout=None):
            if not self.done() and not getattr(self, "hit", False):
                self.hit = True
                raise KeyboardInterrupt
            return super().result(timeout)

    rec, gate, writers = _writer_held(tmp_path, monkeypatch)
    part0 = rec._writing[0][1]
    assert part0.claim()                          # the writer's, as if it had started it
    part0.done = Interrupted()
    with pytest.raises(KeyboardInterrupt):
        rec.flush(background=True)
    gate.set()
    threading.Timer(0.2, part0.build).start()     # the writer finishes part 0 later
    rec.flush()
    assert sorted(rec.part_sha) == ["events/part-00000.parquet", "events/part-00001.parquet"]
    assert pq.read_table(tmp_path / "r" / "events" / "part-00000.parquet").num_rows == 3


def test_a_part_handed_back_while_a_commit_waits_for_it_is_still_written(tmp_path, monkeypatch):
    """The writer thread is in a checkpoint's commit, waiting for a part the simulation thread took
    over, when the simulation thread is stopped at once (a second Ctrl-C) in that part: the part
    is written all the same and the commit ends with its sha256 (queued behind the commit on the
    writer thread, the part would never be written and the commit would wait for ever)."""
    import threading
    in_commit, committed, seen = threading.Event(), threading.Event(), []

    def commit_then_interrupt(gate):
        gate.set()                                # the writer skips part 0 (claimed) and enters the commit
        assert in_commit.wait(10)
        time.sleep(0.1)                           # ... and waits there for part 0

    def commit(parts):
        in_commit.set()
        seen.append(sorted(parts()))
        committed.set()
    rec, _, writers = _writer_held(tmp_path, monkeypatch, interrupt_first=True, before_interrupt=commit_then_interrupt)
    rec.after_parts(commit)
    with pytest.raises(KeyboardInterrupt):
        rec.sync()                                # takes part 0 over, and is interrupted
    ended = committed.wait(10)
    if not ended:                                 # free the writer thread for the other tests
        rec._writing[0][1].done.set_exception(RuntimeError("never written"))
    assert ended and seen == [["events/part-00000.parquet"]]
    assert writers[1] == ("events/part-00000.parquet", "golem-recorder-handback")
    rec.sync()


EDGE_FLOATS = [0.0, -0.0, 1.0, -1.0, 100.0, 1e8, 999999999.5, 1e9, 3.07e10, 1e10, 0.5, 1e-4, 9.99e-5, 1e-5, -2e-7, 5e-324, 1e15, 9.999999999999998e14,
               1e16, 123456789.0, 1.7976931348623157e308, float("nan"), float("inf"), float("-inf"), 0.1 + 0.2]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True) | st.floats(-1, 1) | st.sampled_from(EDGE_FLOATS),
                max_size=40))
def test_json_floats_are_what_json_writes(xs):
    assert json_floats(np.array(xs, dtype=np.float64)).to_pylist() == [json.dumps(x) for x in xs]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True) | st.floats(-1, 1) | st.sampled_from(EDGE_FLOATS),
                min_size=1, max_size=12),
       st.lists(st.integers(0, 11), min_size=DISTINCT_MIN, max_size=3 * DISTINCT_MIN))
def test_json_floats_of_a_long_column_with_repeats_are_what_json_writes(pool, picks):
    """A long column of few distinct values (formatted once each and taken back): the same text,
    0.0 and -0.0 apart."""
    xs = [pool[i % len(pool)] for i in picks] + [0.0, -0.0]
    assert json_floats(np.array(xs, dtype=np.float64)).to_pylist() == [json.dumps(x) for x in xs]


TIES = [k / 200 for k in range(-400, 401)] + [k / 8 for k in range(-40, 41)]   # x.xx5 halves, exact eighths


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(allow_nan=True, allow_infinity=True) | st.floats(-2, 2) | st.floats(-2, 2, width=32)
                | st.sampled_from(EDGE_FLOATS + TIES), max_size=40))
def test_signed_fixed2_is_what_python_writes(xs):
    assert signed_fixed2(np.array(xs, dtype=np.float64)).to_pylist() == [f"{x:+.2f}" for x in xs]


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 12).flatmap(lambda n: st.tuples(
    st.lists(st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from(EDGE_FLOATS), min_size=n, max_size=n),
    st.lists(st.integers(-2**62, 2**62), min_size=n, max_size=n), st.lists(st.booleans(), min_size=n, max_size=n),
    st.lists(st.lists(st.integers(-1, 2**40), max_size=4), min_size=n, max_size=n))))
def test_json_objects_are_what_json_writes_for_the_dicts(cols):
    """Payload columns (as a curator or contrarian batch gives them) -> the JSON text of each row's
    dict, as the event-dict path writes it (json.dumps, sort_keys)."""
    from sim.recording import _payload_json
    floats, ints, bools, lists = cols
    got = json_objects({"mood_p": np.array(floats), "pool_n": np.array(ints, dtype=np.int64),
                        "balance": np.array(bools), "ids": json_int_lists(lists), "a_first": np.array(ints) % 7})
    want = [_payload_json({"mood_p": f, "pool_n": i, "balance": b, "ids": ids, "a_first": i % 7})
            for f, i, b, ids in zip(floats, ints, bools, lists)]
    assert got.to_pylist() == want


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from(EDGE_FLOATS),
                          st.lists(st.integers(-1, 2**40), max_size=4), st.booleans()), min_size=1, max_size=12))
def test_json_objects_by_kind_are_what_json_writes_for_each_rows_dict(rows):
    """Rows of two kinds with different keys (a curator pass and its reflex proposals), lists of
    ints as (values, offsets): each row's text is the JSON of its own kind's dict."""
    from sim.recording import _payload_column, _payload_json
    kind = np.array([int(k) for k, _, _, _ in rows], dtype=np.int8)
    lists = [ids for _, _, ids, _ in rows]
    offsets = np.concatenate([[0], np.cumsum([len(x) for x in lists])])
    values = np.array([e for x in lists for e in x], dtype=np.int64)
    cols = {"kind": kind, "0:mean": np.array([f for _, f, _, _ in rows]), "0:lessons": _payload_column((values, offsets)),
            "1:applied": np.array([b for _, _, _, b in rows])}
    want = [_payload_json({"mean": f, "lessons": ids} if not k else {"applied": b}) for k, f, ids, b in rows]
    assert json_objects_by_kind(cols).to_pylist() == want


def test_json_strings_ints_and_joins():
    names = np.array(["flashbulb", 'say "hi"', "é", "flashbulb"], dtype=object)
    assert json_strings(names).to_pylist() == [json.dumps(x) for x in names]
    assert json_ints(np.array([0, -7, 2**40])).to_pylist() == ["0", "-7", str(2**40)]
    joined = join_strings("{", json_ints(np.array([1, 2])), ", ", Names(("false", "true"), np.array([1, 0])), "}")
    assert joined.to_pylist() == ["{1, true}", "{2, false}"]


def test_list_chunks_become_the_lists_of_their_kept_cells():
    a1 = np.array([[1.0, 2.0, np.nan], [4.0, 5.0, 6.0]])
    a2 = np.array([[7.0, np.nan, 9.0]])
    m1 = np.array([[True, True, True], [False, True, False]])
    m2 = np.array([[False, False, False]])
    col = _column([Lists(a1, m1), Lists(a2, m2)], pa.list_(pa.float64()))
    assert col.to_pylist() == [[1.0, 2.0, None], [5.0], []]
    ids = _column([Lists(np.array([[3, -1], [-1, -1]]), np.array([[True, False], [False, False]]))], pa.list_(pa.int64()))
    assert ids.type == pa.list_(pa.int64()) and ids.to_pylist() == [[3], []]


def _list_column_reference(values, mask, dtype):
    """The plain numpy/Arrow construction the packing kernel replaces."""
    offsets = np.concatenate([[0], np.cumsum(mask.sum(axis=1))]).astype(np.int32)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values[mask], type=dtype, from_pandas=True))


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 12), st.integers(1, 9), st.integers(0, 2**32 - 1), st.sampled_from(["f8", "f4", "i8"]),
       st.floats(0, 1))
def test_list_column_kernel_equals_the_numpy_construction(rows, k, seed, dt, p_keep):
    rng = np.random.default_rng(seed)
    if dt == "i8":
        values, dtype = rng.integers(-2**62, 2**62, (rows, k)), pa.int64()
    else:
        values, dtype = rng.standard_normal((rows, k)).astype(dt), pa.float64()
        values[rng.random((rows, k)) < 0.2] = np.nan
    mask = rng.random((rows, k)) < p_keep
    got, want = list_column(values, mask, dtype), _list_column_reference(values, mask, dtype)
    assert got.type == want.type and got.equals(want)
    assert got.to_pylist() == want.to_pylist()


def _texts(cols):
    _texts.calls.append({k: (v.names, v.codes.tolist()) if isinstance(v, Names) else v.tolist() for k, v in cols.items()})
    return join_strings('{"a": ', json_ints(cols["a"]), ', "who": ', json_strings(cols["who"]), "}")


def test_formatted_chunks_are_built_at_flush_once_and_in_their_place(tmp_path):
    """Chunks of one fn are built in one call over their concatenated columns (names merged),
    however other kinds of chunks lie between them, and each row lands in its own place."""
    _texts.calls = []
    rec = Recorder(tmp_path)
    rec.add("events", dict(_events([1, 2], Names(KINDS, [0, 0]), np.array([0.5, 1.0])),
                           payload=pa.array(["{}", "{}"], type=pa.string())))
    rec.add("events", dict(_events([3], Names(KINDS, [1]), np.array([2.0])),
                           payload=Formatted(_texts, dict(a=np.array([7]), who=Names(("ann", "bob"), [1])), 1)))
    rec.add("events", dict(_events([4], Names(KINDS, [1]), np.array([2.0])), payload=pa.array(["{}"], type=pa.string())))
    rec.add("events", dict(_events([5, 6], Names(KINDS, [1, 2]), np.array([2.0, 3.0])),
                           payload=Formatted(_texts, dict(a=np.array([8, 9]), who=Names(("cy", "bob"), [0, 1])), 2)))
    assert _texts.calls == []                      # nothing built on the simulation thread
    rec.flush()
    assert _texts.calls == [dict(a=[7, 8, 9], who=(("ann", "bob", "cy"), [1, 2, 1]))]
    assert read_table(tmp_path, "events").column("payload").to_pylist() == [
        "{}", "{}", '{"a": 7, "who": "bob"}', "{}", '{"a": 8, "who": "cy"}', '{"a": 9, "who": "bob"}']


def test_number_chunks_of_different_widths_concatenate_exactly():
    col = _column([np.array([1, 2], np.int32), np.array([2**40], np.int64)], pa.int64())
    assert col.to_pylist() == [1, 2, 2**40]
    col = _column([np.array([0.1], np.float32), np.array([0.1, np.nan])], pa.float64())
    assert col.to_pylist() == [float(np.float32(0.1)), 0.1, None]
    mixed = _column([np.array([2**62 + 1], np.uint64), np.array([-1], np.int64)], pa.int64())   # never via float64
    assert mixed.to_pylist() == [2**62 + 1, -1]


def test_parts_keep_dictionaries_for_strings_and_statistics_for_scalars(tmp_path):
    rec = Recorder(tmp_path)
    rec.add("events", _events([1, 2, 3], Names(KINDS, [0, 1, 0]), np.array([0.5, 1.0, 2.0])))
    rec.flush()
    meta = pq.ParquetFile(tmp_path / "events" / "part-00000.parquet").metadata.row_group(0)
    cols = {meta.column(i).path_in_schema: meta.column(i) for i in range(meta.num_columns)}
    assert "RLE_DICTIONARY" in cols["kind"].encodings and "RLE_DICTIONARY" not in cols["value"].encodings
    assert cols["time_ms"].statistics.min == 1 and cols["time_ms"].statistics.max == 3
    assert cols["value"].statistics.has_min_max


def test_writer_thread_runs_at_the_lowest_priority():
    import os
    import sys
    import threading

    from sim.recorder import _WRITER
    nice = _WRITER.submit(lambda: os.getpriority(os.PRIO_PROCESS, threading.get_native_id())).result()
    if sys.platform.startswith("linux"):
        assert nice == 19
    import sim  # noqa: F401  (sets numba's OpenMP threads to sleep after a kernel unless told otherwise)
    assert os.environ.get("OMP_WAIT_POLICY") == "PASSIVE"


def test_formatted_columns_past_the_build_size_are_built_in_pieces_of_the_same_bytes(tmp_path, monkeypatch):
    """A Formatted column of more rows than FORMAT_ROWS (a push wave's contagion payloads: past 2 GiB
    of text one Arrow string array cannot hold them) is built FORMAT_ROWS rows at a time, and the
    part is the same file as the one built in one call."""
    import sim.recorder as recorder

    def fill(rec):
        rec.add("events", dict(_events([1, 2], Names(KINDS, [0, 0]), np.array([0.5, 1.0])),
                               payload=pa.array(["{}", "{}"], type=pa.string())))
        rec.add("events", dict(_events([3, 4, 5], Names(KINDS, [1, 1, 2]), np.array([2.0, 2.5, 3.0])),
                               payload=Formatted(_texts, dict(a=np.array([7, 8, 9]), who=Names(("ann", "bob"), [1, 0, 1])), 3)))
        rec.add("events", dict(_events([6], Names(KINDS, [1]), np.array([2.0])), payload=pa.array(["{}"], type=pa.string())))
        rec.add("events", dict(_events([7, 8], Names(KINDS, [1, 2]), np.array([2.0, 3.0])),
                               payload=Formatted(_texts, dict(a=np.array([10, 11]), who=Names(("cy", "bob"), [0, 1])), 2)))
        rec.flush()

    _texts.calls = []
    fill(Recorder(tmp_path / "whole"))
    assert len(_texts.calls) == 1
    monkeypatch.setattr(recorder, "FORMAT_ROWS", 2)
    _texts.calls = []
    fill(Recorder(tmp_path / "pieces"))
    assert [len(c["a"]) for c in _texts.calls] == [2, 2, 1]
    assert read_table(tmp_path / "pieces", "events").column("payload").to_pylist() == [
        "{}", "{}", '{"a": 7, "who": "bob"}', '{"a": 8, "who": "ann"}', '{"a": 9, "who": "bob"}', "{}",
        '{"a": 10, "who": "cy"}', '{"a": 11, "who": "bob"}']
    parts = {d: sorted((tmp_path / d / "events").glob("*.parquet")) for d in ("whole", "pieces")}
    assert [p.read_bytes() for p in parts["whole"]] == [p.read_bytes() for p in parts["pieces"]]


def test_a_sorted_flush_of_string_columns_past_one_take_writes_the_same_part(tmp_path, monkeypatch):
    """A part that must be sorted, with a string column too big for one Arrow take (past 2 GiB
    after a push wave), is taken FORMAT_ROWS rows at a time and written as the same file."""
    import sim.recorder as recorder

    def fill(rec):
        rec.add("events", dict(_events([5, 1, 3], Names(KINDS, [0, 1, 2]), np.array([0.0, 1.0, 2.0])),
                               payload=Formatted(_texts, dict(a=np.array([7, 8, 9]), who=Names(("ann", "bob"), [1, 0, 1])), 3)))
        rec.add("events", dict(_events([2, 4], Names(KINDS, [1, 1]), np.array([3.0, 4.0])),
                               payload=pa.array(['{"x": 1}', '{"x": 2}'], type=pa.string())))
        rec.flush()

    fill(Recorder(tmp_path / "whole"))
    monkeypatch.setattr(recorder, "FORMAT_ROWS", 2)
    monkeypatch.setattr(recorder, "TAKE_BYTES", 0)
    taken = []
    real = recorder._take
    monkeypatch.setattr(recorder, "_take", lambda t, order: taken.append(len(order)) or real(t, order))
    fill(Recorder(tmp_path / "pieces"))
    assert taken == [5]
    t = read_table(tmp_path / "pieces", "events")
    assert t["time_ms"].to_pylist() == [1, 2, 3, 4, 5]
    assert t["payload"].to_pylist() == ['{"a": 8, "who": "ann"}', '{"x": 1}', '{"a": 9, "who": "bob"}', '{"x": 2}',
                                        '{"a": 7, "who": "bob"}']
    parts = {d: sorted((tmp_path / d / "events").glob("*.parquet")) for d in ("whole", "pieces")}
    assert [p.read_bytes() for p in parts["whole"]] == [p.read_bytes() for p in parts["pieces"]]


def _any_rows(table: str, n: int, at: int = 0) -> dict:
    """n rows of `table` of every column's type (the values only need to round-trip)."""
    def values(t, i):
        if pa.types.is_list(t):
            return [values(t.value_type, i)]
        if pa.types.is_string(t):
            return f"s{i}"
        if pa.types.is_boolean(t):
            return i % 2 == 0
        return i if pa.types.is_integer(t) else i / 4
    return {f.name: pa.array([values(f.type, at + i) for i in range(n)], type=f.type) for f in SCHEMAS[table]}


def test_a_foreground_flush_builds_its_parts_on_both_threads_into_the_same_files(tmp_path, monkeypatch):
    """The run's last flush (and a stopped run's) builds its parts on the calling thread and the
    writer thread at once, the biggest the caller's even beside a writer that takes every part it
    is handed at once: the same files and sha256 as the writer thread alone writes; a part that
    fails is raised once every other part is written."""
    import threading

    import sim.recorder as R
    from sim.recorder import TABLES
    sizes = {t: 60 if t == "retrievals" else 2 + i for i, t in enumerate(TABLES)}
    alone, shared = Recorder(tmp_path / "alone"), Recorder(tmp_path / "shared")
    for rec in (alone, shared):
        for t in TABLES:
            rec.add(t, _any_rows(t, sizes[t]))
    alone.flush(background=True)
    alone.sync()

    me, real, took = threading.current_thread(), R._build_and_write, {}
    writer_busy = threading.Event()

    def traced(path, table, cols):
        took[table] = threading.current_thread()
        if took[table] is me:
            assert writer_busy.wait(5)          # the writer takes a part while the caller holds its first
        else:
            writer_busy.set()
        return real(path, table, cols)
    monkeypatch.setattr(R, "_build_and_write", traced)
    shared.flush()
    assert set(took) == set(TABLES) and {took[t] is me for t in TABLES} == {True, False}
    assert shared.part_sha == alone.part_sha and len(shared.part_sha) == len(TABLES)
    for t in TABLES:
        part = f"{t}/part-00000.parquet"
        assert (tmp_path / "shared" / part).read_bytes() == (tmp_path / "alone" / part).read_bytes()

    class Eager:
        """A writer that has done each job by the time `submit` returns (built the part, unless the
        caller claimed it first)."""

        def submit(self, fn):
            done = R.Future()
            job = threading.Thread(target=lambda: done.set_result(fn()))
            job.start()
            job.join(5)
            return done
    took.clear()
    writer_busy.clear()
    monkeypatch.setattr(R, "_WRITER", Eager())
    eager = Recorder(tmp_path / "eager")
    for t in TABLES:
        eager.add(t, _any_rows(t, sizes[t]))
    eager.flush()
    assert took["retrievals"] is me and eager.part_sha == alone.part_sha      # the biggest part is the caller's

    monkeypatch.undo()
    failed: dict[threading.Thread, str] = {}

    def first_fails(path, table, cols):      # each thread's first part fails; it goes on with the next
        if threading.current_thread() not in failed:
            failed[threading.current_thread()] = table
            raise OSError(5, "Input/output error", str(path))
        return real(path, table, cols)
    monkeypatch.setattr(R, "_build_and_write", first_fails)
    for t in TABLES:
        shared.add(t, _any_rows(t, sizes[t], at=100))
    with pytest.raises(OSError, match="Input/output error"):
        shared.flush()
    written = {p.parent.name for p in (tmp_path / "shared").glob("*/part-00001.parquet")}
    assert failed and written == set(TABLES) - set(failed.values())


def test_a_recorded_run_warms_pyarrow_on_the_writer_thread_before_building_its_world(tmp_path, monkeypatch):
    """pyarrow imports pandas (where installed) at its first conversion: a recorded run starts that
    on the writer thread before the world is built, an unrecorded one never."""
    import threading

    import sim.recorder as R
    import sim.run as RUN
    ran = []
    monkeypatch.setattr(R, "_first_conversion", lambda: ran.append(threading.current_thread().name))
    R.warm_up()
    R._WRITER.submit(lambda: None).result()
    assert len(ran) == 1 and ran[0].startswith("golem-recorder")

    order, build = [], RUN.build_world
    monkeypatch.setattr(RUN, "recorder_warm_up", lambda: order.append("warm"))
    monkeypatch.setattr(RUN, "build_world", lambda *a, **k: (order.append("build"), build(*a, **k))[1])
    for record in (True, False):
        order.clear()
        RUN.execute(Path(__file__).parents[1] / "scenarios" / "calm.yaml", tmp_path / f"r{record}", sets=["duration=1h"],
                    environ={}, record=record)
        assert order == (["warm", "build"] if record else ["build"])
