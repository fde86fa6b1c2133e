"""Curator (SPEC §7): counter emotional lock-in by rebalancing, re-evaluating and consolidating.

The pass itself is in `golem.curation`; this module holds the formulas of the spec.
"""
from __future__ import annotations

from collections.abc import Sequence


def emotional_balance(pleasures: Sequence[float], arousals: Sequence[float], n_total: int,
                      valence_gain: float = 0.4, arousal_floor: float = 0.3,
                      arousal_gain: float = 0.3) -> tuple[float, float]:
    """(valence_correction, arousal_correction) over the entries since the last pass.

    Only tagged entries contribute P and A, but every entry counts in n: untagged ones dilute the
    mean toward neutral. valence_correction = -mean_valence * 0.4;
    arousal_correction = max(mean_arousal - 0.3, 0) * -0.3.
    """
    n = max(n_total, 1)
    mean_valence = sum(pleasures) / n
    mean_arousal = sum(arousals) / n
    return -mean_valence * valence_gain, max(mean_arousal - arousal_floor, 0.0) * -arousal_gain


def curator_weights(pleasures: Sequence[float], arousals: Sequence[float], tagged: Sequence[bool],
                    mean_valence: float, valence_correction: float, arousal_correction: float,
                    minority_threshold: float = 0.5, high_arousal: float = 0.5) -> list[float]:
    """Per-entry curator weight: minority-sign entries 1 + |valence_correction| when the batch is
    lopsided (|mean valence| > 0.5); entries with A > 0.5 get 1 + arousal_correction (< 1)."""
    out = []
    lopsided = abs(mean_valence) > minority_threshold
    for p, a, t in zip(pleasures, arousals, tagged):
        w = 1.0
        if t and lopsided and p != 0 and (p > 0) != (mean_valence > 0):
            w *= 1.0 + abs(valence_correction)
        if t and a > high_arousal:
            w *= 1.0 + arousal_correction
        out.append(w)
    return out


# --- the pass ---------------------------------------------------------------------------------

import numpy as np  # noqa: E402

from golem import grimoire as gm  # noqa: E402
from golem import reflex  # noqa: E402

DAY_MS = 86_400_000


def heat(access_count: np.ndarray) -> np.ndarray:
    """Log-scaled access count in [0, 1] (1 for the most-recalled entry of the slab)."""
    top = np.log1p(access_count.max()) if access_count.size else 0.0
    return np.log1p(access_count) / top if top > 0 else np.zeros(access_count.shape)


def consolidation_groups(scope: np.ndarray, topic: np.ndarray, created_ms: np.ndarray, consolidated: np.ndarray,
                         category: np.ndarray, now_ms: int, min_entries: int = 3, min_age_days: float = 30.0):
    """Indices of groups of >= min_entries episodes sharing scope + topic, every one older than
    min_age_days and not yet consolidated (each group becomes one lesson)."""
    old = (now_ms - created_ms) > min_age_days * DAY_MS
    ok = old & ~consolidated & (category == gm.CATEGORIES.index("episode"))
    groups = []
    keys = {}
    for i in np.flatnonzero(ok):
        keys.setdefault((int(scope[i]), int(topic[i])), []).append(int(i))
    for key in sorted(keys):
        if len(keys[key]) >= min_entries:
            groups.append(np.array(keys[key], dtype=np.int64))
    return groups


def curate(mind, g: int, now_ms: int) -> dict:
    """One curator pass for Golem g (SPEC §7); returns the figures of its `events` row."""
    gr, cfg, pop = mind.gr, mind.cfg, mind.pop
    cu = cfg.curator
    c = gr.cols
    sl = gr.slab(g)
    slots = np.flatnonzero(c["id"][sl] >= 0) + sl.start
    recent = slots[c["created_ms"][slots] > pop.curator_last_ms[g]]
    tagged = recent[c["has_tag"][recent]]
    # 1. emotional balance over the entries since the last pass
    vc, ac = emotional_balance(c["p"][tagged].astype(float).tolist(), c["a"][tagged].astype(float).tolist(),
                               int(recent.size), cu.valence_gain, cu.arousal_floor, cu.arousal_gain)
    mean_v = float(c["p"][tagged].astype(np.float64).sum()) / max(int(recent.size), 1)
    mean_a = float(c["a"][tagged].astype(np.float64).sum()) / max(int(recent.size), 1)
    n_reweighted = 0
    if cu.balance and recent.size:
        w = curator_weights(c["p"][recent].astype(float), c["a"][recent].astype(float), c["has_tag"][recent],
                            mean_v, vc, ac, cu.minority_threshold, cfg.arousal.high_band)
        w = np.asarray(w)
        c["curator_weight"][recent] = w
        n_reweighted = int((w != 1.0).sum())
    # 2. re-evaluate arousal-biased insights when calm
    n_reeval = n_contra = 0
    if pop.pad[g, 1] < cu.calm_arousal:
        biased = slots[c["arousal_bias"][slots] & (c["category"][slots] == gm.CATEGORIES.index("insight"))]
        for s in biased:
            agree = np.sign(c["outcome"][s]) == np.sign(c["raw_outcome"][s])
            c["confidence"][s] = gm.propagate_confidence(float(c["confidence"][s]), bool(agree),
                                                         cfg.confidence.validation, cfg.confidence.contradiction)
            n_contra += int(not agree)
            c["outcome"][s] = c["raw_outcome"][s]   # the counterfactual re-run without the mood's bias
            c["arousal_bias"][s] = False
        n_reeval = int(biased.size)
    # 3. promotion / demotion by weighted curator score, and archiving of expired entries
    protected = (c["decay_class"][slots] == gm.STRUCTURAL) | c["flashbulb"][slots] | (c["salience"][slots] >= 0.7)
    score = c["curator_weight"][slots] * c["importance"][slots] * c["confidence"][slots] * (1 + c["salience"][slots])
    up = ~protected & (score >= cu.promote_score) & (c["decay_class"][slots] < gm.REGIME)
    down = ~protected & (score <= cu.demote_score) & (c["decay_class"][slots] > gm.EPHEMERAL)
    c["decay_class"][slots[up]] += 1
    c["decay_class"][slots[down]] -= 1
    changed = slots[up | down]
    if changed.size:
        g_cfg = cfg.grimoire
        class_days = np.array([g_cfg.ephemeral_days, g_cfg.tactical_days, g_cfg.regime_conditional_days, np.inf])
        # keep the tier TTL the entry was written with: window / (1 + salience) / ... is its max(class, ttl)
        old_base = c["window_ms"][changed] / DAY_MS / (1 + c["salience"][changed])
        new_base = np.maximum(class_days[c["decay_class"][changed]], np.minimum(old_base, 30.0))
        c["window_ms"][changed] = new_base * (1 + c["salience"][changed]) * DAY_MS
    expired = (now_ms - c["last_access_ms"][slots]) >= 2 * c["window_ms"][slots]
    archive = slots[expired & ~protected & (c["status"][slots] != gm.ARCHIVED)]
    c["status"][archive] = gm.ARCHIVED
    # 4. consolidation into lessons
    lessons = []
    groups = consolidation_groups(c["scope"][slots], c["topic"][slots], c["created_ms"][slots], c["consolidated"][slots],
                                  c["category"][slots], now_ms, cu.consolidation_min, cu.consolidation_age_days)
    for grp in groups:
        members = slots[grp]
        anchor = members[np.lexsort((members, -c["salience"][members]))[0]]
        lessons.append((anchor, members))
        c["consolidated"][members] = True
    lesson_ids = _write_lessons(mind, g, now_ms, lessons)
    # 5. reflex candidates, heat, low-confidence flags
    c["heat"][slots] = heat(c["access_count"][slots].astype(np.float64))
    c["low_conf"][slots] = (c["confidence"][slots] < cfg.confidence.low_flag) & (c["access_count"][slots] >= cfg.confidence.low_flag_accesses)
    props = reflex.proposals(gr, g, now_ms, cfg.reflex.promotion_min, cfg.reflex.promotion_window_days)
    applied = cfg.reflex.promotion == "auto"
    if applied and props.size:
        reflex.promote(gr, props)
    pop.curator_last_ms[g] = now_ms
    return {"n_entries": int(recent.size), "n_tagged": int(tagged.size), "mean_valence": mean_v, "mean_arousal": mean_a,
            "valence_correction": vc, "arousal_correction": ac, "reweighted": n_reweighted, "reevaluated": n_reeval,
            "reevaluation_contradicted": n_contra, "promoted": int(up.sum()), "demoted": int(down.sum()),
            "archived": int(archive.size), "lessons": lesson_ids, "reflex_proposals": [int(x) for x in c["id"][props]],
            "reflex_applied": bool(applied and props.size), "low_confidence": int(c["low_conf"][slots].sum()),
            "balance": bool(cu.balance)}


def _write_lessons(mind, g: int, now_ms: int, lessons) -> list[int]:
    """One lesson entry per consolidated group, framed on its highest-salience episode."""
    if not lessons:
        return []
    from golem.memory_writer import KINDS, Candidates, write
    gr, cfg = mind.gr, mind.cfg
    c = gr.cols
    cand = Candidates()
    for j, (anchor, members) in enumerate(lessons):
        cand.add(gr.emb[anchor:anchor + 1].astype(np.float64), [mind.topic_name(int(c["topic"][anchor]))],
                 p=float(c["p"][anchor]), a=float(c["a"][anchor]), d=float(c["d"][anchor]),
                 has_tag=bool(c["has_tag"][anchor]), emotion=int(c["emotion"][anchor]), label=int(c["label"][anchor]),
                 value=1.0, pnl=0.0, signals=0, provenance=-1, tick=int(mind.pop.tick[g]), flashbulb=False,
                 first_sighting=True, force_internal=False, arousal_bias=False, golem=g, scope=int(c["scope"][anchor]),
                 seq=50 + j, kind=KINDS.index("lesson"), role=2, category=gm.CATEGORIES.index("lesson"),
                 decay_class=gm.REGIME, source_conf=cfg.confidence.inferred,
                 importance=float(c["importance"][members].max()), outcome=float(c["outcome"][members].mean()),
                 has_outcome=bool(c["has_outcome"][members].any()), event_kind="", force=True,
                 raw_outcome=float(c["outcome"][members].mean()),
                 regime=int(c["regime"][anchor]))
    rows = write(cfg, gr, cand, now_ms)
    if rows is None:
        return []
    for (anchor, members), eid in zip(lessons, rows["id"]):
        gr.links[int(eid)] = tuple(int(x) for x in c["id"][members])
    rows["clade"] = mind.pop.clade[rows["golem"]]
    mind.pending_entries.append(rows)
    return [int(x) for x in rows["id"]]
