"""Retrieval: the engine's fused kernel vs idiomatic and tuned numpy, and the floors.

For N in {10k, 100k, 1M} entries, d in {64, 384}, one Golem querying a slab of N entries
("single") and 32 Golems each querying its own slab of N/32 ("batch32"): the same inputs for
every implementation, and every numpy peer must return the kernel's top-k, shadow top-k and pool
statistics before it is timed. `kernel` runs on one thread like every peer; `kernel_threads` is
the engine's own choice for a batch (its Golems spread over numba's threads). Floors: `sgemv` (BLAS matrix-vector per slab, np.matmul over the
stacked slabs for the batch), `full_mm` (batch only: one BLAS matrix-matrix product of all 32
queries with all N entries) and `stream` (a plain numba read of the embedding block).

The kernel's row carries in extra_info its ratios to the others measured alternately in the same
process (CPU time; the host's bandwidth flips between modes, so only side-by-side ratios count).

    OPENBLAS_NUM_THREADS=1 pytest tests/benchmarks/test_bench_retrieval.py -p no:cacheprovider \\
        --benchmark-only -o addopts="" --benchmark-columns=min,median,mean,rounds --benchmark-sort=name

`python tests/benchmarks/report.py` prints the same comparisons as one table of ratios.
"""
from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import _retrieval as R  # noqa: E402
from golem import retrieval as rt  # noqa: E402

IMPLS = ("kernel", "kernel_threads", "idiomatic", "tuned", "sgemv", "full_mm", "stream")
CASES = [(n, d, mode, impl) for n in R.SIZES for d in R.DIMS for mode in ("single", "batch32") for impl in IMPLS
         if not (impl in ("full_mm", "kernel_threads") and mode == "single")]


class _Arena:
    """One arena (and its peers) at a time: the 1M x 384 block alone is 1.5 GB."""

    key = None
    value = None

    @classmethod
    def get(cls, n, d, mode):
        if cls.key != (n, d, mode):
            cls.value = None
            b = 1 if mode == "single" else R.BATCH
            gr = R.build_arena(b, n // b, d)
            q, pad = R.make_queries(b, d)
            prm = rt.RetrievalParams(top_k=R.K)
            golems = np.arange(b)
            res = R.kernel(gr, golems, q, pad, R.NOW_MS, prm)
            idi, tun = R.Idiomatic(gr, prm), R.Tuned(gr, prm)
            # the kernel's stored terms are float32, the tuned peer's scores too: near ties may swap
            R.same_results(res, idi(golems, q, pad, R.NOW_MS), near_ties=1e-6)
            R.same_results(res, tun(golems, q, pad, R.NOW_MS), near_ties=1e-6)
            floor, stream = R.Floor(gr, b), R.StreamRead(gr, golems)
            fns = {
                "kernel": lambda: R.kernel(gr, golems, q, pad, R.NOW_MS, prm),
                "idiomatic": lambda: idi(golems, q, pad, R.NOW_MS),
                "tuned": lambda: tun(golems, q, pad, R.NOW_MS),
                "sgemv": lambda: floor.sgemv(golems, q),
                "full_mm": lambda: floor.full_mm(golems, q),
                "stream": stream.one,
            }
            fns["kernel_threads"] = lambda: R.kernel(gr, golems, q, pad, R.NOW_MS, prm, threads=None)
            if mode == "single":
                fns.pop("full_mm")
                fns.pop("kernel_threads")
            cls.key, cls.value = (n, d, mode), fns
        return cls.value


@pytest.mark.parametrize("n,d,mode,impl", CASES, ids=[f"N{n // 1000}k-d{d}-{m}-{i}" for n, d, m, i in CASES])
def test_retrieval(benchmark, n, d, mode, impl):
    fns = _Arena.get(n, d, mode)
    benchmark.group = f"retrieval N={n:,} d={d} {mode}"
    if impl == "kernel":
        rounds = 5 if n * d >= 100_000_000 else 11
        single = {k: f for k, f in fns.items() if k != "kernel_threads"}  # CPU time: one thread each
        t = R.alternate(single, rounds=rounds)
        for other, v in t.items():
            if other != "kernel":
                benchmark.extra_info[f"{other}/kernel"] = round(v / t["kernel"], 3)
    benchmark(fns[impl])
