"""Retrieval (SPEC §4): the four-factor score, its scalar reference, and the batched front end.

The batched path calls `golem.kernels.retrieve_batch` once for a whole cohort; the scalar
reference below is the spec written out entry by entry and is what the kernel is tested against.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

import numpy as np

from golem import kernels
from golem import pad as padm
from golem.grimoire import ARCHIVED, DAY_MS, Grimoire

HOUR_MS = 3_600_000.0


def four_factor_score(semantic: float, hours_since_access: float, importance: float, emotional: float,
                      weights: tuple[float, float, float, float] = (0.40, 0.20, 0.25, 0.15),
                      temporal_base: float = 0.995) -> float:
    """The SPEC §16 reference: 0.40 semantic + 0.20 temporal + 0.25 importance + 0.15 emotional
    (§4.1), the temporal factor being temporal_base ** hours_since_access (0.995 ** hours)."""
    return weighted_score(semantic, temporal_base ** hours_since_access, importance, emotional, weights)


def weighted_score(semantic: float, temporal: float, importance: float, emotional: float,
                   weights: tuple[float, float, float, float] = (0.40, 0.20, 0.25, 0.15)) -> float:
    """The four factors' weighted sum given the temporal factor itself (the scalar reference
    retrieval takes it from the stored recency terms), in this order, as the kernel adds them."""
    return weights[0] * semantic + weights[1] * temporal + weights[2] * importance + weights[3] * emotional


def six_factor_score(relevance: float, decayed_strength: float, recency: float, spreading: float,
                     context_match: float, salience: float,
                     weights: tuple[float, ...] = (0.38, 0.18, 0.08, 0.14, 0.14, 0.08)) -> float:
    """The [C] alternative profile (SPEC §4.1), for comparison on the same tape."""
    parts = (relevance, decayed_strength, recency, spreading, context_match, salience)
    return sum(w * x for w, x in zip(weights, parts))


@dataclass(frozen=True)
class RetrievalParams:
    top_k: int = 8
    weights: tuple[float, float, float, float] = (0.40, 0.20, 0.25, 0.15)
    temporal_base: float = 0.995
    half_life_days: float = 3.0
    reactivation_boost: float = 0.3
    charge_fading: bool = True
    salience_cap: float = 0.25
    live: bool = False
    #: somatic-HDC profile (SPEC §11): recency, importance, relevance, HDC similarity
    somatic_weights: tuple[float, float, float, float] = (0.30, 0.30, 0.25, 0.15)

    @classmethod
    def from_config(cls, cfg) -> "RetrievalParams":
        r = cfg.retrieval
        return cls(top_k=r.top_k, weights=(r.w_semantic, r.w_temporal, r.w_importance, r.w_emotional),
                   temporal_base=r.temporal_base, half_life_days=cfg.decay.half_life_days,
                   reactivation_boost=cfg.decay.reactivation_boost, charge_fading=r.charge_fading,
                   salience_cap=r.salience_rank_cap, live=r.salience_rank == "live",
                   somatic_weights=(r.hdc_recency, r.hdc_importance, r.hdc_relevance, r.hdc_similarity))


def query_codes(queries: np.ndarray, stride: int) -> tuple[np.ndarray, np.ndarray]:
    """Queries as the retrieval scores them: (codes, scale) with codes = round(q * scale) in int16
    (half to even), scale = `kernels.query_max(stride)` / max|q| per row (1 for a zero query),
    zero-padded to `stride` columns. The rounding moves the semantic factor by < 1e-4 at d = 64,
    a small part of what storing entries as int8 codes does (docs/performance.md)."""
    q = np.atleast_2d(np.asarray(queries))
    if q.dtype not in (np.float32, np.float64):
        q = q.astype(np.float64)
    return kernels.query_codes(q, float(kernels.query_max(stride)), stride)   # one pass a row


def semantic(codes, qcodes, qscale: float) -> float:
    """The semantic factor (SPEC §4.1: cosine of entry and query) as stored: the cosine of an
    entry's int8 codes (`grimoire.quantise`) with the query's codes (`query_codes`),
    dot / (qscale * sqrt(norm2)), dot and norm2 = sum of codes^2 exact integers (norm2 taken as at
    least 1, so zero codes give 0). The kernel computes the same integers with SIMD (norm2 is
    stored, `Grimoire.norm2`) and then these float operations, so the two agree bit for bit."""
    dot = sum(int(c) * int(q) for c, q in zip(codes.tolist(), qcodes.tolist()))
    n2 = sum(int(c) * int(c) for c in codes.tolist())
    return dot / (float(qscale) * math.sqrt(max(n2, 1)))


def query_terms(gr: Grimoire, now_ms: int) -> tuple[float, float]:
    """(tau, gamma): what a retrieval at `now_ms` multiplies the stored recency and charge by
    (`kernels.recency_term`, `kernels.charge_term`): 2^(log2(base) (now - epoch) / 1 h) and
    2^((epoch - now) / half-life), one exp2 each a query, by the kernels' exp2."""
    epoch, lg2_per_ms, inv_hl, _ = gr.scan_constants()
    dt = float(now_ms - epoch)
    return float(kernels.exp2(lg2_per_ms * dt)), float(kernels.exp2(-dt * inv_hl))


def entry_factors(gr: Grimoire, s: int, query: np.ndarray, cur_pad, now_ms: int, prm: RetrievalParams):
    """The four factors of one slot as the retrieval scores them (scalar reference): the semantic
    factor of the stored codes (`semantic`); temporal = min(1, recency * tau) (1 at age 0) and the charge
    min(1, charge * gamma) from the stored terms (`query_terms`); the emotional factor 0.5 for an
    untagged entry, else `padm.pad_cosine_safe(tag, mood)` faded by that charge
    (`padm.faded_emotional_factor`). Operation for operation the kernel's, so the same bits;
    within ~1e-7 of the SPEC formulas on the columns (the stored terms are float32)."""
    c = gr.cols
    qc, qs = query_codes(query, gr.codes.shape[1])
    sem = semantic(gr.codes[s], qc[0], qs[0])
    tau, gamma = query_terms(gr, now_ms)
    age = float(now_ms - int(c["last_access_ms"][s]))
    temporal = 1.0 if age == 0.0 else min(1.0, float(gr.recency[s]) * tau)
    if c["has_tag"][s]:
        emo = padm.pad_cosine_safe((float(c["p"][s]), float(c["a"][s]), float(c["d"][s])),
                                   tuple(float(x) for x in cur_pad))
        if prm.charge_fading:
            emo = padm.faded_emotional_factor(emo, min(1.0, float(gr.charge[s]) * gamma))
    else:
        emo = 0.5
    return sem, temporal, float(c["importance"][s]), emo


def served_factors(gr: Grimoire, slots: np.ndarray, queries: np.ndarray, cur_pad: np.ndarray, now_ms: int,
                   prm: RetrievalParams) -> np.ndarray:
    """(n, 4) factors of slots[i] for queries[i] and cur_pad[i] as a retrieval records them
    (semantic, temporal, importance, emotional): `entry_factors` over entries, operation for
    operation, so bit for bit equal to it (one numba pass, `kernels.served_factors_batch`; the
    queries are float32, as `retrieve` takes them)."""
    c = gr.cols
    slots = np.ascontiguousarray(slots, dtype=np.int64)
    gr.prepare_scan(prm.temporal_base, prm.half_life_days * DAY_MS, prm.reactivation_boost, now_ms)
    tau, gamma = query_terms(gr, now_ms)
    qc, qs = query_codes(np.asarray(queries, dtype=np.float32), gr.codes.shape[1])
    return kernels.served_factors_batch(
        slots, qc, qs, np.ascontiguousarray(cur_pad, dtype=np.float64), np.int64(now_ms), tau, gamma, gr.codes,
        gr.norm2, c["last_access_ms"], gr.recency, gr.charge, c["p"], c["a"], c["d"], c["has_tag"], c["importance"],
        prm.charge_fading, np.empty((slots.size, 4)))


def reference_retrieve(gr: Grimoire, g: int, query: np.ndarray, cur_pad, now_ms: int, prm: RetrievalParams,
                       min_conf: float | None = None, valence_sign: int = 0):
    """Scalar reference: score every eligible entry of Golem g, return [(slot, score, factors)] top-k.

    Eligible: an entry (every slot below the slab's count holds one), not archived, not expired
    (age from the last access below twice the window), confidence >= min_conf if given, and of
    the asked valence sign if any (tagged, p > 0 or p < 0). The score is the weighted sum of
    `entry_factors` (SPEC §4.1), times 1 + salience * cap when the salience rank is live."""
    c = gr.cols
    gr.prepare_scan(prm.temporal_base, prm.half_life_days * DAY_MS, prm.reactivation_boost, now_ms)
    rows = []
    for s in range(g * gr.capacity, g * gr.capacity + int(gr.count[g])):
        if c["status"][s] == ARCHIVED:
            continue
        if now_ms - int(c["last_access_ms"][s]) >= 2.0 * float(c["window_ms"][s]):
            continue
        if min_conf is not None and float(c["confidence"][s]) < min_conf:
            continue
        pv = float(c["p"][s]) if c["has_tag"][s] else 0.0
        if valence_sign > 0 and not (c["has_tag"][s] and pv > 0):
            continue
        if valence_sign < 0 and not (c["has_tag"][s] and pv < 0):
            continue
        sem, temporal, imp, emo = entry_factors(gr, s, query, cur_pad, now_ms, prm)
        score = weighted_score(sem, temporal, imp, emo, prm.weights)
        if prm.live:
            score *= 1.0 + float(c["salience"][s]) * prm.salience_cap
        rows.append((s, score, (sem, temporal, imp, emo)))
    rows.sort(key=lambda r: (-r[1], r[0]))
    return rows[: prm.top_k]


@dataclass
class RetrievalResult:
    """Per-Golem arrays for one batched retrieval (b Golems x k slots; slot -1 = empty).

    `tagged` and `valence` are `served_valence(gr, slots)`: the served cells' tag flags and
    valences (the fused kernel reads them at the end of each Golem's scan, while they are in
    cache; the other profiles after theirs)."""

    slots: np.ndarray
    scores: np.ndarray
    factors: np.ndarray
    shadow: np.ndarray
    pool: np.ndarray     # (b, kernels.POOL_COLUMNS): the eligible pool's size, sums of emotional factor and
                         # valence, best non-negative slot and score, best semantic match (-inf: none)
    tagged: np.ndarray | None = None     # filled by every retrieval before it returns
    valence: np.ndarray | None = None


#: GOLEM_CHECK_SCAN=1: every retrieval first checks that the scan terms of one occupied slot in
#: `CHECK_STRIDE` of the queried slabs (the next one each time) are what their columns give
#: (`Grimoire.scan_is_current`): a write that forgot `refresh_scan` fails there. The test suite
#: sets it.
CHECK_SCAN = os.environ.get("GOLEM_CHECK_SCAN", "") not in ("", "0")
CHECK_STRIDE = 4
_checks = [0]


def _check_scan(gr: Grimoire, golems: np.ndarray) -> None:
    """Checks the slots the scan reads (below each slab's count), not the empty rest of the slab:
    in a small run that rest is most of the capacity, and checking it doubled a tick's cost."""
    first = _checks[0] % CHECK_STRIDE
    _checks[0] += 1
    lo = np.asarray(golems, dtype=np.int64) * gr.capacity + first
    per = (np.maximum(gr.count[golems].astype(np.int64) - first, 0) + CHECK_STRIDE - 1) // CHECK_STRIDE
    nth = np.arange(per.sum()) - np.repeat(np.cumsum(per) - per, per)
    slots = np.repeat(lo, per) + nth * CHECK_STRIDE
    if not gr.scan_is_current(slots):
        raise AssertionError("stale scan terms: a write of the Grimoire's columns did not call refresh_scan")


def retrieve(gr: Grimoire, golems: np.ndarray, queries: np.ndarray, cur_pad: np.ndarray, now_ms: int,
             prm: RetrievalParams, k: int | None = None, min_conf: float | None = None,
             valence_sign: np.ndarray | None = None) -> RetrievalResult:
    """Score and select the top-k for a batch of Golems in one kernel call (no bookkeeping).

    `min_conf`: a confidence floor (the contrarian's); without one the confidence column is not
    read. A batch scanning many entries is spread over numba's threads (`kernels.threaded`, from
    `kernels.PARALLEL_MIN_WORK` entries; NUMBA_NUM_THREADS=1 keeps it on the calling thread); every
    Golem's row is computed by the same code either way, so the result is identical.
    """
    golems = np.ascontiguousarray(golems, dtype=np.int64)
    b = golems.size
    k = k or prm.top_k
    vs = np.zeros(b, dtype=np.int8) if valence_sign is None else np.asarray(valence_sign, dtype=np.int8)
    c = gr.cols
    out = RetrievalResult(np.full((b, k), -1, np.int64), np.full((b, k), -np.inf),
                          np.full((b, k, 4), np.nan), np.full((b, k), -1, np.int64), np.zeros((b, kernels.POOL_COLUMNS)),
                          np.empty((b, k), dtype=bool), np.empty((b, k), dtype=c["p"].dtype))
    kernel = kernels.retrieve_batch.on(int(gr.count[golems].sum()))     # work: the entries scanned
    gr.prepare_scan(prm.temporal_base, prm.half_life_days * DAY_MS, prm.reactivation_boost, now_ms)
    if CHECK_SCAN:
        _check_scan(gr, golems)
    tau, gamma = query_terms(gr, now_ms)
    qc, qs = query_codes(np.asarray(queries, dtype=np.float32), gr.codes.shape[1])
    kernel(
        golems, gr.count, gr.capacity, qc, qs, np.ascontiguousarray(cur_pad, dtype=np.float64), vs, np.int64(now_ms),
        tau, gamma, gr.codes, gr.norm2, c["last_access_ms"], c["window_ms"], c["status"], c["importance"],
        c["salience"], c["confidence"], c["has_tag"], c["p"], c["a"], c["d"], gr.recency, gr.charge,
        np.asarray(prm.weights, dtype=np.float64), prm.charge_fading,
        k, prm.salience_cap, -1.0 if min_conf is None else float(min_conf), prm.live,
        out.slots, out.scores, out.factors, out.shadow, out.pool, out.tagged, out.valence)
    return out


def served_valence(gr: Grimoire, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which served cells hold a tagged entry, and its valence (p; 0 where untagged or empty), in
    one threaded pass (`kernels.served_valence`)."""
    slots = np.ascontiguousarray(slots, dtype=np.int64)
    return kernels.served_valence.on(slots.size)(slots, gr.cols["has_tag"], gr.cols["p"])


#: the served entries' columns `recall` hands out (besides the shadow ranking's ids)
SERVED_COLUMNS = ("id", "topic", "has_outcome", "confidence", "outcome", "access_count")


def recall(gr: Grimoire, slots: np.ndarray, shadow: np.ndarray, now_ms: int, tagged: np.ndarray | None = None,
           factors: np.ndarray | None = None, context_topics: np.ndarray | None = None,
           cosine: float = 0.8) -> dict[str, np.ndarray]:
    """The served entries' bookkeeping for a decision (recall renews: last_access = now,
    access_count + 1; and they drive it: acted_on_count + 1, now into the act-time ring) and their columns
    after it: `gr.cols[name][safe]` for each of `SERVED_COLUMNS` (safe = the slot, 0 where none;
    the caller masks) and "shadow_id", the id at each shadow slot. With the served cells' tag
    flags, their factors (Golems x k x 4) and the context's topics (Golems x topics,
    `Mind.context_topics`), it also re-lives the served entries that match (reactivation, SPEC
    §2.6: tagged, semantic factor >= `cosine`, topic among the context's; reactivated,
    react_count + 1, last_react_ms = now) and "reactivated" is that (Golems x k) mask; without
    them nothing is re-lived. One threaded pass over the served cells (`kernels.recall_served`):
    they are cache misses after the scan, so their reads and writes are issued together."""
    c = gr.cols
    slots = np.ascontiguousarray(slots, dtype=np.int64)
    if context_topics is None:
        tagged, factors = np.zeros(slots.shape, dtype=bool), np.full(slots.shape + (1,), np.nan)
        context_topics = np.empty((slots.shape[0], 0), dtype=np.int64)
    # work: the cells, each touching some sixteen columns of its entry
    got = kernels.recall_served.on(16 * slots.size)(slots, np.ascontiguousarray(shadow, dtype=np.int64),
                                np.int64(now_ms), c["last_access_ms"], c["access_count"], c["acted_on_count"],
                                gr.acted_lo, gr.acted_hi,
                                *(c[name] for name in SERVED_COLUMNS[:-1]),   # access_count is above
                                np.ascontiguousarray(tagged, dtype=np.bool_), np.asarray(factors, dtype=np.float64),
                                np.ascontiguousarray(context_topics, dtype=np.int64), float(cosine),
                                c["reactivated"], c["react_count"], c["last_react_ms"],
                                gr.recency, gr.charge, c["i0"], c["created_ms"], *gr.scan_constants())
    return dict(zip(SERVED_COLUMNS + ("shadow_id", "reactivated"), got))   # the kernel returns them in this order


def anti_rumination(slots: np.ndarray, scores: np.ndarray, valence: np.ndarray, pool: np.ndarray,
                    guard: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Reserve one slot for the best non-negative entry where the served set has none (SPEC §4.3).

    For each guarded row whose served entries are all negative and whose pool has a non-negative
    entry, that entry takes the last served position (in place). Returns (rows, positions) changed.
    The entry is never already served (it is non-negative, every served one negative). One pass
    over the rows (`kernels.anti_rumination`)."""
    return kernels.anti_rumination(slots, scores, valence, pool, np.ascontiguousarray(guard, dtype=np.bool_))


__all__ = ["four_factor_score", "weighted_score", "six_factor_score", "RetrievalParams", "reference_retrieve",
           "retrieve", "recall", "anti_rumination", "entry_factors", "served_factors", "query_codes", "query_terms",
           "semantic"]


# --- alternative profiles: six-factor [C] and somatic HDC (§11) ------------------------------------

SIX_SPREAD_SEEDS = 5


def six_factor_weights(cfg) -> tuple[float, ...]:
    r = cfg.retrieval
    return (r.six_relevance, r.six_strength, r.six_recency, r.six_spreading, r.six_context, r.six_salience)


def _retrieve_profile(gr: Grimoire, golems: np.ndarray, queries: np.ndarray, cur_pad: np.ndarray, now_ms: int,
                      prm: RetrievalParams, scorer) -> RetrievalResult:
    """Shared loop of the alternative profiles: eligibility, ranking, shadow, pool statistics.

    `scorer(i, slots, relevance, age_ms)` returns (score, factors (n, 4)) for Golem i's eligible
    slots. The emotional factor (PAD cosine) feeds the pool statistics so every profile reports the
    same mood-congruence measures.
    """
    golems = np.asarray(golems, dtype=np.int64)
    b, k = golems.size, prm.top_k
    out = RetrievalResult(np.full((b, k), -1, np.int64), np.full((b, k), -np.inf), np.full((b, k, 4), np.nan),
                          np.full((b, k), -1, np.int64), np.zeros((b, kernels.POOL_COLUMNS)))
    out.pool[:, kernels.POOL_BEST_SEMANTIC] = -np.inf
    c = gr.cols
    for i, g in enumerate(golems):
        sl = gr.slab(int(g))
        s = np.arange(sl.start, sl.stop)
        age = now_ms - c["last_access_ms"][s]
        ok = (c["id"][s] >= 0) & (c["status"][s] != ARCHIVED) & (age < 2.0 * c["window_ms"][s])
        s, age = s[ok], age[ok]
        if s.size == 0:
            continue
        rel = gr.emb[s].astype(np.float64) @ queries[i].astype(np.float64)
        score, factors = scorer(i, s, rel, age)
        cu = cur_pad[i] / max(np.linalg.norm(cur_pad[i]), 1e-8)
        u = gr.unit_pad(s)
        pc = (u[:, 0] * cu[0] + u[:, 1] * cu[1] + u[:, 2] * cu[2] + 1.0) / 2.0
        order = np.lexsort((s, -score))[:k]
        n = order.size
        out.slots[i, :n] = s[order]
        out.scores[i, :n] = score[order]
        out.factors[i, :n] = factors[order]
        sh = np.lexsort((s, -score * (1 + c["salience"][s] * prm.salience_cap)))[:k]
        out.shadow[i, :sh.size] = s[sh]
        val = np.where(c["has_tag"][s], c["p"][s], 0.0)
        nn = np.flatnonzero(val >= 0)
        best = nn[np.lexsort((s[nn], -score[nn]))[0]] if nn.size else -1
        out.pool[i] = (s.size, pc.sum(), val.sum(), s[best] if best >= 0 else -1, score[best] if best >= 0 else -np.inf,
                       rel.max())
    out.tagged, out.valence = served_valence(gr, out.slots)
    return out


def retrieve_six(gr: Grimoire, golems: np.ndarray, queries: np.ndarray, cur_pad: np.ndarray, now_ms: int,
                 prm: RetrievalParams, weights: tuple[float, ...], assets: np.ndarray, regime: int,
                 event_topics: list[set[int]]) -> RetrievalResult:
    """The six-factor profile (SPEC §4.1 [C]), for comparison with four-factor on the same tape.

    relevance = cosine; decayed_strength = confidence x retention 2^(-age/window) (1 for structural);
    recency = 0.995^hours; spreading = activation passed over links from the top-5 semantic hits
    (each hit passes its relevance to the entries it links to, capped at 1); context_match = share of
    the current context's tags (asset, regime, and each event kind seen now) the entry carries;
    salience. Factors recorded: [relevance, recency, decayed_strength, emotional (PAD cosine)].
    """
    c = gr.cols
    w = np.asarray(weights)

    def scorer(i, s, rel, age):
        retention = np.where(np.isinf(c["window_ms"][s]), 1.0, 2.0 ** (-age / np.maximum(c["window_ms"][s], 1.0)))
        strength = c["confidence"][s] * retention
        rec = prm.temporal_base ** (age / HOUR_MS)
        spread = np.zeros(s.size)
        if gr.links:
            ids = c["id"][s]
            pos = {int(e): j for j, e in enumerate(ids)}
            for j in np.argsort(-rel, kind="stable")[:SIX_SPREAD_SEEDS]:
                for linked in gr.links.get(int(ids[j]), ()):
                    if linked in pos:
                        spread[pos[linked]] += max(rel[j], 0.0)
            spread = np.minimum(spread, 1.0)
        tags = 2 + len(event_topics[i])
        ctx = ((c["scope"][s] == assets[i]).astype(float) + (c["regime"][s] == regime)
               + np.isin(c["topic"][s], list(event_topics[i])).astype(float)) / tags
        score = w[0] * rel + w[1] * strength + w[2] * rec + w[3] * spread + w[4] * ctx + w[5] * c["salience"][s]
        cu = cur_pad[i] / max(np.linalg.norm(cur_pad[i]), 1e-8)
        u = gr.unit_pad(s)
        pc = (u[:, 0] * cu[0] + u[:, 1] * cu[1] + u[:, 2] * cu[2] + 1.0) / 2.0
        return score, np.stack([rel, rec, strength, pc], axis=1)

    return _retrieve_profile(gr, golems, queries, cur_pad, now_ms, prm, scorer)


def retrieve_somatic_hdc(gr: Grimoire, golems: np.ndarray, queries: np.ndarray, cur_pad: np.ndarray, now_ms: int,
                         prm: RetrievalParams, state_fps: np.ndarray) -> RetrievalResult:
    """Somatic-enhanced retrieval (SPEC §11): 0.30 recency + 0.30 importance + 0.25 relevance +
    0.15 HDC similarity between the entry's fingerprint and the Golem's current affective state
    (`prm.somatic_weights`). Factors recorded: [relevance, recency, importance, hdc_similarity]."""
    from golem import hdc
    c = gr.cols
    w_rec, w_imp, w_rel, w_sim = prm.somatic_weights

    def scorer(i, s, rel, age):
        sim = hdc.hamming_similarity_batch(state_fps[i], gr.fp[s])
        rec = prm.temporal_base ** (age / HOUR_MS)
        imp = c["importance"][s].astype(np.float64)
        score = w_rec * rec + w_imp * imp + w_rel * rel + w_sim * sim
        return score, np.stack([rel, rec, imp, sim], axis=1)

    return _retrieve_profile(gr, golems, queries, cur_pad, now_ms, prm, scorer)


def hdc_search(gr: Grimoire, g: int, query_fp: np.ndarray, k: int = 8) -> list[tuple[int, float]]:
    """Compositional query over Golem g's fingerprints: [(entry id, similarity)], best first."""
    from golem import hdc
    c = gr.cols
    sl = gr.slab(g)
    live = np.flatnonzero(c["id"][sl] >= 0) + sl.start
    ids, sims = hdc.hamming_topk(query_fp, np.ascontiguousarray(gr.fp[live]), min(k, live.size))
    return [(int(c["id"][live[j]]), float(v)) for j, v in zip(ids, sims)]
