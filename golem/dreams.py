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

REM_FACTOR = (1.0 / 3.0) ** (1.0 / 3.0)


def rem_depotentiate(arousal: float | np.ndarray, cycles: int = 1):
    """Arousal after `cycles` REM cycles."""
    return arousal * REM_FACTOR ** cycles


def select_replay(gr: Grimoire, golems: np.ndarray, now_ms: int, budget: int, half_life_days: float = 3.0,
                  boost: float = 0.3, score_fn=None) -> np.ndarray:
    """NREM selection, one row per Golem: the top `budget` live entries of its slab by
    intensity_at(now) x importance (ties: slot), or by `score_fn(slots)` (HDC similarity to a
    high-arousal prototype under somatic_hdc); -1 pads a slab with fewer live entries.

    By intensity x importance it is one pass over each slab (`_replay_rows`): each score with the
    scalar formula's bits (`pad.emotional_intensity_at`) and a sorted list of the best `budget` so far."""
    c = gr.cols
    golems = np.ascontiguousarray(golems, dtype=np.int64)
    k = min(budget, gr.capacity)
    if k <= 0:
        return np.zeros((golems.size, 0), dtype=np.int64)
    if score_fn is None:
        return _replay_rows(golems, gr.capacity, gr.count, c["id"], c["status"], c["i0"], c["created_ms"],
                            c["last_react_ms"], c["reactivated"], c["has_tag"], c["importance"], np.int64(now_ms),
                            half_life_days * DAY_MS, float(boost), k, 2.0)
    slots = golems[:, None] * gr.capacity + np.arange(gr.capacity)
    live = gr.live_rows(golems) & (c["status"][slots] != ARCHIVED)
    scores = np.zeros(slots.shape)   # fingerprints are large (1.25 KB an entry): slab by slab
    for i in range(golems.size):
        scores[i, live[i]] = score_fn(slots[i, live[i]])
    # rank by (-score, slot); the dead slots last (every live score is >= 0). The top k of a row:
    # every key below its k-th smallest, then ties at the k-th in slot order (no full sort)
    key = np.where(live, -scores, np.inf)
    kth = np.partition(key, k - 1, axis=1)[:, k - 1:k]
    below = key < kth
    tie = key == kth
    top = below | (tie & (np.cumsum(tie, axis=1) <= k - below.sum(axis=1, keepdims=True)))
    col = np.nonzero(top)[1].reshape(-1, k)                  # k per row, in slot order
    order = np.take_along_axis(col, np.argsort(np.take_along_axis(key, col, axis=1), axis=1, kind="stable"), axis=1)
    return np.where(np.take_along_axis(live, order, axis=1), np.take_along_axis(slots, order, axis=1), -1)


@njit(cache=True, inline="always")
def _charge(i0, created_ms, reactivated, last_react_ms, now_ms, h, boost, two):
    """`pad.emotional_intensity_at` in a kernel, its bits (a reactivation time < 0 is none)."""
    x = np.float64(i0) * two ** (-(now_ms - created_ms) / h)
    x = x + (boost * two ** (-(now_ms - last_react_ms) / h) if reactivated and last_react_ms >= 0 else 0.0)
    return x if x < 1.0 else 1.0           # Python's min(1.0, x)


@njit(cache=True)
def _replay_rows(golems, cap, count, ids, status, i0, created_ms, last_react_ms, reactivated, has_tag, importance,
                 now_ms, h, boost, k, two):
    """`select_replay` by intensity x importance: per slab, the live entries (below the count,
    with an id, not archived) keyed by -score, the first k by (key, slot), -1 after the live ones.
    The intensity is `pad.emotional_intensity_at`'s bits (0 untagged): libm's pow as Python's `**`,
    not numpy's SIMD pow, which differs in the last bit for a few % of ages; `two` is 2.0 passed
    in, so that LLVM keeps pow(2, x) a pow instead of making it exp2."""
    out = np.full((golems.size, k), -1, np.int64)
    keys = np.empty(k)
    for r in range(golems.size):
        base = golems[r] * cap
        n = 0
        for j in range(count[golems[r]]):
            s = base + j
            if ids[s] < 0 or status[s] == ARCHIVED:
                continue
            charge = _charge(i0[s], created_ms[s], reactivated[s], last_react_ms[s], now_ms, h, boost, two) if has_tag[s] else 0.0
            key = -(charge * np.float64(importance[s]))
            if n == k and not key < keys[k - 1]:
                continue                                 # an earlier slot keeps a tie
            p = n if n < k else k - 1
            while p > 0 and key < keys[p - 1]:
                keys[p], out[r, p] = keys[p - 1], out[r, p - 1]
                p -= 1
            keys[p], out[r, p] = key, s
            n = min(n + 1, k)
    return out


def dream(gr: Grimoire, g: int, now_ms: int, cfg, score_fn=None) -> dict:
    """One DREAMING tick for Golem g; returns the figures for the `events` row."""
    return dream_batch(gr, np.array([g]), now_ms, cfg, score_fn)[0]


def dream_batch(gr: Grimoire, golems: np.ndarray, now_ms: int, cfg, score_fn=None) -> list[dict]:
    """One DREAMING tick for each of `golems` at once (each touches its own slab only); returns
    the figures for their `events` rows."""
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
    ids = c["id"][r].tolist()
    downscaled = (live & ~salient).sum(axis=1).tolist()
    reboosted = (live & salient).sum(axis=1).tolist()
    return [{"replayed": ids[lo:hi], "arousal_before": b, "arousal_after": a, "downscaled": dn, "reboosted": up}
            for lo, hi, b, a, dn, up in zip(bounds[:-1].tolist(), bounds[1:].tolist(), before.tolist(), after.tolist(),
                                            downscaled, reboosted)]
