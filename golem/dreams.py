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
from golem.kernels import charge_at

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
    chosen = replay >= 0
    r = replay[chosen]
    before_a = c["a"][r].astype(np.float64)
    c["confidence"][r] = np.minimum(1.0, c["confidence"][r] + d.confidence_boost)
    tagged = r[c["has_tag"][r]]
    gr.set_tag_pad(tagged, a=rem_depotentiate(c["a"][tagged].astype(np.float64), d.rem_cycles))
    after_a = c["a"][r]
    # synaptic homeostasis over every live entry, the salient ones kept as they were
    slots = golems[:, None] * gr.capacity + np.arange(gr.capacity)
    live = gr.live_rows(golems)
    imp = c["importance"].reshape(gr.n_golems, gr.capacity)
    pre = imp[golems]
    salient = c["salience"][slots] >= np.float32(gr.protect)
    imp[golems] = np.where(live & ~salient, pre * d.downscale, pre)
    # mean |A| of the replayed tags (REM takes the charge out whichever the arousal's sign), per
    # Golem as numpy takes a mean: a full replay row by row at once, a short one on its own
    n = chosen.sum(axis=1)
    full = (n == replay.shape[1]) & (n > 0)
    before, after = np.zeros(golems.size), np.zeros(golems.size)
    if full.any():
        before[full] = np.abs(before_a[np.repeat(full, n)].reshape(-1, replay.shape[1])).mean(axis=1)
        after[full] = np.abs(after_a[np.repeat(full, n)].reshape(-1, replay.shape[1])).mean(axis=1)
    bounds = np.concatenate([[0], np.cumsum(n)])
    for i in np.flatnonzero(~full & (n > 0)):
        before[i] = np.abs(before_a[bounds[i]:bounds[i + 1]]).mean()
        after[i] = np.abs(after_a[bounds[i]:bounds[i + 1]]).mean()
    return {"replayed": (c["id"][r].astype(np.int64), bounds.astype(np.int64)), "arousal_before": before,
            "arousal_after": after, "downscaled": (live & ~salient).sum(axis=1).astype(np.int64),
            "reboosted": (live & salient).sum(axis=1).astype(np.int64)}
