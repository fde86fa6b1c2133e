"""Whole runs of scenarios/bench.yaml (1,000 Golems, 10 Clades, 2,880 ticks at 300 s, d = 64, full
Grimoires from the prefill) at capacity 1,024 and 4,096, with and without recording; and the start
time of a second `golem-sim run` (numba's cache=True: JIT paid once per machine).

Each run is a fresh process (tests/benchmarks/_run.py) so peak RSS is the run's own; its phase
split, Golem-ticks per second and the retrieval floor measured in that process after the run go
to extra_info (`--benchmark-json` keeps them). GOLEM_BENCH_DURATION=1d shortens the runs (the
default is the scenario's 10 days).

    OPENBLAS_NUM_THREADS=1 pytest tests/benchmarks/test_bench_run.py -p no:cacheprovider \\
        --benchmark-only -o addopts="" --benchmark-columns=min,rounds
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest


HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DURATION = os.environ.get("GOLEM_BENCH_DURATION") or None
sys.path.insert(0, str(HERE))
from _run import in_child  # noqa: E402


@pytest.mark.parametrize("capacity", [1024, 4096])
@pytest.mark.parametrize("record", [True, False], ids=["record", "no-record"])
def test_whole_run(benchmark, capacity, record):
    benchmark.group = "whole run (bench.yaml)"
    box = {}

    def once():
        box["r"] = in_child(capacity, record, DURATION)
    benchmark.pedantic(once, rounds=1, iterations=1)
    r = box["r"]
    fl = r["floor"]
    floor_tick = fl["stream_s"]     # a stream read of the bytes the scan reads
    benchmark.extra_info.update(
        golem_ticks_per_s=round(r["golem_ticks_per_s"]), ms_per_cohort_tick=round(1e3 * r["s_per_cohort_tick"], 2),
        floor_ms_per_tick=round(1e3 * floor_tick, 2), tick_over_floor=round(r["s_per_cohort_tick"] / floor_tick, 2),
        kernel_ms_per_tick=round(1e3 * fl["kernel_s"], 2), sgemv_ms_per_tick=round(1e3 * fl["sgemv_s"], 2),
        peak_rss_mb=round(r["peak_rss_mb"]),
        bytes_per_entry=r["bytes_per_entry"], peer_golem_ticks_per_s=round(r["peer"]["golem_ticks_per_s"]),
        engine_over_peer=round(r["golem_ticks_per_s"] / r["peer"]["golem_ticks_per_s"], 2), phases_s={k: round(v, 2) for k, v in r["phases_s"].items()})
    assert r["golem_ticks"] > 0


def test_second_run_starts_fast(benchmark, tmp_path):
    """A tiny run twice: the first may compile (cold numba cache), the second loads the cache."""
    cmd = [sys.executable, "-m", "sim.cli", "run", "scenarios/default.yaml", "--set", "duration=5m", "--no-record", "-q"]
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")

    def once():
        t = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True, env=env, cwd=ROOT)
        return time.perf_counter() - t
    first = once()
    benchmark.group = "start-up"
    second = benchmark.pedantic(once, rounds=3, iterations=1)
    benchmark.extra_info.update(first_run_s=round(first, 2))
    assert benchmark.stats.stats.min < 3.0
    del second
