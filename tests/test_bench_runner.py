"""The benchmark tools on a tiny load: the runner (tests/benchmarks/_run.py) times every phase and
every table's parts and leaves nothing behind; parquet_options.py encodes every table's part with
each variation, and each reads back as the table; the retrieval floor reads every byte the scan
reads, once, on one thread and over numba's threads alike."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pyarrow.parquet as pq
import pytest

from conftest import ROOT, shared_run
from sim.recorder import TABLES, table_files

sys.path.insert(0, str(ROOT / "tests" / "benchmarks"))     # the tools import each other as scripts do


def test_whole_run_times_every_phase_and_removes_its_tables(tmp_path):
    """In its own process, as the report runs it (its phase timers wrap the engine's methods)."""
    out = subprocess.run([sys.executable, str(ROOT / "tests" / "benchmarks" / "_run.py"), "--capacity", "64",
                          "--duration", "1h", "--no-floor", "--json"], check=True, capture_output=True, text=True,
                         cwd=ROOT, env=dict(os.environ, TMPDIR=str(tmp_path)))
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert list(tmp_path.iterdir()) == []          # the recorded run (~1 GB at full size) is gone
    assert r["run_dir"] is None and r["golem_ticks"] == 1000 * 12
    assert abs(sum(r["phases_s"].values()) - r["run_s"]) < 1e-6 * r["run_s"]
    assert r["phases_s"]["retrieval"] > 0 and r["phases_s"]["recording"] > 0
    # the parts' CPU time, by table: every table the hour recorded, its build and its write
    parts = r["parts_cpu_s"]
    assert {"heartbeats", "retrievals", "entries", "market"} <= set(parts) <= set(TABLES)
    assert all(p["build"] > 0 and p["write"] > 0 for p in parts.values()), parts
    # CPU over the run: the simulation thread's is its phases' (they cover the run); the process's
    # holds it and the other threads'
    assert r["cores"] >= 1
    assert abs(r["thread_cpu_s"] - sum(r["phases_cpu_s"].values())) <= 0.05 * r["thread_cpu_s"]
    assert r["process_cpu_s"] >= r["thread_cpu_s"] > 0


def test_run_cpu_counts_every_threads_cpu_over_the_run(monkeypatch):
    """`RunCpu` around World.run: another thread's work is in the process's CPU time and not in
    the simulation thread's, which here only waits for it."""
    import _run
    import sim.world as W

    def burn():
        end = time.thread_time() + 0.2
        while time.thread_time() < end:
            pass

    def run(world, until_s):
        worker = threading.Thread(target=burn)
        worker.start()
        worker.join()
        return until_s
    monkeypatch.setattr(W.World, "run", run)
    cpu = _run.RunCpu()
    cpu.install()
    assert W.World.run(None, 7.0) == 7.0
    assert cpu.process_s >= 0.19 and cpu.thread_s < 0.05, (cpu.process_s, cpu.thread_s)


def test_the_report_bounds_a_run_by_its_cpu_over_its_cores():
    """29 ms of CPU a tick on 2 cores: no less than 14.5 ms a tick, so at most 1,000 / 14.5 ms =
    68,966 Golem-ticks/s; against a peer at 25,000, measured 2.00 x and at most 2.76 x."""
    import report
    run = {"process_cpu_s": 58.0, "cores": 2, "cohort_ticks": 2000, "golem_ticks": 2_000_000}
    b = report.cores_bound(run)
    assert b["cpu_ms_per_tick"] == pytest.approx(29.0)
    assert b["least_ms_per_tick"] == pytest.approx(14.5)
    assert b["most_golem_ticks_per_s"] == pytest.approx(2_000_000 / 29.0)
    table = report.peers_table({"rounds": [{
        "engine": {"golem_ticks_per_s": 50_000.0, "cores": 2, **b},
        "numpy": {"golem_ticks_per_s": 25_000.0, "engine_over_peer": 2.0}}]})
    assert table.splitlines()[2] == "| 1 | 50,000 | 68,966 (2) | 25,000 | 2.00 | 2.76 |"


def test_parquet_options_encodes_each_tables_largest_part_every_way(tmp_path_factory):
    import parquet_options
    run = shared_run(tmp_path_factory, "calm").run_dir
    rows = parquet_options.measure(run, rounds=1)
    recorded = [t for t in TABLES if table_files(run, t)]
    names = list(parquet_options.variations(pq.read_schema(table_files(run, "heartbeats")[0])))
    assert names[0] == "as recorded" and len(names) == 6
    assert [(r["table"], r["options"]) for r in rows] == [(t, n) for t in recorded for n in names]
    for r in rows:
        part = run / r["table"] / r["part"]
        assert r["rows"] == pq.ParquetFile(part).metadata.num_rows and r["ms"] > 0 and r["mb"] > 0
        if r["options"] == "as recorded":     # the recorder's options give the part's size
            assert abs(r["mb"] * 1e6 - part.stat().st_size) < 1, r
        if r["options"] == "uncompressed" and r["table"] == "heartbeats":
            assert r["mb"] > 1.3 * next(x["mb"] for x in rows if x["table"] == "heartbeats"
                                        and x["options"] == "as recorded")


def test_the_floor_reads_every_byte_the_scan_reads_once():
    """`StreamRead` on one thread and in pieces over the threads gives the xor of exactly the scan's
    bytes of the Golems asked for (each array's window of 8-byte words, then its last bytes), as
    numpy computes it here, for a whole arena of slabs of 300 and a window of its Golems."""
    import _retrieval as R
    gr = R.build_arena(40, 300, 64)
    for golems in (None, np.arange(7, 29)):
        lo, b = (0, 40) if golems is None else (7, 22)
        want, nbytes = 0, 0
        for a in R.scan_arrays(gr):
            w = a.itemsize * (a.shape[1] if a.ndim == 2 else 1)
            win = a.reshape(-1).view(np.uint8)[lo * 300 * w:(lo + b) * 300 * w]
            words = win[:win.size // 8 * 8].view(np.uint64)
            want ^= int(np.bitwise_xor.reduce(words)) if words.size else 0
            for x in win[words.size * 8:]:
                want ^= int(x)
            nbytes += win.size
        floor = R.StreamRead(gr, golems, piece=4096)     # several pieces an array even here
        assert nbytes == R.scan_bytes_per_entry(gr) * b * 300
        assert int((floor.ends - floor.starts).sum()) == nbytes and floor.starts.size > len(R.scan_arrays(gr))
        assert floor.one() == want and floor.threads() == want
