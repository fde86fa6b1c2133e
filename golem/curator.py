"""Curator (SPEC §7): counter emotional lock-in by rebalancing, re-evaluating and consolidating.

The formulas of the spec come first, then the pass (`passes`, batched over the Golems due).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numba import njit


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
                    mean_valence, valence_correction, arousal_correction,
                    minority_threshold: float = 0.5, high_arousal: float = 0.5) -> np.ndarray:
    """Per-entry curator weight: minority-sign entries 1 + |valence_correction| when the batch is
    lopsided (|mean valence| > 0.5); entries with A > 0.5 get 1 + arousal_correction (< 1).
    The batch figures may be arrays that broadcast against the entries (one row per Golem)."""
    p = np.asarray(pleasures, dtype=np.float64)
    tagged = np.asarray(tagged, dtype=bool)
    minority = tagged & (np.abs(mean_valence) > minority_threshold) & (p != 0) & ((p > 0) != (np.asarray(mean_valence) > 0))
    w = np.where(minority, 1.0 + np.abs(valence_correction), 1.0)
    return np.where(tagged & (np.asarray(arousals, dtype=np.float64) > high_arousal), w * (1.0 + arousal_correction), w)


# --- the pass ---------------------------------------------------------------------------------

from golem import grimoire as gm  # noqa: E402
from golem import reflex  # noqa: E402

DAY_MS = 86_400_000


def heat(access_count: np.ndarray) -> np.ndarray:
    """Log-scaled access count in [0, 1] (1 for the most-recalled entry of the slab), for one
    slab or row by row for (slabs x entries)."""
    if access_count.size == 0:
        return np.zeros(access_count.shape)
    rows = np.atleast_2d(access_count)
    top = np.array([np.log1p(m) for m in rows.max(axis=1)])[:, None]   # one slab's top, as a scalar
    return np.where(top > 0, np.log1p(rows) / np.where(top > 0, top, 1.0), 0.0).reshape(access_count.shape)


@njit(cache=True)
def tiers(golems, cap, live, salience, decay_class, flashbulb, curator_weight, importance, confidence, window_ms,
          last_access_ms, status, now_ms, promote_score, demote_score, class_days):
    """Curator step 3 on the due Golems' slabs, in place: promotion/demotion of the decay class by
    the weighted curator score (with the window re-derived from the new class), then archiving of
    expired entries; returns the (promoted, demoted, archived) counts per Golem.

    Unprotected live entries only (structural, flashbulb or salience >= 0.7 are protected).
    score = weight * importance * confidence * (1 + salience) in float32 and compared in float32,
    window = max(class days, min(window / day / (1 + salience), 30)) * (1 + salience) * day in
    float64: the numpy expressions operation for operation (tests/test_curation.py keeps them as
    the reference), one pass over each slab instead of some twenty whole-slab arrays."""
    n = golems.size
    n_up = np.zeros(n, dtype=np.int64)
    n_down = np.zeros(n, dtype=np.int64)
    n_arch = np.zeros(n, dtype=np.int64)
    keep = np.float32(0.7)
    promote = np.float32(promote_score)     # a Python float against a float32 column: compared in float32
    demote = np.float32(demote_score)
    for r in range(n):
        base = golems[r] * cap
        for j in range(cap):
            if not live[r, j]:
                continue
            s = base + j
            sal = salience[s]
            dc = decay_class[s]
            if dc == gm.STRUCTURAL or flashbulb[s] or sal >= keep:
                continue
            one_sal = np.float32(1.0) + sal
            score = curator_weight[s] * importance[s] * confidence[s] * one_sal
            up = score >= promote and dc < gm.REGIME
            down = score <= demote and dc > gm.EPHEMERAL
            w = window_ms[s]
            if up or down:
                dc = dc + np.int8(up) - np.int8(down)
                decay_class[s] = dc
                w = max(class_days[dc], min(w / DAY_MS / np.float64(one_sal), 30.0)) * np.float64(one_sal) * DAY_MS
                window_ms[s] = w
                n_up[r] += up
                n_down[r] += down
            if np.float64(now_ms - last_access_ms[s]) >= 2.0 * w and status[s] != gm.ARCHIVED:
                status[s] = gm.ARCHIVED
                n_arch[r] += 1
    return n_up, n_down, n_arch


def consolidation_groups(scope: np.ndarray, topic: np.ndarray, created_ms: np.ndarray, consolidated: np.ndarray,
                         category: np.ndarray, now_ms: int, min_entries: int = 3, min_age_days: float = 30.0,
                         owner: np.ndarray | None = None):
    """Indices of groups of >= min_entries episodes sharing scope + topic, every one older than
    min_age_days and not yet consolidated (each group becomes one lesson), by (scope, topic).
    With `owner` (the Golem of each entry) groups never span owners and come owner by owner."""
    old = (now_ms - created_ms) > min_age_days * DAY_MS
    idx = np.flatnonzero(old & ~consolidated & (category == gm.CATEGORIES.index("episode")))
    own = np.zeros(idx.size, dtype=np.int64) if owner is None else owner[idx]
    order = np.lexsort((idx, topic[idx], scope[idx], own))
    idx, own = idx[order], own[order]
    key_change = (np.diff(own) != 0) | (np.diff(scope[idx]) != 0) | (np.diff(topic[idx]) != 0)
    return [grp for grp in np.split(idx, np.flatnonzero(key_change) + 1) if grp.size >= min_entries]


def curate(mind, g: int, now_ms: int) -> dict:
    """One curator pass for Golem g (SPEC §7); returns the figures of its `events` row."""
    return passes(mind, np.array([g]), now_ms)[0]


def passes(mind, golems: np.ndarray, now_ms: int) -> list[dict]:
    """Curator passes (SPEC §7) for `golems` (ascending ids) at once; returns the figures of their
    `events` rows.

    Every step works on a (Golems x capacity) copy of their slabs' columns, masked to the live
    entries, and writes whole rows back. A pass reads and writes its own Golem's slab only, so
    batching changes nothing: the lessons of all of them are written in one batch (ids in Golem
    order, as passes one after the other would number them) between consolidation and the heat /
    reflex step, which sees them.
    """
    gr, cfg, pop = mind.gr, mind.cfg, mind.pop
    cu = cfg.curator
    c = gr.cols
    golems = np.asarray(golems, dtype=np.int64)
    if golems.size == 0:
        return []
    n = golems.size
    slots = golems[:, None] * gr.capacity + np.arange(gr.capacity)    # one row per Golem's slab

    def rows(k: str) -> np.ndarray:
        """Column k of the due slabs (copying whole rows: far cheaper than gathering slots)."""
        return c[k].reshape(gr.n_golems, gr.capacity)[golems]

    def put(k: str, where: np.ndarray, values) -> None:
        """Write `values` into column k where `where` holds, row by row."""
        c[k].reshape(gr.n_golems, gr.capacity)[golems] = np.where(where, values, rows(k))

    live = (np.arange(gr.capacity) < gr.count[golems][:, None]) & (rows("id") >= 0)
    recent = live & (rows("created_ms") > pop.curator_last_ms[golems][:, None])
    n_recent = recent.sum(axis=1)
    # 1. emotional balance over the entries since the last pass, Golem by Golem on its tagged
    # entries in slot order (the sums are order-sensitive)
    ri = np.nonzero(recent)[0]                                 # the row of each recent entry
    tag = rows("has_tag")[recent]
    p, a = rows("p")[recent].astype(np.float64), rows("a")[recent].astype(np.float64)
    pt, at = p[tag], a[tag]
    bounds = np.concatenate([[0], np.cumsum(np.bincount(ri[tag], minlength=n))]).tolist()
    vc, ac, mean_v, mean_a = np.array([
        (*emotional_balance(pt[lo:hi].tolist(), at[lo:hi].tolist(), k, cu.valence_gain, cu.arousal_floor, cu.arousal_gain),
         float(pt[lo:hi].sum()) / max(k, 1), float(at[lo:hi].sum()) / max(k, 1))
        for lo, hi, k in zip(bounds[:-1], bounds[1:], n_recent.tolist())]).reshape(n, 4).T
    n_reweighted = np.zeros(n, dtype=np.int64)
    if cu.balance:
        w = curator_weights(p, a, tag, mean_v[ri], vc[ri], ac[ri], cu.minority_threshold, cfg.arousal.high_band)
        c["curator_weight"][slots[recent]] = w
        n_reweighted = np.bincount(ri[w != 1.0], minlength=n)
    # 2. re-evaluate arousal-biased insights when calm: the counterfactual re-run without the mood's bias
    calm = pop.pad[golems, 1] < cu.calm_arousal
    biased = live & calm[:, None] & rows("arousal_bias") & (rows("category") == gm.CATEGORIES.index("insight"))
    b = slots[biased]
    agree = np.sign(c["outcome"][b]) == np.sign(c["raw_outcome"][b])
    conf = c["confidence"][b].astype(np.float64)   # gm.propagate_confidence, entry by entry
    c["confidence"][b] = np.minimum(1.0, np.maximum(0.0, np.where(
        agree, conf + cfg.confidence.validation, conf - cfg.confidence.contradiction)))
    n_contra = np.bincount(np.nonzero(biased)[0][~agree], minlength=n)
    c["outcome"][b] = c["raw_outcome"][b]
    c["arousal_bias"][b] = False
    # 3. promotion / demotion by weighted curator score, and archiving of expired entries
    g_cfg = cfg.grimoire
    class_days = np.array([g_cfg.ephemeral_days, g_cfg.tactical_days, g_cfg.regime_conditional_days, np.inf])
    n_up, n_down, n_archived = tiers(golems, gr.capacity, live, c["salience"], c["decay_class"], c["flashbulb"],
                                     c["curator_weight"], c["importance"], c["confidence"], c["window_ms"],
                                     c["last_access_ms"], c["status"], now_ms, cu.promote_score, cu.demote_score,
                                     class_days)
    # 4. consolidation into lessons, each Golem's groups in (scope, topic) order (a category no
    # entry has keeps the dead slots out)
    owner = np.repeat(np.arange(n), gr.capacity)
    groups = consolidation_groups(rows("scope").ravel(), rows("topic").ravel(), rows("created_ms").ravel(),
                                  rows("consolidated").ravel(), np.where(live, rows("category"), -1).ravel(), now_ms,
                                  cu.consolidation_min, cu.consolidation_age_days, owner)
    lessons = [[] for _ in golems]
    for grp in groups:
        members = slots.ravel()[grp]
        anchor = members[np.lexsort((members, -c["salience"][members]))[0]]
        lessons[owner[grp[0]]].append((anchor, members))
        c["consolidated"][members] = True
    lesson_ids = _write_lessons(mind, now_ms, list(zip(golems.tolist(), lessons)))
    # 5. reflex candidates, heat, low-confidence flags (on the slabs as the lessons left them)
    acc = rows("access_count")
    put("heat", live, heat(np.where(live, acc, 0).astype(np.float64)))
    low_conf = live & (rows("confidence") < cfg.confidence.low_flag) & (acc >= cfg.confidence.low_flag_accesses)
    put("low_conf", live, low_conf)
    props, owners = reflex.proposals(gr, golems, now_ms, cfg.reflex.promotion_min, cfg.reflex.promotion_window_days)
    applied = cfg.reflex.promotion == "auto"
    if applied:
        reflex.promote(gr, props)
    pop.curator_last_ms[golems] = now_ms
    prop_ids = c["id"][props].tolist()
    prop_bounds = np.searchsorted(owners, np.arange(n + 1)).tolist()
    cols = dict(n_entries=n_recent, n_tagged=np.bincount(ri[tag], minlength=n), mean_valence=mean_v, mean_arousal=mean_a,
                valence_correction=vc, arousal_correction=ac, reweighted=n_reweighted, reevaluated=biased.sum(axis=1),
                reevaluation_contradicted=n_contra, promoted=n_up, demoted=n_down,
                archived=n_archived, low_confidence=low_conf.sum(axis=1))
    out = [dict(zip(cols, vals)) for vals in zip(*(v.tolist() for v in cols.values()))]
    for row, ids, lo, hi in zip(out, lesson_ids, prop_bounds[:-1], prop_bounds[1:]):
        row.update(lessons=ids, reflex_proposals=prop_ids[lo:hi], reflex_applied=applied and hi > lo, balance=bool(cu.balance))
    return out


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
    members = np.concatenate([m for *_, m in flat])
    starts = np.cumsum([0] + [m.size for *_, m in flat[:-1]])
    mean_outcome = np.array([float(c["outcome"][m].mean()) for *_, m in flat])   # float32 means, as numpy takes them
    cand = Candidates()
    cand.add(gr.emb[anchor].astype(np.float64), [mind.topic_name(t) for t in c["topic"][anchor].tolist()],
             p=c["p"][anchor].astype(np.float64), a=c["a"][anchor].astype(np.float64), d=c["d"][anchor].astype(np.float64),
             has_tag=c["has_tag"][anchor], emotion=c["emotion"][anchor], label=c["label"][anchor],
             value=1.0, pnl=0.0, signals=0, provenance=-1, tick=mind.pop.tick[golem], flashbulb=False,
             first_sighting=True, force_internal=False, arousal_bias=False, golem=golem, scope=c["scope"][anchor],
             seq=50 + np.array([j for _, _, j, _, _ in flat]), kind=KINDS.index("lesson"), role=2,
             category=gm.CATEGORIES.index("lesson"), decay_class=gm.REGIME, source_conf=cfg.confidence.inferred,
             importance=np.maximum.reduceat(c["importance"][members], starts).astype(np.float64), outcome=mean_outcome,
             has_outcome=np.logical_or.reduceat(c["has_outcome"][members], starts), event_kind="", force=True,
             raw_outcome=mean_outcome, regime=c["regime"][anchor])
    rows = write(cfg, gr, cand, now_ms)
    if rows is None:
        return out
    # each Golem's written ids in order, matched with its lessons in order (a refused write
    # shifts the match, as it did one Golem at a time)
    lo, hi = (np.searchsorted(rows["golem"], [g for g, _ in lessons], side) for side in ("left", "right"))
    for i, (g, ls) in enumerate(lessons):
        ids = rows["id"][lo[i]:hi[i]].tolist()   # rows come in Golem order
        for (_, members), eid in zip(ls, ids):
            gr.links[eid] = tuple(c["id"][members].tolist())
        out[i] = ids
    rows["clade"] = mind.pop.clade[rows["golem"]]
    mind.pending_entries.append(rows)
    return out
