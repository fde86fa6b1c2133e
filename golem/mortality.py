"""Mortality (SPEC §10): vitality, phases, terminal equanimity and the death reflection."""
from __future__ import annotations

import numpy as np

from golem.population import PATTERNS_PER_REGIME

#: The nine categories of a death reflection; the starred ones (3, 4, 5) weigh most.
DEATH_CATEGORIES = (
    "what I did well", "what worked by luck", "what I got wrong", "what confused me",
    "what I suspect but can't prove", "what I would tell a sibling", "which memories misled me",
    "how I felt at the end", "what the market taught me",
)
HEAVY = (2, 3, 4)


def vitality(budget, budget0, value, value0) -> np.ndarray:
    return np.minimum(budget / budget0, value / value0)


def phase_of(v, cfg) -> np.ndarray:
    """0 thriving > 0.7, 1 stable > 0.4, 2 conservation > 0.2, 3 declining > 0.1, 4 terminal."""
    m = cfg.mortality
    return np.where(v > m.thriving, 0, np.where(v > m.stable, 1, np.where(v > m.conservation, 2,
                    np.where(v > m.declining, 3, 4)))).astype(np.int8)   # the first band that holds


#: exposure scale per phase: conservation halves risk, declining quarters it, terminal stops trading
PHASE_EXPOSURE = np.array([1.0, 1.0, 0.5, 0.25, 0.0, 0.0])


def terminal_drift(pad: np.ndarray, drift: float) -> np.ndarray:
    """Equanimity: A and D move toward 0, P rises a little (no anxiety at the end)."""
    out = pad.copy()
    out[:, 1] *= 1.0 - drift
    out[:, 2] *= 1.0 - drift
    out[:, 0] = np.minimum(1.0, out[:, 0] + drift * (1.0 - out[:, 0]) * 0.2)
    return out


def regime_valences(som_sum: np.ndarray, som_cnt: np.ndarray, regime_names: tuple[str, ...],
                    per_regime: int = PATTERNS_PER_REGIME) -> dict[str, float]:
    """Mean valence of the Golem's episodes per regime it lived through, from its somatic markers
    (a pattern's valence weighted by its episode count; patterns are regime-major)."""
    s = np.asarray(som_sum, dtype=np.float64)
    c = np.asarray(som_cnt, dtype=np.float64)
    out = {}
    for r, name in enumerate(regime_names):
        cnt = c[r * per_regime:(r + 1) * per_regime]
        if cnt.sum() > 0:
            out[name] = float((s[r * per_regime:(r + 1) * per_regime] * cnt).sum() / cnt.sum())
    return out


def death_reflection(entries: dict[str, np.ndarray], emb: np.ndarray, topics: list[str], *, pnl: float, cause: str,
                     flashbulbs: int, emotions: dict[str, int], regime_valence: dict[str, float], pad,
                     low_flag: float = 0.5, low_accesses: int = 3, similar: float = 0.8,
                     max_pairs: int = 256) -> tuple[dict[str, str], dict[int, list[int]]]:
    """The nine-category reflection a dying Golem writes from its own history (SPEC §10).

    `entries` are the columns of its own live memories (outcome, has_outcome, confidence,
    acted_on_count, access_count, flashbulb, arousal_bias), `emb` their unit embeddings, `topics`
    their topic names; `flashbulbs` is how many it had in its life, `emotions` its emotion counts,
    `regime_valence` how each regime felt (`regime_valences`), `pad` its affect at the end.
    Returns the text of each category and, per category, the memories it is about (indices into
    `entries`): what the reflection entry is made of."""
    out, acts, conf = entries["outcome"], entries["acted_on_count"], entries["confidence"]
    acc, has_out = entries["access_count"], entries["has_outcome"]
    subjects: dict[int, list[int]] = {}

    def pick(mask, key):                   # the first index of the largest key among mask
        idx = np.flatnonzero(mask)
        return int(idx[np.argmax(key[idx])]) if idx.size else -1
    worst = min(regime_valence, key=lambda k: (regime_valence[k], k)) if regime_valence else "none"
    best = max(regime_valence, key=lambda k: (regime_valence[k], k)) if regime_valence else "none"
    texts = {}
    # 0: what I did well: the memory it acted on most that kept its confidence
    i = pick(has_out & (acts > 0) & (conf >= low_flag), acts * conf)
    texts[DEATH_CATEGORIES[0]] = (f"trusted {topics[i]} ({int(acts[i])} acts, confidence {conf[i]:.2f}); P&L {pnl:+.2f}"
                                  if i >= 0 else f"nothing I acted on kept its confidence; P&L {pnl:+.2f}")
    subjects[0] = [i] if i >= 0 else []
    # 1: what worked by luck: memories that paid although their evidence stayed weak
    lucky = has_out & (out > 0) & (acts > 0) & (conf < low_flag)
    i = pick(lucky, acts.astype(np.float64))
    texts[DEATH_CATEGORIES[1]] = (f"{int(lucky.sum())} memories paid though their confidence stayed below {low_flag:.2f}, "
                                  f"most of all {topics[i]}" if i >= 0 else "no gain came without evidence")
    subjects[1] = [i] if i >= 0 else []
    # 2 (heavy): what I got wrong: the memories it acted on that were contradicted below the flag
    wrong = (acts > 0) & (conf < low_flag)
    i = pick(wrong, -conf.astype(np.float64))
    texts[DEATH_CATEGORIES[2]] = (f"held exposure into {worst}; died of {cause}; " +
                                  (f"{int(wrong.sum())} memories I acted on fell below confidence {low_flag:.2f}, "
                                   f"worst {topics[i]} ({conf[i]:.2f})" if i >= 0 else "no memory I acted on was contradicted"))
    subjects[2] = [i] if i >= 0 else []
    # 3 (heavy): what confused me: the most similar pair of memories whose outcomes went opposite ways
    a_, b_, x = _confusing_pair(emb, out, has_out, acc, similar, max_pairs)
    texts[DEATH_CATEGORIES[3]] = (f"{topics[a_]} and {topics[b_]} looked alike (cosine {x:.2f}) and went opposite ways "
                                  f"({out[a_]:+.2f} vs {out[b_]:+.2f})" if a_ >= 0
                                  else "no two similar situations went opposite ways")
    subjects[3] = [a_, b_] if a_ >= 0 else []
    # 4 (heavy): what I suspect but can't prove: memories recalled often that never earned confidence
    flagged = (conf < low_flag) & (acc >= low_accesses)
    i = pick(flagged, acc.astype(np.float64))
    unchecked = int(entries["arousal_bias"].sum())
    texts[DEATH_CATEGORIES[4]] = ((f"{int(flagged.sum())} memories I kept recalling never earned confidence, most of all "
                                   f"{topics[i]} ({int(acc[i])} recalls)" if i >= 0 else
                                   "every memory I kept recalling earned its confidence") +
                                  f"; {unchecked} insights formed in arousal were never re-checked calm")
    subjects[4] = [i] if i >= 0 else []
    # 5: what I would tell a sibling
    texts[DEATH_CATEGORIES[5]] = f"cut exposure when {worst} begins; {best} was where it paid"
    subjects[5] = []
    # 6: which memories misled me: the flashbulbs, by the share of recall they took
    fb = entries["flashbulb"].astype(bool)
    share = float(acc[fb].sum()) / max(float(acc.sum()), 1.0)
    i = pick(fb, acc.astype(np.float64))
    texts[DEATH_CATEGORIES[6]] = f"{flashbulbs} flashbulb memories took {share:.0%} of my recalls"
    subjects[6] = [i] if i >= 0 else []
    # 7: how I felt at the end
    top = max(emotions, key=lambda k: (emotions[k], k)) if emotions else "neutral"
    texts[DEATH_CATEGORIES[7]] = f"mostly {top}; at the end P {pad[0]:+.2f} A {pad[1]:+.2f} D {pad[2]:+.2f}"
    subjects[7] = []
    # 8: what the market taught me: how each regime felt
    texts[DEATH_CATEGORIES[8]] = (", ".join(f"{k} {v:+.2f}" for k, v in sorted(regime_valence.items(), key=lambda kv: (-kv[1], kv[0])))
                                  if regime_valence else "nothing: I saw no regime long enough")
    subjects[8] = []
    return texts, subjects


def _confusing_pair(emb: np.ndarray, out: np.ndarray, has_out: np.ndarray, acc: np.ndarray, similar: float,
                    max_pairs: int) -> tuple[int, int, float]:
    """The most similar pair (cosine >= `similar`) of memories whose outcomes went opposite ways,
    among the `max_pairs` most recalled with an outcome: (i, j, cosine), or (-1, -1, -inf)."""
    cand = np.flatnonzero(has_out & (out != 0))
    cand = cand[np.argsort(-acc[cand], kind="stable")[:max_pairs]]
    if cand.size > 1:
        cos = emb[cand].astype(np.float64) @ emb[cand].astype(np.float64).T
        opposite = np.sign(out[cand])[:, None] != np.sign(out[cand])[None, :]
        cos = np.where(opposite & np.triu(np.ones(cos.shape, bool), 1) & (cos >= similar), cos, -np.inf)
        k = int(np.argmax(cos))
        if np.isfinite(cos.flat[k]):
            return int(cand[k // cand.size]), int(cand[k % cand.size]), float(cos.flat[k])
    return -1, -1, -np.inf


def reflection_embedding(base: np.ndarray, emb: np.ndarray, subjects: dict[int, list[int]],
                         heavy_weight: float = 2.0) -> np.ndarray:
    """The death reflection entry's direction: its base tokens plus the memories each category is
    about, those of the heavy categories (3, 4, 5) `heavy_weight` times (not normalised)."""
    v = np.asarray(base, dtype=np.float64).copy()
    for k, rows in subjects.items():
        w = heavy_weight if k in HEAVY else 1.0
        for r in rows:
            v += w * emb[r].astype(np.float64)
    return v
