"""Curator (SPEC §7): counter emotional lock-in by rebalancing, re-evaluating and consolidating.

The formulas of the spec come first, then the pass (`passes`, batched over the Golems due).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np


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


def curator_weights(pleasures: np.ndarray, arousals: np.ndarray, tagged: np.ndarray,
                    mean_valence: float, valence_correction: float, arousal_correction: float,
                    minority_threshold: float = 0.5, high_arousal: float = 0.5) -> np.ndarray:
    """Per-entry curator weight: minority-sign entries 1 + |valence_correction| when the batch is
    lopsided (|mean valence| > 0.5); entries with A > 0.5 get 1 + arousal_correction (< 1)."""
    p = np.asarray(pleasures, dtype=np.float64)
    tagged = np.asarray(tagged, dtype=bool)
    minority = tagged & (abs(mean_valence) > minority_threshold) & (p != 0) & ((p > 0) != (mean_valence > 0))
    w = np.where(minority, 1.0 + abs(valence_correction), 1.0)
    return np.where(tagged & (np.asarray(arousals, dtype=np.float64) > high_arousal), w * (1.0 + arousal_correction), w)


# --- the pass ---------------------------------------------------------------------------------

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
    min_age_days and not yet consolidated (each group becomes one lesson), by (scope, topic)."""
    old = (now_ms - created_ms) > min_age_days * DAY_MS
    idx = np.flatnonzero(old & ~consolidated & (category == gm.CATEGORIES.index("episode")))
    idx = idx[np.lexsort((idx, topic[idx], scope[idx]))]
    key_change = (np.diff(scope[idx]) != 0) | (np.diff(topic[idx]) != 0)
    return [grp for grp in np.split(idx, np.flatnonzero(key_change) + 1) if grp.size >= min_entries]


def curate(mind, g: int, now_ms: int) -> dict:
    """One curator pass for Golem g (SPEC §7); returns the figures of its `events` row."""
    return passes(mind, np.array([g]), now_ms)[0]


def passes(mind, golems: np.ndarray, now_ms: int) -> list[dict]:
    """Curator passes for `golems` (ascending ids); returns the figures of their `events` rows.

    A pass reads and writes its own Golem's slab only, so the lessons of all of them are written
    in one batch (ids in Golem order, as passes one after the other would number them) between
    consolidation and the heat / reflex step, which sees them as it would after a single pass.
    """
    runs = [_rebalance(mind, int(g), now_ms) for g in golems]
    lesson_ids = _write_lessons(mind, now_ms, [(int(g), lessons) for g, (_, _, lessons) in zip(golems, runs)])
    return [_finish_pass(mind, int(g), now_ms, slots, figures, ids)
            for g, (figures, slots, _), ids in zip(golems, runs, lesson_ids)]


def _rebalance(mind, g: int, now_ms: int):
    """Steps 1-4 of a pass: (figures so far, the slab's live slots, [(anchor, members)] to consolidate)."""
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
        w = curator_weights(c["p"][recent], c["a"][recent], c["has_tag"][recent], mean_v, vc, ac, cu.minority_threshold,
                            cfg.arousal.high_band)
        c["curator_weight"][recent] = w
        n_reweighted = int((w != 1.0).sum())
    # 2. re-evaluate arousal-biased insights when calm: the counterfactual re-run without the mood's bias
    n_reeval = n_contra = 0
    if pop.pad[g, 1] < cu.calm_arousal:
        biased = slots[c["arousal_bias"][slots] & (c["category"][slots] == gm.CATEGORIES.index("insight"))]
        agree = np.sign(c["outcome"][biased]) == np.sign(c["raw_outcome"][biased])
        conf = c["confidence"][biased].astype(np.float64)   # gm.propagate_confidence, entry by entry
        c["confidence"][biased] = np.minimum(1.0, np.maximum(0.0, np.where(
            agree, conf + cfg.confidence.validation, conf - cfg.confidence.contradiction)))
        n_contra = int((~agree).sum())
        c["outcome"][biased] = c["raw_outcome"][biased]
        c["arousal_bias"][biased] = False
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
    figures = {"n_entries": int(recent.size), "n_tagged": int(tagged.size), "mean_valence": mean_v, "mean_arousal": mean_a,
               "valence_correction": vc, "arousal_correction": ac, "reweighted": n_reweighted, "reevaluated": n_reeval,
               "reevaluation_contradicted": n_contra, "promoted": int(up.sum()), "demoted": int(down.sum()),
               "archived": int(archive.size)}
    return figures, slots, lessons


def _finish_pass(mind, g: int, now_ms: int, slots: np.ndarray, figures: dict, lesson_ids: list[int]) -> dict:
    """Step 5 of a pass, after the lessons are in: reflex candidates, heat, low-confidence flags."""
    gr, cfg = mind.gr, mind.cfg
    c = gr.cols
    c["heat"][slots] = heat(c["access_count"][slots].astype(np.float64))
    c["low_conf"][slots] = (c["confidence"][slots] < cfg.confidence.low_flag) & (c["access_count"][slots] >= cfg.confidence.low_flag_accesses)
    props = reflex.proposals(gr, g, now_ms, cfg.reflex.promotion_min, cfg.reflex.promotion_window_days)
    applied = cfg.reflex.promotion == "auto"
    if applied and props.size:
        reflex.promote(gr, props)
    mind.pop.curator_last_ms[g] = now_ms
    return dict(figures, lessons=lesson_ids, reflex_proposals=c["id"][props].tolist(), reflex_applied=bool(applied and props.size),
                low_confidence=int(c["low_conf"][slots].sum()), balance=bool(cfg.curator.balance))


def _write_lessons(mind, now_ms: int, lessons: list[tuple[int, list]]) -> list[list[int]]:
    """One lesson entry per consolidated group, framed on its highest-salience episode, for every
    (Golem, [(anchor, members)]) in one write; returns each Golem's lesson ids."""
    out = [[] for _ in lessons]
    flat = [(i, g, j, anchor, members) for i, (g, ls) in enumerate(lessons) for j, (anchor, members) in enumerate(ls)]
    if not flat:
        return out
    from golem.memory_writer import KINDS, Candidates, write
    gr, cfg = mind.gr, mind.cfg
    c = gr.cols
    golem = np.array([g for _, g, _, _, _ in flat], dtype=np.int64)
    anchor = np.array([a for _, _, _, a, _ in flat], dtype=np.int64)
    mean_outcome = np.array([float(c["outcome"][m].mean()) for *_, m in flat])
    cand = Candidates()
    cand.add(gr.emb[anchor].astype(np.float64), [mind.topic_name(t) for t in c["topic"][anchor].tolist()],
             p=c["p"][anchor].astype(np.float64), a=c["a"][anchor].astype(np.float64), d=c["d"][anchor].astype(np.float64),
             has_tag=c["has_tag"][anchor], emotion=c["emotion"][anchor], label=c["label"][anchor],
             value=1.0, pnl=0.0, signals=0, provenance=-1, tick=mind.pop.tick[golem], flashbulb=False,
             first_sighting=True, force_internal=False, arousal_bias=False, golem=golem, scope=c["scope"][anchor],
             seq=50 + np.array([j for _, _, j, _, _ in flat]), kind=KINDS.index("lesson"), role=2,
             category=gm.CATEGORIES.index("lesson"), decay_class=gm.REGIME, source_conf=cfg.confidence.inferred,
             importance=np.array([float(c["importance"][m].max()) for *_, m in flat]), outcome=mean_outcome,
             has_outcome=np.array([bool(c["has_outcome"][m].any()) for *_, m in flat]), event_kind="", force=True,
             raw_outcome=mean_outcome, regime=c["regime"][anchor])
    rows = write(cfg, gr, cand, now_ms)
    if rows is None:
        return out
    # each Golem's written ids in order, matched with its lessons in order (a refused write
    # shifts the match, as it did one Golem at a time)
    for i, (g, ls) in enumerate(lessons):
        ids = rows["id"][rows["golem"] == g].tolist()
        for (_, members), eid in zip(ls, ids):
            gr.links[eid] = tuple(c["id"][members].tolist())
        out[i] = ids
    rows["clade"] = mind.pop.clade[rows["golem"]]
    mind.pending_entries.append(rows)
    return out
