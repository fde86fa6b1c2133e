"""Dreams (SPEC §8): offline replay that consolidates knowledge and takes the heat out of feelings.

NREM replay picks the entries with the most emotional_intensity x importance and firms up their
confidence; REM depotentiation shrinks the arousal of their tags by r = (1/3)^(1/3) per cycle
(three cycles take 0.9 to 0.3) leaving confidence and content alone; synaptic homeostasis then
scales every importance down and restores the salient (>= 0.7) ones.
"""
from __future__ import annotations

import numpy as np

from golem.grimoire import ARCHIVED, DAY_MS, Grimoire

REM_FACTOR = (1.0 / 3.0) ** (1.0 / 3.0)


def rem_depotentiate(arousal: float | np.ndarray, cycles: int = 1):
    """Arousal after `cycles` REM cycles."""
    return arousal * REM_FACTOR ** cycles


def intensity_now(gr: Grimoire, slots: np.ndarray, now_ms: int, half_life_days: float, boost: float) -> np.ndarray:
    c = gr.cols
    h = half_life_days * DAY_MS
    base = c["i0"][slots] * 2.0 ** (-(now_ms - c["created_ms"][slots]) / h)
    lr = c["last_react_ms"][slots]
    bo = np.where(c["reactivated"][slots] & (lr >= 0), boost * 2.0 ** (-(now_ms - lr) / h), 0.0)
    return np.where(c["has_tag"][slots], np.minimum(1.0, base + bo), 0.0)


def select_replay(gr: Grimoire, g: int, now_ms: int, budget: int, half_life_days: float = 3.0,
                  boost: float = 0.3, score_fn=None) -> np.ndarray:
    """NREM selection: the top `budget` live entries by intensity_at(now) x importance (ties: slot),
    or by `score_fn(slots)` (HDC similarity to a high-arousal prototype under somatic_hdc)."""
    c = gr.cols
    sl = gr.slab(g)
    slots = np.flatnonzero((c["id"][sl] >= 0) & (c["status"][sl] != ARCHIVED)) + sl.start
    if slots.size == 0:
        return slots
    if score_fn is None:
        scores = intensity_now(gr, slots, now_ms, half_life_days, boost) * c["importance"][slots]
    else:
        scores = score_fn(slots)
    order = np.lexsort((slots, -scores))
    return slots[order[:budget]]


def dream(gr: Grimoire, g: int, now_ms: int, cfg, score_fn=None) -> dict:
    """One DREAMING tick for Golem g; returns the figures for the `events` row."""
    d = cfg.dream
    c = gr.cols
    replay = select_replay(gr, g, now_ms, d.replay_budget, cfg.decay.half_life_days, cfg.decay.reactivation_boost, score_fn)
    before_a = c["a"][replay].astype(np.float64)
    c["confidence"][replay] = np.minimum(1.0, c["confidence"][replay] + d.confidence_boost)
    tagged = replay[c["has_tag"][replay]]
    gr.set_tag_pad(tagged, a=rem_depotentiate(c["a"][tagged].astype(np.float64), d.rem_cycles))
    sl = gr.slab(g)
    live = np.flatnonzero(c["id"][sl] >= 0) + sl.start
    pre = c["importance"][live].copy()
    c["importance"][live] = pre * d.downscale
    salient = c["salience"][live] >= 0.7
    c["importance"][live[salient]] = pre[salient]
    # mean |A| of the replayed tags: REM takes the charge out whichever the arousal's sign
    return {"replayed": [int(x) for x in c["id"][replay]],
            "arousal_before": float(np.abs(before_a).mean()) if replay.size else 0.0,
            "arousal_after": float(np.abs(c["a"][replay]).mean()) if replay.size else 0.0, "downscaled": int((~salient).sum()),
            "reboosted": int(salient.sum())}
