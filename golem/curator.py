"""Curator (SPEC §7): counter emotional lock-in by rebalancing, re-evaluating and consolidating.

The formulas of the spec come first, as plain Python and numpy (the references the pass's kernels
are tested against, in tests/test_curation.py), then the pass (`passes`, batched over the Golems
due, a few numba kernels that compute exactly what the formulas do).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numba import njit, prange


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


@njit(cache=True)
def reevaluation_agrees(biased: float, unbiased: float, tolerance: float = 0.1) -> bool:
    """Curator step 2 (SPEC §7.2): does the calm re-run of a counterfactual support the insight an
    aroused Golem wrote? It does when the mood's bias moved the outcome by at most `tolerance`;
    beyond that the insight claimed more (or other) than the evidence gives, and is contradicted
    (SPEC §3.4: -0.20; validated +0.10)."""
    return abs(biased - unbiased) <= tolerance


# --- the pass ---------------------------------------------------------------------------------

from golem import grimoire as gm  # noqa: E402
from golem.kernels import np_sum, threaded  # noqa: E402
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
def _tiers_slab(r, base, cap, live, salience, decay_class, flashbulb, curator_weight, importance, confidence,
                window_ms, ttl_days, last_access_ms, status, now_ms, promote_score, demote_score, class_days, protect,
                cnt):
    """Curator step 3 on one due Golem's slab (row r of `live`, slots from `base`), in place:
    promotion/demotion of the decay class by the weighted curator score, the window re-derived from
    the new class (SPEC §3.2: max(class days, tier TTL) * (1 + salience), so a demotion shortens
    it), then archiving of expired entries (age from last access >= twice the window); the
    promoted, demoted and archived counts into cnt[r, 5:8] (`curate_slabs`' counts).

    Unprotected live entries only (structural, flashbulb or salience >= `protect` are protected).
    score = weight * importance * confidence * (1 + salience) is computed and compared in the
    columns' float32; the window in float64."""
    keep = np.float32(protect)
    promote = np.float32(promote_score)     # a Python float against a float32 column: compared in float32
    demote = np.float32(demote_score)
    for j in range(cap):
        if not live[r, j]:
            continue
        s = base + j
        sal = salience[s]
        dc = decay_class[s]
        if dc == gm.STRUCTURAL or flashbulb[s] or sal >= keep:
            continue
        score = curator_weight[s] * importance[s] * confidence[s] * (np.float32(1.0) + sal)
        up = score >= promote and dc < gm.REGIME
        down = score <= demote and dc > gm.EPHEMERAL and not up   # promotion first (promote <= demote)
        if up or down:
            dc = dc + np.int8(up) - np.int8(down)
            decay_class[s] = dc
            window_ms[s] = max(class_days[dc], np.float64(ttl_days[s])) * (1.0 + np.float64(sal)) * DAY_MS
            cnt[r, 5] += up
            cnt[r, 6] += down
        w = np.float64(window_ms[s])          # as stored (float32)
        if np.float64(now_ms - last_access_ms[s]) >= 2.0 * w and status[s] != gm.ARCHIVED:
            status[s] = gm.ARCHIVED
            cnt[r, 7] += 1


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
    `events` rows, one dict each (`pass_columns` gives them as columns)."""
    f = pass_columns(mind, golems, now_ms)
    if f is None:
        return []
    out = [dict(zip(f.cols, vals)) for vals in zip(*(v.tolist() for v in f.cols.values()))]
    lessons, props, bounds = f.lessons.tolist(), f.proposals.tolist(), f.lesson_bounds.tolist()
    pb = f.proposal_bounds.tolist()
    for i, row in enumerate(out):
        row.update(lessons=lessons[bounds[i]:bounds[i + 1]], reflex_proposals=props[pb[i]:pb[i + 1]],
                   reflex_applied=f.applied and pb[i + 1] > pb[i], balance=f.balance)
    return out


@dataclass
class PassFigures:
    """The figures of a batch of curator passes, a row per Golem: `cols` (numbers), each Golem's
    lesson ids (`lessons[lesson_bounds[i]:lesson_bounds[i + 1]]`) and reflex proposals
    (`proposals[proposal_bounds[i]:...]`, entry ids), whether proposals were applied, and
    whether the balance step reweighted."""
    cols: dict[str, np.ndarray]
    lessons: np.ndarray
    lesson_bounds: np.ndarray
    proposals: np.ndarray
    proposal_bounds: np.ndarray
    applied: bool
    balance: bool


def pass_columns(mind, golems: np.ndarray, now_ms: int) -> PassFigures | None:
    """Curator passes (SPEC §7) for `golems` (ascending ids) at once; their figures as columns
    (None for no Golem).

    Each step is a kernel over the due Golems' slabs (masked to the entries live at the start of
    the pass) that does what the numpy expressions of tests/test_curation.py do, sum for sum. A
    pass reads and writes its own Golem's slab only, so batching changes nothing: the lessons of
    all of them are written in one batch (ids in Golem order, as passes one after the other would
    number them) between consolidation and the heat / reflex step, which sees them.
    """
    gr, cfg, pop = mind.gr, mind.cfg, mind.pop
    cu = cfg.curator
    c = gr.cols
    golems = np.asarray(golems, dtype=np.int64)
    if golems.size == 0:
        return None
    n = golems.size
    live = gr.live_rows(golems)
    calm = pop.mood[golems, 1] < cu.calm_arousal    # calm in mood, not just this minute (SPEC §2.1)
    # work: the entries each step reads (a slab's empty capacity is a skipped flag a slot)
    work = int(gr.count[golems].sum())
    # 1. emotional balance over the entries since the last pass; 2. re-evaluation of arousal-biased
    # insights when calm (the counterfactual re-run without the mood's bias); 3. promotion /
    # demotion by weighted curator score, and archiving of expired entries: a slab at a time
    g_cfg = cfg.grimoire
    class_days = np.array([g_cfg.ephemeral_days, g_cfg.tactical_days, g_cfg.regime_conditional_days, np.inf])
    fig, cnt = curate_slabs.on(work)(
        golems, gr.capacity, live, pop.curator_last_ms, c["created_ms"], c["has_tag"], c["p"], c["a"],
        c["curator_weight"], c["arousal_bias"], c["category"], c["outcome"], c["raw_outcome"], c["has_outcome"],
        c["confidence"], calm, bool(cu.balance), cu.valence_gain, cu.arousal_floor, cu.arousal_gain,
        cu.minority_threshold, cfg.arousal.high_band, gm.CATEGORIES.index("insight"), cfg.confidence.validation,
        cfg.confidence.contradiction, cu.reevaluation_tolerance, c["salience"], c["decay_class"], c["flashbulb"],
        c["importance"], c["window_ms"], c["ttl_days"], c["last_access_ms"], c["status"], now_ms, cu.promote_score,
        cu.demote_score, class_days, gr.protect)
    # 4. consolidation into lessons, each Golem's groups in (scope, topic) order
    grp_row, anchors, starts, members = lesson_groups(
        golems, gr.capacity, live, c["scope"], c["topic"], c["created_ms"], c["consolidated"], c["category"],
        c["salience"], now_ms, cu.consolidation_min, float(cu.consolidation_age_days * DAY_MS),
        gm.CATEGORIES.index("episode"))
    lesson_ids = _write_lessons(mind, now_ms, golems, grp_row, anchors, starts, members)
    # 5. reflex candidates, heat, low-confidence flags (on the slabs as the lessons left them)
    low_conf = heat_and_flags(golems, gr.capacity, live, c["access_count"], c["confidence"], c["heat"], c["low_conf"],
                              cfg.confidence.low_flag, cfg.confidence.low_flag_accesses, work)
    props, owners = reflex.proposals(gr, golems, now_ms, cfg.reflex.promotion_min, cfg.reflex.promotion_window_days)
    applied = cfg.reflex.promotion == "auto"
    if applied:
        reflex.promote(gr, props)
    pop.curator_last_ms[golems] = now_ms
    cols = dict(n_entries=cnt[:, 0], n_tagged=cnt[:, 1], mean_valence=fig[:, 2], mean_arousal=fig[:, 3],
                valence_correction=fig[:, 0], arousal_correction=fig[:, 1], reweighted=cnt[:, 2], reevaluated=cnt[:, 3],
                reevaluation_contradicted=cnt[:, 4], promoted=cnt[:, 5], demoted=cnt[:, 6],
                archived=cnt[:, 7], low_confidence=low_conf)
    sizes = np.fromiter(map(len, lesson_ids), dtype=np.int64, count=n)
    return PassFigures(cols, np.fromiter((e for ids in lesson_ids for e in ids), dtype=np.int64, count=int(sizes.sum())),
                       np.concatenate([[0], np.cumsum(sizes)]), c["id"][props].astype(np.int64),
                       np.searchsorted(owners, np.arange(n + 1)).astype(np.int64), applied, bool(cu.balance))


@threaded(cache=True)
def curate_slabs(golems, cap, live, last_ms, created_ms, has_tag, p, a, curator_weight, arousal_bias, category,
                 outcome, raw_outcome, has_outcome, confidence, calm, balance, valence_gain, arousal_floor,
                 arousal_gain, minority_threshold, high_arousal, insight, validation, contradiction, tolerance,
                 salience, decay_class, flashbulb, importance, window_ms, ttl_days, last_access_ms, status, now_ms,
                 promote_score, demote_score, class_days, protect):
    """Curator steps 1 to 3 on each due Golem's slab, in place, a slab at a time (`_balance_slab`,
    then `_tiers_slab`: the tiers read the weights and confidences the balance has just written
    while the slab is still in the caches; one pass over the arena instead of two). Returns
    figures (rows x 4: valence and arousal corrections, mean valence, mean arousal) and counts
    (rows x 8: recent entries, tagged ones, reweighted, re-evaluated, contradicted, promoted,
    demoted, archived). Golems touch only their own slabs, so they are spread over numba's
    threads (`kernels.threaded`) with the same result."""
    n = golems.size
    fig = np.zeros((n, 4))
    cnt = np.zeros((n, 8), dtype=np.int64)
    for r in prange(n):                 # rows are slabs of their own: over numba's threads
        base = golems[r] * cap
        _balance_slab(r, golems[r], base, cap, live, last_ms, created_ms, has_tag, p, a, curator_weight,
                      arousal_bias, category, outcome, raw_outcome, has_outcome, confidence, calm[r], balance,
                      valence_gain, arousal_floor, arousal_gain, minority_threshold, high_arousal, insight, validation,
                      contradiction, tolerance, fig, cnt)
        _tiers_slab(r, base, cap, live, salience, decay_class, flashbulb, curator_weight, importance, confidence,
                    window_ms, ttl_days, last_access_ms, status, now_ms, promote_score, demote_score, class_days,
                    protect, cnt)
    return fig, cnt


@njit(cache=True)
def _balance_slab(r, g, base, cap, live, last_ms, created_ms, has_tag, p, a, curator_weight, arousal_bias, category,
                  outcome, raw_outcome, has_outcome, confidence, calm, balance, valence_gain, arousal_floor,
                  arousal_gain, minority_threshold, high_arousal, insight, validation, contradiction, tolerance,
                  fig, cnt):
    """Curator steps 1 and 2 on one due Golem's slab (Golem g, row r of `live`, slots from `base`),
    in place; its figures into fig[r] (valence and arousal corrections, mean valence, mean arousal)
    and counts into cnt[r, 0:5] (recent entries, tagged ones, reweighted, re-evaluated,
    contradicted).

    Step 1 over the entries created since the Golem's last pass, in slot order: the corrections
    from `emotional_balance` (its sequential sums), the means as numpy sums them (`np_sum`), and
    with `balance` the `curator_weights` of those entries. Step 2 when the Golem is `calm`: each
    arousal-biased insight with a counterfactual is compared with its unbiased re-run
    (`reevaluation_agrees`: raw_outcome within `tolerance` of the biased outcome), confidence +
    validation where it agrees, - contradiction where not (clipped in float64, stored in float32),
    and takes the unbiased outcome; an insight without one (nothing to re-run) only loses the flag."""
    pt = np.empty(cap)
    at = np.empty(cap)
    k = 0
    nt = 0
    for j in range(cap):
        if live[r, j] and created_ms[base + j] > last_ms[g]:
            k += 1
            if has_tag[base + j]:
                pt[nt] = np.float64(p[base + j])
                at[nt] = np.float64(a[base + j])
                nt += 1
    sp = 0.0
    sa = 0.0
    for i in range(nt):
        sp += pt[i]
        sa += at[i]
    div = max(k, 1)
    vc = -(sp / div) * valence_gain
    x = sa / div - arousal_floor
    ac = (0.0 if 0.0 > x else x) * -arousal_gain       # Python's max(x, 0.0)
    mean_v = np_sum(pt, 0, nt, 0.0) / div
    fig[r, 0], fig[r, 1], fig[r, 2], fig[r, 3] = vc, ac, mean_v, np_sum(at, 0, nt, 0.0) / div
    cnt[r, 0], cnt[r, 1] = k, nt
    if balance:
        lopsided = abs(mean_v) > minority_threshold
        for j in range(cap):
            s = base + j
            if not (live[r, j] and created_ms[s] > last_ms[g]):
                continue
            w = 1.0
            if has_tag[s]:
                pv = np.float64(p[s])
                if lopsided and pv != 0 and (pv > 0) != (mean_v > 0):
                    w = 1.0 + abs(vc)
                if np.float64(a[s]) > high_arousal:
                    w = w * (1.0 + ac)
            curator_weight[s] = w
            cnt[r, 2] += w != 1.0
    if calm:
        for j in range(cap):
            s = base + j
            if live[r, j] and arousal_bias[s] and category[s] == insight:
                arousal_bias[s] = False
                if not has_outcome[s]:
                    continue
                agree = reevaluation_agrees(np.float64(outcome[s]), np.float64(raw_outcome[s]), tolerance)
                conf = np.float64(confidence[s])
                confidence[s] = np.minimum(1.0, np.maximum(0.0, conf + validation if agree else conf - contradiction))
                cnt[r, 3] += 1
                cnt[r, 4] += not agree
                outcome[s] = raw_outcome[s]


@njit(cache=True)
def lesson_groups(golems, cap, live, scope, topic, created_ms, consolidated, category, salience, now_ms,
                  min_entries, min_age_ms, episode):
    """Curator step 4's groups, marked consolidated: per due Golem (row), its live episodes older
    than `min_age_ms` and not yet consolidated, grouped by (scope, topic) in that order, slots
    ascending within a group; groups of >= min_entries. Returns each group's row, its anchor (the
    highest-salience member, the lowest slot among equals), and the members as flat slots with
    group starts (groups + 1): `consolidation_groups` per Golem, plus the anchor and the marking."""
    n_cand = 0
    for r in range(golems.size):
        base = golems[r] * cap
        for j in range(cap):
            s = base + j
            n_cand += (live[r, j] and category[s] == episode and not consolidated[s]
                       and (now_ms - created_ms[s]) > min_age_ms)
    members = np.empty(n_cand, dtype=np.int64)
    starts = np.zeros(n_cand // max(min_entries, 1) + 2, dtype=np.int64)
    grp_row = np.empty(starts.size, dtype=np.int64)
    anchors = np.empty(starts.size, dtype=np.int64)
    cand = np.empty(cap, dtype=np.int64)
    key = np.empty(cap, dtype=np.int64)
    n_grp = 0
    at = 0
    for r in range(golems.size):
        base = golems[r] * cap
        m = 0
        for j in range(cap):
            s = base + j
            if (live[r, j] and category[s] == episode and not consolidated[s]
                    and (now_ms - created_ms[s]) > min_age_ms):
                cand[m] = s
                # (scope, topic) as one order-preserving int64: scope * 2**32 + topic (both int32)
                key[m] = (np.int64(scope[s]) << 32) + np.int64(topic[s])
                m += 1
        order = np.argsort(key[:m], kind="mergesort")      # stable: slots ascending within a key
        lo = 0
        while lo < m:
            hi = lo + 1
            while hi < m and key[order[hi]] == key[order[lo]]:
                hi += 1
            if hi - lo >= min_entries:
                best = cand[order[lo]]
                for i in range(lo, hi):
                    s = cand[order[i]]
                    members[at] = s
                    at += 1
                    consolidated[s] = True
                    if salience[s] > salience[best]:
                        best = s
                grp_row[n_grp] = r
                anchors[n_grp] = best
                n_grp += 1
                starts[n_grp] = at
            lo = hi
    return grp_row[:n_grp].copy(), anchors[:n_grp].copy(), starts[:n_grp + 1].copy(), members[:at].copy()


#: log1p(0), log1p(1), ...: numpy's values (its SIMD log1p and libm's differ in the last bit for ~1 %
#: of them), grown by doubling as access counts need (`_log1p_upto`); an entry does not depend on
#: the table's length, so a grown table only adds entries
_LOG1P = [np.log1p(np.arange(256, dtype=np.float64))]


def _log1p_upto(n: int) -> np.ndarray:
    """The log1p table with at least entries 0 .. n."""
    if n >= _LOG1P[0].size:
        _LOG1P[0] = np.log1p(np.arange(1 << int(n).bit_length(), dtype=np.float64))
    return _LOG1P[0]


def heat_and_flags(golems, cap, live, access_count, confidence, heat_col, low_conf, low_flag, low_flag_accesses,
                   work: int):
    """Curator step 5's per-entry flags on the live slots, in place: heat (`heat` of the slab:
    log1p(accesses) / log1p(the slab's most), 0 when nothing was accessed) and the low-confidence
    flag (confidence below `low_flag`, compared in float32 as the column is, after at least
    `low_flag_accesses` accesses); returns each Golem's low-confidence count. log1p comes from a
    table numpy computes (`_LOG1P`); a slab whose most is past the table is left for a second call
    with a table grown to it (the kernel only writes what it computes from columns it does not
    change, so calling it again gives the same). `work`: the entries the slabs hold, which picks the
    compile like the other steps' (`kernels.threaded`)."""
    run = _heat_and_flags.on(work)
    table = _LOG1P[0]
    while True:
        n_low, top = run(golems, cap, live, access_count, confidence, heat_col, low_conf, table,
                         np.float32(low_flag), low_flag_accesses)
        most = int(top.max()) if top.size else 0
        if most < table.size:
            return n_low
        table = _log1p_upto(most)


@threaded(cache=True)
def _heat_and_flags(golems, cap, live, access_count, confidence, heat_col, low_conf, table, low_flag,
                    low_flag_accesses):
    """A slab at a time: its most accessed live entry, then (while the slab is in cache) each live
    entry's heat and flag. Also returns each slab's most (0 when none is larger); a slab whose
    most is not in `table` is skipped."""
    n_low = np.zeros(golems.size, dtype=np.int64)
    top = np.zeros(golems.size, dtype=np.int64)
    for r in prange(golems.size):
        base = golems[r] * cap
        most = 0
        for j in range(cap):
            if live[r, j] and access_count[base + j] > most:
                most = access_count[base + j]
        top[r] = most
        if most >= table.size:
            continue
        t = table[most]
        for j in range(cap):
            if live[r, j]:
                s = base + j
                acc = access_count[s]
                heat_col[s] = table[acc] / t if t > 0 else 0.0
                flag = confidence[s] < low_flag and acc >= low_flag_accesses
                low_conf[s] = flag
                n_low[r] += flag
    return n_low, top


def _write_lessons(mind, now_ms: int, golems: np.ndarray, grp_row: np.ndarray, anchor: np.ndarray,
                   starts: np.ndarray, members: np.ndarray) -> list[list[int]]:
    """One lesson entry per consolidated group (`lesson_groups`), framed on its anchor (highest-
    salience episode), all in one write; returns each Golem's lesson ids."""
    out = [[] for _ in golems]
    if not anchor.size:
        return out
    from golem.memory_writer import KINDS, Candidates, write
    gr, cfg = mind.gr, mind.cfg
    c = gr.cols
    golem = golems[grp_row]
    first = starts[:-1]
    mean_outcome = group_means(c["outcome"], members, starts)
    cand = Candidates()
    cand.add(gr.emb[anchor].astype(np.float64), [mind.topic_name(t) for t in c["topic"][anchor].tolist()],
             p=c["p"][anchor].astype(np.float64), a=c["a"][anchor].astype(np.float64), d=c["d"][anchor].astype(np.float64),
             has_tag=c["has_tag"][anchor], emotion=c["emotion"][anchor], label=c["label"][anchor],
             value=1.0, pnl=0.0, signals=0, provenance=-1, tick=mind.pop.tick[golem], flashbulb=False,
             first_sighting=True, force_internal=False, arousal_bias=False, golem=golem, scope=c["scope"][anchor],
             seq=50 + np.arange(grp_row.size) - np.searchsorted(grp_row, grp_row), kind=KINDS.index("lesson"), role=2,
             category=gm.CATEGORIES.index("lesson"), decay_class=gm.REGIME, source_conf=cfg.confidence.inferred,
             importance=np.maximum.reduceat(c["importance"][members], first).astype(np.float64), outcome=mean_outcome,
             has_outcome=np.logical_or.reduceat(c["has_outcome"][members], first), event_kind="", force=True,
             raw_outcome=mean_outcome, regime=c["regime"][anchor])
    rows = write(cfg, gr, cand, now_ms)
    if rows is None:
        return out
    # each Golem's written ids in order, matched with its lessons in order (a refused write
    # shifts the match, as it did one Golem at a time)
    lo, hi = (np.searchsorted(rows["golem"], golems, side) for side in ("left", "right"))
    g_lo = np.searchsorted(grp_row, np.arange(golems.size))
    member_ids = c["id"][members].tolist()
    bounds = starts.tolist()
    for i in np.flatnonzero(hi > lo).tolist():
        ids = rows["id"][lo[i]:hi[i]].tolist()   # rows come in Golem order
        for gi, eid in enumerate(ids, start=int(g_lo[i])):
            gr.links[eid] = tuple(member_ids[bounds[gi]:bounds[gi + 1]])
        out[i] = ids
    rows["clade"] = mind.pop.clade[rows["golem"]]
    mind.pending_entries.append(rows)
    return out


@njit(cache=True)
def group_means(values, members, starts):
    """`float(values[members[a:b]].mean())` for every group [a, b) of `starts`, as numpy takes the
    mean of a float32 gather: the float32 sum (`np_sum`) divided in float32 by the count."""
    out = np.empty(starts.size - 1)
    buf = np.empty(members.size, dtype=values.dtype)
    for i in range(members.size):
        buf[i] = values[members[i]]
    for gi in range(out.size):
        lo, hi = starts[gi], starts[gi + 1]
        out[gi] = np_sum(buf, lo, hi - lo, values.dtype.type(0)) / values.dtype.type(hi - lo)
    return out
