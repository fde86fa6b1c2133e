"""Dreams (SPEC §8): offline replay that consolidates knowledge and takes the heat out of feelings.

NREM replay picks the entries with the most emotional_intensity x importance and firms up their
confidence; REM depotentiation shrinks the arousal of their tags by r = (1/3)^(1/3) per cycle
(three cycles take 0.9 to 0.3) leaving confidence and content alone; synaptic homeostasis then
scales every importance down and restores the salient (>= 0.7) ones.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from golem.grimoire import ARCHIVED, DAY_MS, Grimoire
from golem.kernels import charge_at, np_minimum, np_sum

REM_FACTOR = (1.0 / 3.0) ** (1.0 / 3.0)


def rem_depotentiate(arousal: float | np.ndarray, cycles: int = 1):
    """Arousal after `cycles` REM cycles."""
    return arousal * REM_FACTOR ** cycles


def select_replay(gr: Grimoire, golems: np.ndarray, now_ms: int, budget: int, half_life_days: float = 3.0,
                  boost: float = 0.3, score_fn=None) -> np.ndarray:
    """NREM selection, one row per Golem: the top `budget` live entries of its slab by
    intensity_at(now) x importance (ties: slot), or by `score_fn(slots)` (HDC similarity to a
    high-arousal prototype under somatic_hdc); -1 pads a slab with fewer live entries.

    Each slab is keyed by -score (`_replay_keys`: the charge with the scalar formula's bits,
    `kernels.charge_at`) and its first `budget` by (key, slot) kept in one pass (`_first_k`)."""
    c = gr.cols
    golems = np.ascontiguousarray(golems, dtype=np.int64)
    k = min(budget, gr.capacity)
    if k <= 0:
        return np.zeros((golems.size, 0), dtype=np.int64)
    if score_fn is None:
        keys = _replay_keys(golems, gr.capacity, gr.count, c["id"], c["status"], c["i0"], c["created_ms"],
                            c["last_react_ms"], c["reactivated"], c["has_tag"], c["importance"], np.int64(now_ms),
                            half_life_days * DAY_MS, float(boost), 2.0)
    else:
        slots = golems[:, None] * gr.capacity + np.arange(gr.capacity)
        live = gr.live_rows(golems) & (c["status"][slots] != ARCHIVED)
        scores = np.zeros(slots.shape)   # fingerprints are large (1.25 KB an entry): slab by slab
        for i in range(golems.size):
            scores[i, live[i]] = score_fn(slots[i, live[i]])
        keys = np.where(live, -scores, np.inf)
    return _first_k(keys, golems, gr.capacity, k)


@njit(cache=True)
def _replay_keys(golems, cap, count, ids, status, i0, created_ms, last_react_ms, reactivated, has_tag, importance,
                 now_ms, h, boost, two):
    """Each slab's NREM keys: -(charge x importance) for the live entries (below the count, with an
    id, not archived; the charge 0 untagged), +inf for the others. `two` is 2.0 (`charge_at`)."""
    keys = np.full((golems.size, cap), np.inf)
    for r in range(golems.size):
        base = golems[r] * cap
        for j in range(count[golems[r]]):
            s = base + j
            if ids[s] >= 0 and status[s] != ARCHIVED:
                charge = charge_at(i0[s], created_ms[s], reactivated[s], last_react_ms[s], now_ms, h, boost,
                                   two) if has_tag[s] else 0.0
                keys[r, j] = -(charge * np.float64(importance[s]))
    return keys


@njit(cache=True)
def _first_k(keys, golems, cap, k):
    """Per row, the slots of the k smallest finite keys by (key, slot), in that order, -1 after
    them: a sorted list of the best k so far, an earlier slot keeping a tie."""
    out = np.full((golems.size, k), -1, np.int64)
    best = np.empty(k)
    for r in range(golems.size):
        base = golems[r] * cap
        n = 0
        for j in range(cap):
            key = keys[r, j]
            if not key < np.inf or (n == k and not key < best[k - 1]):
                continue
            p = n if n < k else k - 1
            while p > 0 and key < best[p - 1]:
                best[p], out[r, p] = best[p - 1], out[r, p - 1]
                p -= 1
            best[p], out[r, p] = key, base + j
            n = min(n + 1, k)
    return out


def dream(gr: Grimoire, g: int, now_ms: int, cfg, score_fn=None) -> dict:
    """One DREAMING tick for Golem g; returns the figures for the `events` row."""
    return dream_batch(gr, np.array([g]), now_ms, cfg, score_fn)[0]


def dream_batch(gr: Grimoire, golems: np.ndarray, now_ms: int, cfg, score_fn=None) -> list[dict]:
    """`dream_columns`' figures as one dict per Golem (the payload of its `events` row)."""
    f = dream_columns(gr, golems, now_ms, cfg, score_fn)
    ids, bounds = (x.tolist() for x in f["replayed"])
    return [{"replayed": ids[lo:hi], "arousal_before": b, "arousal_after": a, "downscaled": dn, "reboosted": up}
            for lo, hi, b, a, dn, up in zip(bounds[:-1], bounds[1:], f["arousal_before"].tolist(),
                                            f["arousal_after"].tolist(), f["downscaled"].tolist(), f["reboosted"].tolist())]


def dream_columns(gr: Grimoire, golems: np.ndarray, now_ms: int, cfg, score_fn=None) -> dict:
    """One DREAMING tick for each of `golems` at once (each touches its own slab only); returns
    the figures for their `events` rows as columns, the payload an `EventBatch` takes: replayed
    as (ids, offsets), the rest one value per Golem."""
    d = cfg.dream
    c = gr.cols
    golems = np.asarray(golems, dtype=np.int64)
    replay = select_replay(gr, golems, now_ms, d.replay_budget, cfg.decay.half_life_days, cfg.decay.reactivation_boost,
                           score_fn)
    ids, bounds, before, after, down, up = _dream_rows(
        golems, gr.capacity, gr.count, replay, c["id"], c["has_tag"], c["a"], c["confidence"], c["importance"],
        c["salience"], np.float32(gr.protect), float(d.confidence_boost), rem_depotentiate(1.0, d.rem_cycles),
        float(d.downscale))
    return {"replayed": (ids, bounds), "arousal_before": before, "arousal_after": after, "downscaled": down,
            "reboosted": up}


@njit(cache=True)
def _dream_rows(golems, cap, count, replay, ids, has_tag, a, confidence, importance, salience, protect, boost,
                rem_scale, downscale):
    """What a dream does to each Golem's slab and the figures of its `events` row, a Golem at a
    time, with the array expressions' arithmetic (tests/test_curation.py holds them as the
    reference): its replayed entries (`replay`'s row up to the first -1) gain `boost` confidence
    (float32, at most 1), their tags' arousal is scaled by `rem_scale` (in float64, stored as
    float32); every live entry of the slab not salient (salience >= protect) has its importance
    scaled by `downscale` (float32). Returns the replayed ids (row after row) with each row's
    bounds, the mean |A| of its replayed tags before (float64) and after (a float32 sum divided in
    float64 and rounded to float32, as numpy means float32; numpy's pairwise sums, `np_sum`), and
    the live entries downscaled and kept."""
    n, k = replay.shape
    out_ids = np.empty(n * k, np.int64)
    bounds = np.zeros(n + 1, np.int64)
    before = np.zeros(n)
    after = np.zeros(n)
    down = np.zeros(n, np.int64)
    up = np.zeros(n, np.int64)
    ab = np.empty(k)
    aa = np.empty(k, a.dtype)
    boost32, one32, scale32 = np.float32(boost), np.float32(1.0), np.float32(downscale)
    m = 0
    for r in range(n):
        c = 0
        while c < k and replay[r, c] >= 0:
            s = replay[r, c]
            ab[c] = abs(np.float64(a[s]))
            confidence[s] = np_minimum(confidence[s] + boost32, one32)
            if has_tag[s]:
                a[s] = np.float64(a[s]) * rem_scale
            aa[c] = abs(a[s])
            out_ids[m + c] = ids[s]
            c += 1
        m += c
        bounds[r + 1] = m
        if c > 0:
            before[r] = np_sum(ab, 0, c, 0.0) / c
            after[r] = np.float32(np.float64(np_sum(aa, 0, c, np.float32(0.0))) / c)   # numpy: float32 sum / intp
        base = golems[r] * cap
        for j in range(count[golems[r]]):
            s = base + j
            if ids[s] < 0:
                continue
            if salience[s] >= protect:
                up[r] += 1
            else:
                importance[s] = importance[s] * scale32
                down[r] += 1
    return out_ids[:m].copy(), bounds, before, after, down, up
