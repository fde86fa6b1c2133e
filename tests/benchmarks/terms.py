"""What the float32 scan terms do to retrieval: the engine's top-8 against the SPEC §4.1 formulas
computed in float64 from the same columns, on the bench's own arena.

    OPENBLAS_NUM_THREADS=1 python tests/benchmarks/terms.py --duration 1d [--json]

Runs scenarios/bench.yaml unrecorded at capacity 1,024 for the duration, then retrieves for every
Golem with two query sets (random unit vectors; a stored entry of the Golem plus noise, sigma 0.1)
and random moods, and scores every entry of each slab with temporal = base ** hours since the last
access and charge = intensity_at(now) / max(i0, 1e-8) in float64 (`kernels.charge_at`), the
semantic factor of the stored codes (the same integers either way). Prints the share of top-8
sets (served, and the salience-ranked shadow) unchanged and the largest factor differences.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from numba import njit, prange  # noqa: E402

from golem import kernels  # noqa: E402
from golem import retrieval as rt  # noqa: E402
from golem.grimoire import ARCHIVED  # noqa: E402

HOUR_MS, DAY_MS = 3_600_000.0, 86_400_000.0


@njit(cache=True, parallel=True)
def _float64_charge(i0, created_ms, reactivated, last_react_ms, now_ms, half_life_ms, boost, out):
    for s in prange(i0.size):
        out[s] = kernels.charge_at(i0[s], created_ms[s], reactivated[s], last_react_ms[s], now_ms, half_life_ms,
                                   boost, 2.0) / max(np.float64(i0[s]), 1e-8)


def float64_top(gr, golems, queries, pad, now_ms, prm):
    """(served, shadow, factors): top-k slots by the SPEC formulas in float64, ties to the earlier
    slot, and the four factors of every slot of the slabs (b, capacity, 4)."""
    c, cap, k = gr.cols, gr.capacity, prm.top_k
    rows = (golems[:, None] * cap + np.arange(cap)[None, :])
    qc, qs = rt.query_codes(queries, gr.codes.shape[1])
    codes = gr.codes[rows].astype(np.int64)
    dots = np.einsum("bcd,bd->bc", codes, qc.astype(np.int64))
    n2 = (codes * codes).sum(axis=2)
    sem = dots / (qs[:, None] * np.sqrt(np.maximum(n2, 1)))
    age = (now_ms - c["last_access_ms"][rows]).astype(np.float64)
    temporal = prm.temporal_base ** (age / HOUR_MS)
    charge = np.empty(gr.codes.shape[0])
    _float64_charge(c["i0"], c["created_ms"], c["reactivated"], c["last_react_ms"], np.int64(now_ms),
                    prm.half_life_days * DAY_MS, prm.reactivation_boost, charge)
    ch = np.minimum(1.0, charge[rows]) if prm.charge_fading else 1.0
    tp, ta, td = (c[x][rows].astype(np.float64) for x in "pad")
    cp, ca, cd = (pad[:, i:i + 1] for i in range(3))
    cos = (tp * cp + ta * ca + td * cd) / (np.maximum(np.sqrt(tp * tp + ta * ta + td * td), 1e-8)
                                           * np.maximum(np.sqrt(cp * cp + ca * ca + cd * cd), 1e-8))
    emo = np.where(c["has_tag"][rows], 0.5 + 0.5 * cos * ch, 0.5)
    imp = c["importance"][rows].astype(np.float64)
    w = prm.weights
    score = w[0] * sem + w[1] * temporal + w[2] * imp + w[3] * emo
    ok = ((np.arange(cap)[None, :] < gr.count[golems][:, None]) & (c["status"][rows] != ARCHIVED)
          & (age < 2.0 * c["window_ms"][rows].astype(np.float64)))
    salient = score * (1.0 + c["salience"][rows] * prm.salience_cap)

    def top(x):
        x = np.where(ok, x, -np.inf)
        order = np.argsort(-x, axis=1, kind="stable")[:, :k]          # stable: ties keep the earlier slot
        return np.where(np.take_along_axis(x, order, 1) > -np.inf, rows[np.arange(len(rows))[:, None], order], -1)
    return (top(salient) if prm.live else top(score)), top(salient), np.stack([sem, temporal, imp, emo], axis=2)


def compare(gr, golems, queries, pad, now_ms, prm) -> dict:
    res = rt.retrieve(gr, golems, queries, pad, now_ms, prm)
    served, shadow, f64 = float64_top(gr, golems, queries, pad, now_ms, prm)
    same = [set(a) == set(b) for a, b in zip(res.slots, served)]
    got = res.factors
    ref = np.take_along_axis(f64, np.maximum(res.slots - golems[:, None] * gr.capacity, 0)[:, :, None], 1)
    diff = np.where((res.slots >= 0)[:, :, None], np.abs(got - ref), 0.0).max(axis=(0, 1))
    return {"golems": len(golems), "top8_sets_unchanged": float(np.mean(same)),
            "same_order": float(np.mean((res.slots == served).all(axis=1))),
            "shadow_sets_unchanged": float(np.mean([set(a) == set(b) for a, b in zip(res.shadow, shadow)])),
            "largest_factor_difference": dict(zip(("semantic", "temporal", "importance", "emotional"),
                                                  map(float, diff)))}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duration", default="1d")
    ap.add_argument("--capacity", type=int, default=1024)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    from sim.run import execute
    res = execute(ROOT / "scenarios" / "bench.yaml", Path(tempfile.mkdtemp(prefix="golem-terms-")) / "run", seed=None,
                  sets=[f"grimoire.capacity={a.capacity}", f"duration={a.duration}"], environ={}, record=False)
    world = res.world
    gr, prm = world.gr, world.mind.prm
    now = int(world.now_ms)
    golems = np.arange(gr.n_golems)
    rng = np.random.default_rng(17)
    pad = rng.uniform(-1, 1, (golems.size, 3))
    unit = lambda v: (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)  # noqa: E731
    own = gr.emb[golems * gr.capacity + rng.integers(0, np.maximum(gr.count[golems], 1))]
    out = {"duration": a.duration, "capacity": a.capacity,
           "random": compare(gr, golems, unit(rng.standard_normal((golems.size, gr.dim))), pad, now, prm),
           "own_plus_noise": compare(gr, golems, unit(own + 0.1 * rng.standard_normal(own.shape)), pad, now, prm)}
    print(json.dumps(out, indent=1) if a.json else "\n".join(f"{k}: {v}" for k, v in out.items()))


if __name__ == "__main__":
    main()
