"""Contrarian retrieval (SPEC §4.4): every 100 ticks, look for what the mood is hiding.

The query flips the sign of the current pleasure and admits only entries of the opposite valence
sign with confidence >= 0.6. The top 3 are kept apart as a "potentially overlooked" section that
the next DECIDING must weigh explicitly; the decision records whether they changed it.
"""
from __future__ import annotations

import numpy as np

from golem import retrieval as rt


def pass_(mind, ix: np.ndarray, query: np.ndarray, pad: np.ndarray, now_ms: int) -> dict:
    """Run the contrarian query for Golems ix; stores their overlooked sections, returns the
    event payloads as columns (a list or array per key, one row per Golem)."""
    cfg, pop, gr = mind.cfg, mind.pop, mind.gr
    flipped = pad.copy()
    flipped[:, 0] = -flipped[:, 0]
    sign = np.where(pad[:, 0] >= 0, -1, 1).astype(np.int8)   # entries of the opposite valence sign
    res = rt.retrieve(gr, ix, query, flipped, now_ms, mind.prm, k=cfg.contrarian.top_k,
                      min_conf=cfg.contrarian.min_confidence, valence_sign=sign)
    pop.contrarian_pending[ix] = res.slots
    pop.contrarian_from[ix] = pop.tick[ix]
    found = res.slots >= 0
    ids = gr.cols["id"][np.maximum(res.slots, 0)]
    return {"ids": [row[keep].tolist() for row, keep in zip(ids, found)], "mood_p": pad[:, 0].astype(np.float64),
            "valence_sign": sign.astype(np.int64), "pool_n": res.pool[:, 0].astype(np.int64)}


def weigh(mind, ix: np.ndarray, slots_served: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Memory signal with the pending overlooked section added (weight = mean served score)."""
    c = mind.gr.cols
    pend = mind.pop.contrarian_pending[ix]
    live = (pend >= 0) & (c["id"][np.maximum(pend, 0)] >= 0)
    safe = np.maximum(pend, 0)
    has_out = live & c["has_outcome"][safe]
    served = slots_served >= 0
    n_served = served.sum(axis=1, keepdims=True)
    mean_score = np.where(n_served > 0, np.where(served, scores, 0.0).sum(axis=1, keepdims=True) / np.maximum(n_served, 1),
                          np.nan)   # nothing served: NaN, as nanmean gives, without its warning
    w_extra = np.where(has_out, mean_score if slots_served.size else 0.0, 0.0)
    w_extra = np.nan_to_num(w_extra) * np.where(has_out, c["confidence"][safe], 0.0)
    return w_extra, np.where(has_out, c["outcome"][safe], 0.0)
