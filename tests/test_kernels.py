"""The fused retrieval kernel (golem.kernels.retrieve_batch via golem.retrieval.retrieve) against
the scalar reference (golem.retrieval.reference_retrieve: the SPEC §4.1 formulas entry by entry,
on what the Grimoire stores), and what is stored against the SPEC formulas on the columns.

Same ids in the same order, the same scores and four factors bit for bit, on random arenas; the
salience shadow ranking and the eligible pool's statistics against a plain Python computation; the
stored scan terms (recency, charge) within float32's rounding of the formulas.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from golem import kernels
from golem import retrieval as rt
from golem.grimoire import ARCHIVED, DAY_MS, STALE, Grimoire, quantise

TOL = 1e-9
NOW = 50 * DAY_MS
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ----------------------------------------------------------------------------- random arenas
@st.composite
def arenas(draw, caps=(1, 48)):
    """A Grimoire with everything retrieval looks at drawn at random, plus one query per Golem."""
    n_golems = draw(st.integers(1, 4))
    cap = draw(st.integers(*caps))
    dim = draw(st.integers(4, 64))
    seed = draw(st.integers(0, 2**32 - 1))
    p_tag = draw(st.sampled_from([0.0, 0.1, 0.5, 1.0]))   # 0.1: the kernel gathers a block's few tagged entries
    p_react = draw(st.sampled_from([0.0, 0.5]))
    p_dead = draw(st.sampled_from([0.0, 0.2]))         # archived, expired, at the expiry boundary
    p_zero_pad = draw(st.sampled_from([0.0, 0.3]))     # tagged with a zero PAD vector
    p_dup = draw(st.sampled_from([0.0, 0.3]))          # exact copies of an earlier entry (ties)
    rng = np.random.default_rng(seed)
    gr = Grimoire(n_golems, cap, dim)
    c = gr.cols
    n = n_golems * cap
    gr.count[:] = rng.integers(0, cap + 1, n_golems)
    gr.count[rng.integers(n_golems)] = cap              # at least one full slab
    gr.emb[:] = _unit(rng.standard_normal((n, dim))).astype(np.float32)
    c["id"][:] = np.arange(n)
    c["created_ms"][:] = NOW - rng.integers(0, 20 * DAY_MS, n)
    c["last_access_ms"][:] = NOW - rng.integers(0, 8 * DAY_MS, n)
    c["last_access_ms"][rng.uniform(size=n) < 0.1] = NOW            # just recalled: temporal 1
    c["window_ms"][:] = rng.uniform(0.5, 10, n) * DAY_MS
    c["window_ms"][rng.uniform(size=n) < 0.1] = math.inf              # structural
    c["status"][:] = rng.choice([0, STALE], n)
    c["importance"][:] = rng.uniform(0, 1, n)
    c["salience"][:] = rng.uniform(0, 1, n)
    c["confidence"][:] = rng.uniform(0, 1, n)
    tag = rng.uniform(size=n) < p_tag
    c["has_tag"][:] = tag
    for k in "pad":
        c[k][:] = rng.uniform(-1, 1, n)                               # untagged: ignored garbage
    zero = tag & (rng.uniform(size=n) < p_zero_pad)
    for k in "pad":
        c[k][zero] = 0.0
    c["i0"][:] = np.where(tag, rng.uniform(0, 1, n), 0.0)
    c["i0"][tag & (rng.uniform(size=n) < 0.05)] = 0.0                 # a tag with no charge
    react = rng.uniform(size=n) < p_react
    c["reactivated"][:] = react
    # reactivated with a timestamp, or flagged without one (-1: no boost)
    c["last_react_ms"][:] = np.where(react & (rng.uniform(size=n) < 0.7), NOW - rng.integers(0, 4 * DAY_MS, n), -1)
    dead = rng.uniform(size=n) < p_dead
    kind = rng.integers(0, 3, n)
    c["status"][dead & (kind == 0)] = ARCHIVED
    c["last_access_ms"][dead & (kind == 1)] = NOW - 30 * DAY_MS       # past twice the window: expired
    c["window_ms"][dead & (kind == 1)] = DAY_MS
    edge = dead & (kind == 2)                                          # age exactly twice the window
    c["window_ms"][edge] = DAY_MS
    c["last_access_ms"][edge] = NOW - 2 * DAY_MS
    dup = np.flatnonzero(rng.uniform(size=n) < p_dup)
    for s in dup:
        src = int(rng.integers(0, s + 1))
        for col in c.values():
            col[s] = col[src]
        gr.codes[s] = gr.codes[src]
    gr.refresh_scan()                                                  # the columns were written directly
    q = _unit(rng.standard_normal((n_golems, dim))).astype(np.float32)
    pad = rng.uniform(-1, 1, (n_golems, 3))
    pad[rng.uniform(size=n_golems) < 0.15] = 0.0                       # a calm Golem: zero PAD query
    return gr, q, pad


def _unit(x):
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def _params(**keys) -> rt.RetrievalParams:
    """RetrievalParams as the engine builds them: from a config (the defaults with `section.key`
    values), so the tests exercise the config -> engine wiring too."""
    from golem.config import build_config, default_table
    tree = {k: dict(v) for k, v in default_table().items()}
    for key, v in keys.items():
        section, name = key.split("__")
        tree[section][name] = v
    return rt.RetrievalParams.from_config(build_config(tree))


params = st.builds(
    _params,
    retrieval__top_k=st.integers(1, 12),
    retrieval__charge_fading=st.booleans(),
    retrieval__salience_rank=st.sampled_from(["off", "shadow", "live"]),
    retrieval__salience_rank_cap=st.sampled_from([0.0, 0.25, 0.6]),
    decay__half_life_days=st.sampled_from([0.5, 3.0]),
    decay__reactivation_boost=st.sampled_from([0.3, 0.7]),
    retrieval__temporal_base=st.sampled_from([0.995, 0.9]),
    retrieval__w_semantic=st.sampled_from([0.40, 0.6]),
    retrieval__w_emotional=st.sampled_from([0.15, 0.3]),
)


def test_retrieval_params_come_from_their_config_keys():
    prm = _params(retrieval__top_k=5, retrieval__w_semantic=0.1, retrieval__w_temporal=0.2, retrieval__w_importance=0.3,
                  retrieval__w_emotional=0.4, retrieval__temporal_base=0.9, decay__half_life_days=2.0,
                  decay__reactivation_boost=0.7, retrieval__charge_fading=False, retrieval__salience_rank_cap=0.6,
                  retrieval__salience_rank="live", retrieval__hdc_recency=0.1, retrieval__hdc_importance=0.2,
                  retrieval__hdc_relevance=0.3, retrieval__hdc_similarity=0.4)
    assert prm == rt.RetrievalParams(top_k=5, weights=(0.1, 0.2, 0.3, 0.4), temporal_base=0.9, half_life_days=2.0,
                                     reactivation_boost=0.7, charge_fading=False, salience_cap=0.6, live=True,
                                     somatic_weights=(0.1, 0.2, 0.3, 0.4))
    assert _params(retrieval__salience_rank="shadow").live is False


filters = st.tuples(st.sampled_from([None, 0.0, 0.3, 0.6]), st.sampled_from([0, 1, -1]))


# ----------------------------------------------------------------------------- Python computations
def eligible_rows(gr, g, q, pad, prm, min_conf, vs):
    """(slot, plain score, factors, valence) of every eligible entry, from the reference formulas."""
    c = gr.cols
    keep = {s for s, _, _ in rt.reference_retrieve(gr, g, q, tuple(pad), NOW,
                                                   _replace(prm, top_k=gr.capacity, live=False), min_conf, vs)}
    rows = []
    for s in range(g * gr.capacity, g * gr.capacity + int(gr.count[g])):
        if s not in keep:
            continue
        sem, temporal, imp, emo = rt.entry_factors(gr, s, q, tuple(pad), NOW, prm)
        w = prm.weights
        score = w[0] * sem + w[1] * temporal + w[2] * imp + w[3] * emo
        val = float(c["p"][s]) if c["has_tag"][s] else 0.0
        rows.append((s, score, emo, val))
    return rows


def _replace(prm, **kw):
    from dataclasses import replace
    return replace(prm, **kw)


def ranked(rows, key, k):
    return [s for s, _ in sorted(((r[0], key(r)) for r in rows), key=lambda x: (-x[1], x[0]))[:k]]


# ----------------------------------------------------------------------------- properties
@FAST
@given(arenas(), params, filters)
def test_kernel_agrees_with_reference(arena, prm, flt):
    gr, q, pad = arena
    min_conf, vs = flt
    golems = np.arange(gr.n_golems)[::-1].copy()        # any order of Golems in a batch
    res = rt.retrieve(gr, golems, q[golems], pad[golems], NOW, prm, min_conf=min_conf,
                      valence_sign=np.full(golems.size, vs))
    for i, g in enumerate(golems):
        ref = rt.reference_retrieve(gr, int(g), q[g], tuple(pad[g]), NOW, prm, min_conf=min_conf, valence_sign=vs)
        got = [int(s) for s in res.slots[i] if s >= 0]
        assert got == [s for s, _, _ in ref]
        for r, (s, score, fac) in enumerate(ref):
            # the same integers and float operations on the same stored terms: bit for bit
            assert res.scores[i, r] == score
            assert res.factors[i, r].tolist() == list(fac), (res.factors[i, r], fac)
        assert np.all(res.slots[i, len(ref):] == -1)


@FAST
@given(arenas(), params, filters)
def test_shadow_ranking_and_pool_statistics(arena, prm, flt):
    gr, q, pad = arena
    min_conf, vs = flt
    c = gr.cols
    golems = np.arange(gr.n_golems)
    res = rt.retrieve(gr, golems, q, pad, NOW, prm, min_conf=min_conf, valence_sign=np.full(golems.size, vs))
    for g in golems:
        rows = eligible_rows(gr, int(g), q[g], pad[g], prm, min_conf, vs)
        mult = {r[0]: 1.0 + float(c["salience"][r[0]]) * prm.salience_cap for r in rows}
        shadow = ranked(rows, lambda r: r[1] * mult[r[0]], prm.top_k)
        assert [int(s) for s in res.shadow[g] if s >= 0] == shadow
        n, sum_emo, sum_val, best, best_score, best_sem = res.pool[g]
        assert n == len(rows)
        # the pool's best semantic match (novelty): the largest cosine among the eligible entries
        sems = [rt.entry_factors(gr, r[0], q[g], tuple(pad[g]), NOW, prm)[0] for r in rows]
        assert best_sem == (max(sems) if sems else -np.inf)
        assert abs(sum_emo - sum(r[2] for r in rows)) <= 1e-12 * max(1, len(rows))
        assert abs(sum_val - sum(r[3] for r in rows)) <= 1e-12 * max(1, len(rows))
        nonneg = [r for r in rows if r[3] >= 0]
        if nonneg:
            top = ranked(nonneg, lambda r: r[1], 1)[0]
            assert best == top
            assert best_score == next(r[1] for r in nonneg if r[0] == top)
        else:
            assert best == -1 and best_score == -np.inf


@FAST
@given(arenas(), params)
def test_repeatable_and_batch_independent(arena, prm):
    """A Golem's result does not depend on who else is in the batch, nor on the call."""
    gr, q, pad = arena
    golems = np.arange(gr.n_golems)
    a = rt.retrieve(gr, golems, q, pad, NOW, prm)
    for g in golems:
        b = rt.retrieve(gr, np.array([g]), q[g:g + 1], pad[g:g + 1], NOW, prm)
        for name in ("slots", "scores", "factors", "shadow", "pool"):
            np.testing.assert_array_equal(getattr(a, name)[g], getattr(b, name)[0])


# ----------------------------------------------------------------------------- the pieces
@settings(max_examples=200, deadline=None)
@given(st.integers(1, 400), st.integers(0, 2**32 - 1), st.booleans())
def test_dot_products_are_the_integer_sums(d, seed, extreme):
    """The kernel's dot products of ROWS rows (pmaddwd where the CPU has it, the plain-IR twin, the
    scalar loop for the arena's last rows) and the stored squared norms = Python's integer sums;
    and the semantic factor of the kernel = `rt.semantic` bit for bit. `extreme`: every code at
    +-127 and the query at its largest, the int32 bound of `kernels.query_max`."""
    rng = np.random.default_rng(seed)
    gr = Grimoire(1, 40, d)
    v = rng.choice([-1.0, 1.0], (40, d)) if extreme else rng.standard_normal((40, d))
    gr.codes[:] = quantise(v, gr.codes.shape[1])
    gr.refresh_scan()
    qv = (rng.choice([-1.0, 1.0], (3, d)) if extreme else rng.standard_normal((3, d))).astype(np.float32)
    qc, qs = rt.query_codes(qv, gr.codes.shape[1])
    assert np.abs(qc).max() <= kernels.query_max(gr.codes.shape[1])
    row0 = int(rng.integers(0, 40 - kernels.ROWS + 1))
    want_d = [sum(int(a) * int(b) for a, b in zip(gr.codes[row0 + r], qc[2])) for r in range(kernels.ROWS)]
    want_n = [sum(int(a) ** 2 for a in gr.codes[row0 + r]) for r in range(kernels.ROWS)]
    for generic in (False, True):
        dv, ds = kernels.dots_rows(gr.codes, row0, qc, 2, generic)
        assert dv.tolist() == want_d and ds.tolist() == want_d
    assert gr.norm2[row0:row0 + kernels.ROWS].tolist() == want_n
    gr.count[0] = 40
    gr.cols["window_ms"][:] = math.inf
    gr.cols["importance"][:] = 0.5
    res = rt.retrieve(gr, np.array([0]), qv[2:3], np.zeros((1, 3)), NOW, rt.RetrievalParams(top_k=40))
    for r, s in enumerate(res.slots[0]):
        assert res.factors[0, r, 0] == rt.semantic(gr.codes[s], qc[2], qs[2])


def test_semantic_factor_by_hand():
    """cos of the stored codes with the query codes: codes (127, 0, ...) against the axis are 1
    exactly; codes (3, 4) against (1, 0): 3 * 32767 / (32767 * 5) = 0.6; zero codes give 0."""
    gr = Grimoire(1, 3, 4)
    gr.emb[0] = [2.0, 0, 0, 0]
    gr.codes[1, :4] = [3, 4, 0, 0]
    gr.refresh_scan([1])
    qc, qs = rt.query_codes(np.array([[1, 0, 0, 0]], np.float32), gr.codes.shape[1])
    assert qc[0, :4].tolist() == [32767, 0, 0, 0] and qs[0] == 32767.0
    assert gr.codes[0, :4].tolist() == [127, 0, 0, 0]
    assert rt.semantic(gr.codes[0], qc[0], qs[0]) == 1.0
    assert rt.semantic(gr.codes[1], qc[0], qs[0]) == 0.6
    assert rt.semantic(gr.codes[2], qc[0], qs[0]) == 0.0
    gr.count[0] = 3
    gr.cols["window_ms"][:3] = math.inf
    res = rt.retrieve(gr, np.array([0]), np.array([[1, 0, 0, 0]], np.float32), np.zeros((1, 3)), NOW,
                      rt.RetrievalParams(top_k=3))
    assert res.slots[0].tolist() == [0, 1, 2] and res.factors[0, :, 0].tolist() == [1.0, 0.6, 0.0]


def test_exp2_within_an_ulp_or_two():
    x = np.concatenate([np.linspace(-1100, 1100, 400_001), np.random.default_rng(0).uniform(-60, 5, 200_000),
                        [0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 1e-300, -1e-300]])
    out = kernels.exp2_array(x, np.empty_like(x))
    inside = (x > -1022) & (x < 1023)
    ref = np.exp2(x[inside])
    assert np.max(np.abs(out[inside] - ref) / ref) <= 4.5e-16
    assert np.all(out[x == 0.0] == 1.0)               # exp2(0) is exactly 1: a just-recalled entry
    assert np.all(out[x <= -1022] <= 2.3e-308) and np.all(out[x <= -1022] >= 0)
    assert np.all(np.isfinite(out))


def test_untagged_and_zero_pad_are_neutral():
    gr = Grimoire(1, 4, 8)
    rng = np.random.default_rng(3)
    gr.count[0] = 4
    gr.emb[:] = _unit(rng.standard_normal((4, 8))).astype(np.float32)
    c = gr.cols
    c["id"][:4] = np.arange(4)
    c["created_ms"][:4] = NOW - DAY_MS
    c["last_access_ms"][:4] = NOW
    c["window_ms"][:4] = 10 * DAY_MS
    c["has_tag"][:4] = [False, True, True, False]
    c["p"][:4] = [0.9, 0.0, 0.5, -0.7]        # untagged entries' P, A, D are never read
    c["a"][:4] = [0.5, 0.0, 0.5, 0.9]
    c["i0"][:4] = [0.0, 0.5, 0.5, 0.0]
    gr.refresh_scan()
    res = rt.retrieve(gr, np.array([0]), np.ones((1, 8), np.float32) / np.sqrt(8), np.array([[0.5, 0.5, 0.5]]),
                      NOW, _params(retrieval__top_k=4))
    emo = {int(s): res.factors[0, r, 3] for r, s in enumerate(res.slots[0])}
    assert emo[0] == 0.5 and emo[1] == 0.5 and emo[3] == 0.5
    assert emo[2] > 0.5
    assert res.pool[0, 0] == 4 and res.pool[0, 2] == pytest.approx(0.5)   # valence: tagged only


def test_bytes_per_entry_is_o_d():
    """SPEC §3.5: memory per Grimoire entry <= 2 d + 128 bytes (d codes and the columns)."""
    for d in (64, 384):
        assert Grimoire(2, 8, d).bytes_per_entry() <= 2 * d + 128


def test_parallel_kernel_is_the_serial_kernel():
    """Large batches run their Golems on numba's threads: same bits as one thread."""
    import numba
    rng = np.random.default_rng(11)
    gr = Grimoire(40, 2048, 16)
    n = gr.n_golems * gr.capacity
    c = gr.cols
    gr.count[:] = rng.integers(1500, 2049, gr.n_golems)
    gr.emb[:] = _unit(rng.standard_normal((n, 16))).astype(np.float32)
    c["id"][:] = np.arange(n)
    c["created_ms"][:] = NOW - rng.integers(0, 20 * DAY_MS, n)
    c["last_access_ms"][:] = NOW - rng.integers(0, 8 * DAY_MS, n)
    c["window_ms"][:] = 5 * DAY_MS
    c["importance"][:] = rng.uniform(0, 1, n)
    c["salience"][:] = rng.uniform(0, 1, n)
    c["has_tag"][:] = rng.uniform(size=n) < 0.6
    for k in "pad":
        c[k][:] = rng.uniform(-1, 1, n)
    c["i0"][:] = rng.uniform(0, 1, n)
    gr.refresh_scan()
    golems = rng.permutation(gr.n_golems)
    q = _unit(rng.standard_normal((golems.size, 16))).astype(np.float32)
    pad = rng.uniform(-1, 1, (golems.size, 3))
    assert int(gr.count[golems].sum()) >= kernels.PARALLEL_MIN_WORK
    prm = _params()
    threads = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = rt.retrieve(gr, golems, q, pad, NOW, prm)
    finally:
        numba.set_num_threads(threads)
    many = rt.retrieve(gr, golems, q, pad, NOW, prm)
    names = ("slots", "scores", "factors", "shadow", "pool", "tagged", "valence")
    qc, qs = rt.query_codes(q, gr.codes.shape[1])
    tau, gamma = rt.query_terms(gr, NOW)
    for name in names:
        np.testing.assert_array_equal(getattr(one, name), getattr(many, name))
    for compiled in (kernels.retrieve_batch.serial, kernels.retrieve_batch.parallel):   # whatever retrieve() chose
        out = [np.zeros_like(getattr(one, name)) for name in names]
        compiled(golems, gr.count, gr.capacity, qc, qs, pad, np.zeros(golems.size, np.int8), np.int64(NOW), tau,
                 gamma, gr.codes, gr.norm2, c["last_access_ms"], c["window_ms"], c["status"], c["importance"],
                 c["salience"], c["confidence"], c["has_tag"], c["p"], c["a"], c["d"], gr.recency, gr.charge,
                 np.asarray(prm.weights), prm.charge_fading, prm.top_k, prm.salience_cap, -1.0, prm.live, *out)
        for name, got in zip(names, out):
            np.testing.assert_array_equal(getattr(one, name), got)


@FAST
@given(arenas(), params, st.integers(0, 2**32 - 1))
def test_served_factors_are_entry_factors_bit_for_bit(arena, prm, seed):
    """The vectorised factors of served entries (decide, anti-rumination) = the scalar reference."""
    gr, q, pad = arena
    rng = np.random.default_rng(seed)
    golem = rng.integers(0, gr.n_golems, 40)
    slots = golem * gr.capacity + rng.integers(0, gr.capacity, 40)
    got = rt.served_factors(gr, slots, q[golem], pad[golem], NOW, prm)
    for i, (g, s) in enumerate(zip(golem, slots)):
        assert got[i].tolist() == list(rt.entry_factors(gr, int(s), q[g], tuple(pad[g]), NOW, prm))


def _numpy_reactivate(cols: dict, slots, tagged, semantic, entry_topic, context_topics, now_ms, cosine):
    """Reactivation (SPEC §2.6) as array expressions, the reference of `recall`'s pass: served,
    tagged, semantic factor (NaN as -1) >= cosine, the entry's topic among the context's."""
    sem = np.nan_to_num(semantic, nan=-1.0)
    same_topic = (entry_topic[:, :, None] == context_topics[:, None, :]).any(axis=2)
    react = tagged & (slots >= 0) & (sem >= cosine) & same_topic
    rs = slots[react]
    cols["reactivated"][rs] = True
    cols["react_count"][rs] += 1
    cols["last_react_ms"][rs] = now_ms
    return react


@FAST
@given(arenas(), params, st.integers(0, 2**32 - 1), st.booleans())
def test_recall_is_the_numpy_scatters_then_gathers(arena, prm, seed, replace_one):
    """decide's one-pass recall = numpy: last_access = now and access_count, acted_on_count + 1 at
    every served slot, now at acted_on_count - 1 (mod the ring) of its act-time ring, then
    column[safe] for each served column (safe = the slot, 0 where none) in the column's dtype and
    the ids at the shadow slots; and it re-lives the cells `_numpy_reactivate` does (NaN semantic
    factors, topics that match and not, a react_count at int16's top), or none without a context."""
    gr, q, pad = arena
    rng = np.random.default_rng(seed)
    c = gr.cols
    n = c["id"].size
    c["topic"][:] = rng.integers(-2**31, 2**31 - 1, n) if replace_one else rng.integers(-2, 4, n)
    c["reactivated"][:] = rng.uniform(size=n) < 0.3
    c["react_count"][:] = rng.choice(np.array([0, 5, 32767], np.int16), n)
    c["last_react_ms"][:] = rng.integers(-1, NOW, n)
    c["has_outcome"][:] = rng.uniform(size=n) < 0.5
    c["outcome"][:] = rng.standard_normal(n)
    for name in ("access_count", "acted_on_count"):
        c[name][:] = rng.integers(0, 50, n)
    gr.refresh_scan()
    res = rt.retrieve(gr, np.arange(gr.n_golems), q, pad, NOW, prm)
    slots = res.slots.copy()
    if replace_one and (slots[0] >= 0).any():     # as anti-rumination does: a served cell changes
        free = np.setdiff1d(np.arange(gr.count[0]), slots[0])
        if free.size:
            slots[0, np.flatnonzero(slots[0] >= 0)[-1]] = free[0]
    want = {k: v.copy() for k, v in c.items()}
    s = slots[slots >= 0]
    want["access_count"][s] += 1
    want["acted_on_count"][s] += 1
    gr.acted_lo[:], gr.acted_hi[:] = rng.integers(0, 2**32, gr.acted_lo.shape), rng.integers(0, 2**16, gr.acted_hi.shape)
    acts = (gr.acted_hi.astype(np.int64) << 32) | gr.acted_lo
    now = NOW + 7 + (int(rng.integers(0, 2**16)) << 32)    # high bits too
    acts[s, (want["acted_on_count"][s] - 1) % acts.shape[1]] = now    # the act's time, at its place in the ring
    with_context = bool(rng.integers(0, 4))
    tagged = rng.uniform(size=slots.shape) < 0.6
    factors = res.factors.copy()
    factors[..., 0] = np.where(rng.uniform(size=slots.shape) < 0.2, np.nan, rng.uniform(-1, 1, slots.shape))
    topics = rng.integers(-2, 4, (slots.shape[0], int(rng.integers(0, 6))))
    cosine = float(rng.choice([0.8, 0.0, -1.0, -2.0]))
    if with_context:
        got = rt.recall(gr, slots, res.shadow, now, tagged, factors, topics, cosine)
        want_react = _numpy_reactivate(want, slots, tagged, factors[:, :, 0], want["topic"][np.where(slots >= 0, slots, 0)],
                                       topics, now, cosine)
    else:
        got = rt.recall(gr, slots, res.shadow, now)
        want_react = np.zeros(slots.shape, dtype=bool)
    np.testing.assert_array_equal(got["reactivated"], want_react)
    want["last_access_ms"][s] = now
    for name in want:
        np.testing.assert_array_equal(c[name], want[name], err_msg=name)
    assert gr.scan_is_current()          # the touched recencies and the re-lived charges followed
    np.testing.assert_array_equal((gr.acted_hi.astype(np.int64) << 32) | gr.acted_lo, acts)
    safe = np.where(slots >= 0, slots, 0)
    for name in rt.SERVED_COLUMNS:
        assert got[name].dtype == c[name].dtype, name
        np.testing.assert_array_equal(got[name], c[name][safe], err_msg=name)
    np.testing.assert_array_equal(got["shadow_id"], c["id"][np.maximum(res.shadow, 0)])


def test_served_factors_charge_with_a_reactivation_boost_by_hand():
    """A charged tag whose own charge has faded, lifted by a reactivation (SPEC §2.6): i0 0.75
    written 30 days ago (half-life 3 days: 0.75 * 2^-10 = 0.000732421875 left), reactivated 3 days
    ago (boost 0.3 * 2^-1 = 0.15); the mood matches the tag (cosine 1, raw factor 1), so the
    emotional factor is 0.5 + 0.5 * (0.150732421875 / 0.75) = 0.60048828125, and the temporal
    factor 0.995^10: both to float32's rounding of the stored recency and charge."""
    gr = Grimoire(1, 4, 4)
    c = gr.cols
    gr.count[0] = 1
    gr.emb[0] = [1, 0, 0, 0]
    c["id"][0] = 0
    c["has_tag"][0] = True
    c["p"][0], c["a"][0], c["d"][0] = 1.0, 0.0, 0.0
    c["i0"][0] = 0.75
    c["created_ms"][0] = NOW - 30 * DAY_MS
    c["last_access_ms"][0] = NOW - 10 * 3_600_000
    c["reactivated"][0] = True
    c["last_react_ms"][0] = NOW - 3 * DAY_MS
    c["importance"][0] = 0.5
    gr.refresh_scan()
    prm = _params()                                 # the spec's half-life 3 days and boost 0.3
    got = rt.served_factors(gr, np.array([0]), np.array([[1, 0, 0, 0]], np.float32), np.array([[1.0, 0.0, 0.0]]), NOW, prm)
    assert got[0, 0] == 1.0
    assert got[0, 1] == pytest.approx(0.995 ** 10, rel=2**-23)
    assert got[0, 2] == 0.5
    assert got[0, 3] == pytest.approx(0.60048828125, rel=2**-23)


def _spec_factors(gr, s, query, pad, now, prm):
    """The four factors of slot s straight from the SPEC formulas on its columns (float64, libm's
    pow), with the semantic factor of the stored codes: what the stored terms stand for."""
    from golem import pad as padm
    c = gr.cols
    qc, qs = rt.query_codes(query, gr.codes.shape[1])
    sem = rt.semantic(gr.codes[s], qc[0], qs[0])
    temporal = prm.temporal_base ** ((now - int(c["last_access_ms"][s])) / 3_600_000)
    emo = 0.5
    if c["has_tag"][s]:
        emo = padm.pad_cosine_safe((float(c["p"][s]), float(c["a"][s]), float(c["d"][s])), tuple(pad))
        if prm.charge_fading:
            i0, lr = float(c["i0"][s]), int(c["last_react_ms"][s])
            now_i = padm.emotional_intensity_at(i0, int(c["created_ms"][s]), now, bool(c["reactivated"][s]),
                                                lr if lr >= 0 else None, prm.half_life_days, prm.reactivation_boost)
            emo = padm.faded_emotional_factor(emo, padm.charge(i0, now_i))
    return sem, temporal, float(c["importance"][s]), emo


@FAST
@given(arenas(), params, st.integers(0, 2**32 - 1), st.sampled_from([0, 1, 40]))
def test_stored_terms_give_the_spec_factors_to_float32_rounding(arena, prm, seed, days_on):
    """What storing recency and charge as float32 does (docs/performance.md): each factor of
    `entry_factors` (the kernel's, bit for bit) is the SPEC formula's on the columns within 2^-23
    relative (temporal; below 2^-126, stored as 0) and 2^-22 absolute (emotional), at
    the arena's time and days later (past the epoch's span at a half-life of 0.5 days: a rebase)."""
    gr, q, pad = arena
    rng = np.random.default_rng(seed)
    now = NOW + days_on * DAY_MS
    slots = rng.integers(0, gr.n_golems * gr.capacity, 30)
    golem = slots // gr.capacity
    rt.served_factors(gr, slots, q[golem], pad[golem], now, prm)        # prepares the scan for now
    assert gr.scan_is_current() and abs(now - gr.epoch_ms) <= gr.rebase_span_ms()
    for s, g in zip(slots.tolist(), golem.tolist()):
        sem, temporal, imp, emo = rt.entry_factors(gr, s, q[g], tuple(pad[g]), now, prm)
        spec = _spec_factors(gr, s, q[g], pad[g], now, prm)
        assert sem == spec[0] and imp == spec[2]
        assert temporal == pytest.approx(min(1.0, spec[1]), rel=2**-23, abs=2**-126)   # below: stored as 0
        assert emo == pytest.approx(spec[3], abs=2**-22)


def test_scan_terms_by_hand():
    """recency = 0.995^-(hours since the epoch) and charge = i0 2^(days / 3) / i0 (+ the boost's
    0.3 2^(days / 3) / i0 once reactivated), in float32; zero codes have norm2 0, an untouched
    entry at the epoch recency 1. Terms below float32's smallest normal are stored as 0."""
    gr = Grimoire(1, 4, 4)
    c = gr.cols
    gr.codes[0, :4] = [3, 4, 0, 0]
    c["last_access_ms"][:4] = [0, 10 * 3_600_000, -100 * 3_600_000, -10**12]
    c["i0"][:4] = [0.5, 0.5, 0.25, 0.5]
    c["created_ms"][:4] = [0, 3 * DAY_MS, -6 * DAY_MS, -10**12]
    c["reactivated"][2] = True
    c["last_react_ms"][2] = 3 * DAY_MS
    gr.refresh_scan()
    assert gr.norm2.tolist() == [25, 0, 0, 0]
    assert gr.recency[0] == 1.0 and gr.recency[3] == 0.0
    assert gr.recency[1] == pytest.approx(0.995 ** -10, rel=2**-24)
    assert gr.recency[2] == pytest.approx(0.995 ** 100, rel=2**-24)
    assert gr.charge[0] == 1.0 and gr.charge[1] == 2.0 and gr.charge[3] == 0.0
    assert gr.charge[2] == pytest.approx((0.25 * 2.0 ** -2 + 0.3 * 2.0) / 0.25, rel=2**-24)     # 2.65


def test_writes_through_the_grimoire_keep_the_scan_terms_current(monkeypatch):
    """insert (new entries, evictions), the embeddings' setter and recall (touches, reactivation)
    refresh the terms they change; a direct write does not, and a checked retrieval says so."""
    rng = np.random.default_rng(5)
    gr = Grimoire(2, 6, 8)
    golem = np.repeat([0, 1], 8)                      # 8 each into slabs of 6: two evictions each
    vals = dict(created_ms=NOW - rng.integers(0, 9 * DAY_MS, 16), last_access_ms=NOW - rng.integers(0, 9 * DAY_MS, 16),
                i0=rng.uniform(0.1, 1, 16).astype(np.float32), has_tag=True, window_ms=30.0 * DAY_MS,
                importance=rng.uniform(0, 1, 16).astype(np.float32), confidence=np.float32(0.9))
    assert Grimoire(2, 6, 8).scan_is_current()          # a new arena's empty slots
    gr.insert(golem, rng.standard_normal((16, 8)), vals)
    assert gr.scan_is_current()
    gr.emb[3] = rng.standard_normal(8)
    gr.emb[[7, 8]] = rng.standard_normal((2, 8))
    assert gr.scan_is_current()
    prm = _params()
    res = rt.retrieve(gr, np.array([0, 1]), _unit(rng.standard_normal((2, 8))).astype(np.float32), np.ones((2, 3)),
                      NOW, prm)
    rt.recall(gr, res.slots, res.shadow, NOW + 1000, np.ones(res.slots.shape, bool), np.ones(res.slots.shape + (4,)),
              gr.cols["topic"][np.maximum(res.slots, 0)], 0.5)
    assert gr.cols["reactivated"].any() and gr.scan_is_current()
    gr.cols["last_access_ms"][2] -= DAY_MS               # behind the Grimoire's back
    assert not gr.scan_is_current()
    monkeypatch.setattr(rt, "CHECK_SCAN", True)          # each retrieval checks the next slot in CHECK_STRIDE
    with pytest.raises(AssertionError, match="stale scan terms"):
        for _ in range(rt.CHECK_STRIDE):
            rt.retrieve(gr, np.array([0]), np.ones((1, 8), np.float32), np.ones((1, 3)), NOW, prm)


def test_a_checked_retrieval_checks_the_occupied_slots_in_turn(monkeypatch):
    """GOLEM_CHECK_SCAN checks what the scan reads: the slots below each slab's count, one in
    CHECK_STRIDE per retrieval, the next residue each time (the empty rest of a slab never)."""
    gr = Grimoire(3, 16, 8)
    gr.count[:] = [0, 5, 16]
    seen = []
    monkeypatch.setattr(gr, "scan_is_current", lambda slots: seen.append(np.asarray(slots).tolist()) or True)
    monkeypatch.setattr(rt, "_checks", [0])
    for _ in range(rt.CHECK_STRIDE):
        rt._check_scan(gr, np.array([0, 1, 2]))
    assert seen == [[16, 20, 32, 36, 40, 44], [17, 33, 37, 41, 45], [18, 34, 38, 42, 46], [19, 35, 39, 43, 47]]
    assert sorted(sum(seen, [])) == [*range(16, 21), *range(32, 48)]


def test_refreshing_some_slots_gives_the_full_refresh():
    """refresh_scan(slots) recomputes exactly the terms at those slots (what the whole refresh
    gives); the embeddings' setter their norms."""
    rng = np.random.default_rng(11)
    gr = Grimoire(3, 40, 8)
    gr.count[:] = 40
    gr.emb[:] = _unit(rng.standard_normal((120, 8))).astype(np.float32)
    c = gr.cols
    c["i0"][:] = rng.uniform(0.1, 1, 120)
    c["created_ms"][:] = rng.integers(0, 5 * DAY_MS, 120)
    c["last_access_ms"][:] = rng.integers(0, 5 * DAY_MS, 120)
    c["reactivated"][::3] = True
    c["last_react_ms"][::3] = 5 * DAY_MS
    gr.refresh_scan()
    want = [gr.norm2.copy(), gr.recency.copy(), gr.charge.copy()]
    slots = rng.choice(120, 50, replace=False)
    gr.norm2[slots], gr.recency[slots], gr.charge[slots] = -1, -1.0, -1.0
    gr.refresh_scan(slots)
    for got, w in zip((gr.norm2, gr.recency, gr.charge), want):
        np.testing.assert_array_equal(got, w)
    gr.emb[5:9] = rng.standard_normal((4, 8))
    gr.emb[[20, 30]] = rng.standard_normal((2, 8))
    gr.emb[40] = rng.standard_normal(8)
    gr.emb[-1] = rng.standard_normal(8)
    gr.emb[-5:-2] = rng.standard_normal((3, 8))
    mask = np.zeros(120, bool)
    mask[[0, 77]] = True
    gr.emb[mask] = rng.standard_normal((2, 8))
    assert gr.scan_is_current()
    np.testing.assert_array_equal(gr.norm2, (gr.codes.astype(np.int64) ** 2).sum(axis=1))


def test_new_constants_and_a_far_now_recompute_the_terms():
    """A retrieval with other constants (another temporal base, half-life or boost) recomputes
    every term for them; one past the epoch's span moves the epoch to now and recomputes them, so
    the factors stay those of the formulas however long the run."""
    rng = np.random.default_rng(9)
    gr = Grimoire(1, 64, 8)
    gr.count[0] = 64
    gr.emb[:] = _unit(rng.standard_normal((64, 8))).astype(np.float32)
    c = gr.cols
    c["window_ms"][:] = math.inf
    c["has_tag"][:] = True
    c["p"][:] = 0.8
    c["i0"][:] = 0.6
    c["created_ms"][:] = rng.integers(0, 5 * DAY_MS, 64)
    c["last_access_ms"][:] = rng.integers(0, 5 * DAY_MS, 64)
    gr.refresh_scan()
    q, pad = _unit(rng.standard_normal((1, 8))).astype(np.float32), np.array([[0.7, 0.1, 0.1]])
    for prm, now in ((_params(), 6 * DAY_MS), (_params(retrieval__temporal_base=0.9, decay__half_life_days=0.5), 6 * DAY_MS),
                     (_params(), 400 * DAY_MS), (_params(), 40_000 * DAY_MS)):
        res = rt.retrieve(gr, np.array([0]), q, pad, now, prm)
        assert gr.scan_is_current()
        assert (gr.temporal_base, gr.half_life_ms) == (prm.temporal_base, prm.half_life_days * DAY_MS)
        assert abs(now - gr.epoch_ms) <= gr.rebase_span_ms()
        for r, s in enumerate(res.slots[0]):
            spec = _spec_factors(gr, int(s), q[0], pad[0], now, prm)
            assert res.factors[0, r, 1] == pytest.approx(min(1.0, spec[1]), rel=2**-23, abs=2**-126)
            assert res.factors[0, r, 3] == pytest.approx(spec[3], abs=2**-22)
    assert gr.epoch_ms == 40_000 * DAY_MS


def test_a_just_recalled_entry_has_temporal_factor_one():
    """0.995^0 = 1 (SPEC §4.1) whatever float32's rounding of the stored recency: an entry recalled
    at `now` and scored at `now`, for many times in the epoch's span (the product rounds above 1
    for some of them, and the factor is capped there)."""
    gr = Grimoire(1, 1, 4)
    gr.count[0] = 1
    gr.emb[0] = [1, 0, 0, 0]
    gr.cols["window_ms"][0] = math.inf
    prm = _params()
    q = np.array([[1, 0, 0, 0]], np.float32)
    for now in range(0, 90 * DAY_MS, 90 * DAY_MS // 257):
        rt.recall(gr, np.array([[0]]), np.array([[0]]), now)
        assert rt.served_factors(gr, np.array([0]), q, np.zeros((1, 3)), now, prm)[0, 1] == 1.0
        assert rt.retrieve(gr, np.array([0]), q, np.zeros((1, 3)), now, prm).factors[0, 0, 1] == 1.0
        # a few ms later (0.995^(1e-6 h) = 1 - 1.4e-9, well inside float32's rounding): at most 1
        assert all(rt.retrieve(gr, np.array([0]), q, np.zeros((1, 3)), now + ms, prm).factors[0, 0, 1] <= 1.0
                   for ms in range(1, 4))


def test_a_filling_shadow_list_walks_groups_the_served_list_skips():
    """The first block fills both lists at once; each 8-entry group is walked if either list can
    take one of its entries. Here the shadow's best (salience 1, cap 0.6: 0.4 x 1.6 = 0.64) sit in
    a group whose served scores (0.4) are below the served list's bound (0.5), so only the shadow
    list's own test lets them in."""
    gr = Grimoire(1, 256, 4)
    gr.count[0] = 256
    c = gr.cols
    c["window_ms"][:] = math.inf
    c["importance"][:8], c["importance"][8:16] = 0.9, 0.5          # score 0.2 + 0.25 imp + 0.075
    c["salience"][8:16] = 1.0
    prm = _params(retrieval__salience_rank_cap=0.6)
    res = rt.retrieve(gr, np.array([0]), np.array([[1, 0, 0, 0]], np.float32), np.zeros((1, 3)), 0, prm)
    assert res.slots[0].tolist() == list(range(8)) and res.scores[0].tolist() == pytest.approx([0.5] * 8, abs=1e-7)
    assert res.shadow[0].tolist() == list(range(8, 16))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(arenas(caps=(200, 700)), params, filters)
def test_kernel_agrees_with_reference_on_slabs_past_a_block(arena, prm, flt):
    """Slabs of several blocks, where a filling list is offered only entries not below the k-th
    best of the block's group maxima (`kernels._group_bound`), with copies of entries (ties):
    the same ids, order, scores and factors as the reference, and the same shadow ranking."""
    _agrees_with_reference(arena, prm, flt)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(arenas(caps=(kernels.SUPER + 1, kernels.SUPER + 400)), params, filters)
def test_kernel_agrees_with_reference_on_slabs_past_a_run_of_dot_products(arena, prm, flt):
    """Slabs longer than the SUPER entries whose dot products pass 1 computes in one run: the
    blocks after it read the next run's products, and agree with the reference all the same."""
    _agrees_with_reference(arena, prm, flt)


def _agrees_with_reference(arena, prm, flt):
    gr, q, pad = arena
    min_conf, vs = flt
    golems = np.arange(gr.n_golems)
    res = rt.retrieve(gr, golems, q, pad, NOW, prm, min_conf=min_conf, valence_sign=np.full(golems.size, vs))
    for g in golems:
        ref = rt.reference_retrieve(gr, int(g), q[g], tuple(pad[g]), NOW, prm, min_conf=min_conf, valence_sign=vs)
        assert [int(s) for s in res.slots[g] if s >= 0] == [s for s, _, _ in ref]
        assert [res.scores[g, r] for r in range(len(ref))] == [x[1] for x in ref]
        rows = eligible_rows(gr, int(g), q[g], pad[g], prm, min_conf, vs)
        mult = {r[0]: 1.0 + float(gr.cols["salience"][r[0]]) * prm.salience_cap for r in rows}
        assert [int(s) for s in res.shadow[g] if s >= 0] == ranked(rows, lambda r: r[1] * mult[r[0]], prm.top_k)


@FAST
@given(arenas(), params)
def test_served_valence_is_the_numpy_expressions(arena, prm):
    """served_valence = (served & has_tag[safe], np.where(tagged, p[safe], 0.0)), dtypes included;
    and the kernel's own copy of it (read at the end of each Golem's scan) is the same, on one
    thread and on numba's."""
    gr, q, pad = arena
    c = gr.cols
    res = rt.retrieve(gr, np.arange(gr.n_golems), q, pad, NOW, prm)
    served = res.slots >= 0
    safe = np.where(served, res.slots, 0)
    want_tagged = served & c["has_tag"][safe]
    want_val = np.where(want_tagged, c["p"][safe], 0.0)
    for tagged, val in (kernels.served_valence.serial(res.slots, c["has_tag"], c["p"]),
                        kernels.served_valence.parallel(res.slots, c["has_tag"], c["p"]),
                        rt.served_valence(gr, res.slots), (res.tagged, res.valence)):
        assert tagged.dtype == want_tagged.dtype and val.dtype == want_val.dtype
        np.testing.assert_array_equal(tagged, want_tagged)
        np.testing.assert_array_equal(val, want_val)


@FAST
@given(arenas(), params)
def test_every_retrieval_profile_gives_the_served_tags_and_valences(arena, prm):
    """The other profiles fill `tagged`/`valence` too (decide reads them from every retrieval)."""
    gr, q, pad = arena
    golems = np.arange(gr.n_golems)
    res = rt.retrieve_six(gr, golems, q, pad, NOW, prm, (0.38, 0.18, 0.08, 0.14, 0.14, 0.08),
                          np.zeros(golems.size, np.int64), 0, [set() for _ in golems])
    served = res.slots >= 0
    safe = np.where(served, res.slots, 0)
    np.testing.assert_array_equal(res.tagged, served & gr.cols["has_tag"][safe])
    np.testing.assert_array_equal(res.valence, np.where(res.tagged, gr.cols["p"][safe], 0.0))


@FAST
@given(st.integers(0, 2**32 - 1), st.integers(1, 12), st.integers(1, 8))
def test_validate_drivers_is_the_numpy_update(seed, golems, k):
    """Confidence propagation in one pass = the numpy expression it replaced: +0.1 / -0.2 (float32)
    for live drivers of moved markets, clipped to [0, 1]; removed entries, flat predictions and flat
    markets untouched; the cohort's driver rows cleared, the other Golems' kept."""
    rng = np.random.default_rng(seed)
    cap = 16
    pop_n = golems + int(rng.integers(0, 4))
    n = pop_n * cap
    ids = np.where(rng.uniform(size=n) < 0.1, -1, np.arange(n))
    conf = rng.choice([0.0, 0.05, 0.15, 0.5, 0.95, 1.0], n).astype(np.float32)
    drove = np.full((pop_n, k), -1, np.int64)
    for g in range(pop_n):
        m = int(rng.integers(0, k + 1))
        drove[g, :m] = g * cap + rng.choice(cap, m, replace=False)
    drove_sign = rng.integers(-1, 2, (pop_n, k)).astype(np.int8)
    ix = rng.permutation(pop_n)[:golems].astype(np.int64)
    sgn = rng.integers(-1, 2, golems)
    want = conf.copy()
    rows, signs = drove[ix], drove_sign[ix].astype(np.int64)
    live = (rows >= 0) & (signs != 0) & (sgn[:, None] != 0)
    s = rows[live]
    still = ids[s] >= 0
    agree = signs[live] == np.broadcast_to(sgn[:, None], rows.shape)[live]
    delta = np.where(agree, 0.1, -0.2)[still]
    want[s[still]] = np.clip(want[s[still]] + delta.astype(np.float32), 0.0, 1.0)
    want_drove = drove.copy()
    want_drove[ix] = -1
    kernels.validate_drivers(ix, drove, drove_sign, sgn, ids, conf, 0.1, 0.2)
    np.testing.assert_array_equal(conf, want)
    np.testing.assert_array_equal(drove, want_drove)


def _numpy_anti_rumination(slots, scores, valence, pool, guard, neg_share, ix):
    """SPEC §4.3 as the array expressions: the replacement, then the served counts, the safe slots
    and the window with this retrieval's negative share appended (the kernels' reference)."""
    served = slots >= 0
    best = pool[:, kernels.POOL_BEST_NONNEG].astype(np.int64)
    rows = np.flatnonzero(guard & served.any(axis=1) & (best >= 0) & ~(served & (valence >= 0)).any(axis=1))
    pos = slots.shape[1] - 1 - np.argmax(served[rows, ::-1], axis=1)
    slots[rows, pos] = best[rows]
    scores[rows, pos] = pool[rows, kernels.POOL_BEST_NONNEG_SCORE]
    served = slots >= 0
    nserved = served.sum(axis=1)
    share = np.where(nserved > 0, ((valence < 0) & served).sum(axis=1) / np.maximum(nserved, 1), 0.0)
    neg_share[ix] = np.concatenate([neg_share[ix][:, 1:], share[:, None]], axis=1)
    return rows, pos, nserved, np.where(served, slots, 0)


@FAST
@given(st.integers(0, 2**32 - 1), st.integers(1, 30), st.integers(1, 8), st.integers(1, 5))
def test_anti_rumination_kernels_are_the_numpy_expressions(seed, golems, k, window):
    """The guard, the replacement and the window (decide's anti-rumination in three passes) = the
    array expressions bit for bit: rows with nothing served, all negative, a non-negative one, no
    non-negative entry in the pool; shares at and around the threshold; a cohort that is a subset
    of the population in any order."""
    rng = np.random.default_rng(seed)
    n = golems + int(rng.integers(0, 5))
    ix = rng.permutation(n)[:golems].astype(np.int64)
    thr = float(rng.choice([0.0, 0.5, 0.7]))
    neg_share = rng.choice([0.0, 0.5, 0.6, 0.7, 0.71, 1.0, 1 / 3], (n, window))
    slots = rng.integers(0, 10_000, (golems, k))
    slots[rng.uniform(size=slots.shape) < rng.choice([0.0, 0.3, 1.0])] = -1
    valence = np.where(rng.uniform(size=slots.shape) < 0.7, -rng.uniform(0, 1, slots.shape), rng.choice([0.0, 0.4], slots.shape))
    valence = np.where(slots >= 0, valence, 0.0).astype(np.float32)
    scores = rng.uniform(size=slots.shape)
    pool = rng.uniform(size=(golems, kernels.POOL_COLUMNS))
    pool[:, kernels.POOL_BEST_NONNEG] = np.where(rng.uniform(size=golems) < 0.2, -1.0, rng.integers(0, 10_000, golems))
    guard = kernels.rumination_guard(ix, neg_share, thr)
    np.testing.assert_array_equal(guard, (neg_share[ix] > thr).all(axis=1))
    want_slots, want_scores, want_neg = slots.copy(), scores.copy(), neg_share.copy()
    want = _numpy_anti_rumination(want_slots, want_scores, valence, pool, guard, want_neg, ix)
    rows, pos = rt.anti_rumination(slots, scores, valence, pool, guard)
    nserved, safe = kernels.rumination_window(ix, slots, valence, neg_share)
    for got, exp in zip((rows, pos, nserved, safe, slots, scores, neg_share), want + (want_slots, want_scores, want_neg)):
        assert got.dtype == exp.dtype and got.shape == exp.shape
        assert got.tobytes() == exp.tobytes()


@FAST
@given(st.integers(0, 2**32 - 1), st.integers(1, 20), st.integers(1, 40))
def test_memory_signal_is_the_numpy_expressions(seed, golems, k):
    """decide's memory signal in one pass = the array expressions bit for bit (rows of up to 40
    served entries: numpy's pairwise sums past 8), and the drivers it leaves: slots with an
    outcome, their outcomes' signs (zero and negative zero outcomes, negative and NaN scores)."""
    rng = np.random.default_rng(seed)
    n = golems + int(rng.integers(0, 4))
    ix = rng.permutation(n)[:golems].astype(np.int64)
    slots = np.where(rng.uniform(size=(golems, k)) < 0.2, -1, rng.integers(0, 10_000, (golems, k)))
    scores = rng.choice([-0.3, 0.0, -0.0, 0.2, 0.7, np.nan, 1e-300], (golems, k)) * rng.uniform(0.5, 1.5, (golems, k))
    has_outcome = rng.uniform(size=(golems, k)) < 0.6
    confidence = rng.choice([0.0, 0.1, 0.5, 1.0, 0.3], (golems, k)).astype(np.float32)
    outcome = (rng.choice([-1.0, 0.0, -0.0, 1.0], (golems, k)) * rng.uniform(0, 2, (golems, k))).astype(np.float32)
    drove, drove_sign = np.full((n, k), 7, np.int64), np.full((n, k), 5, np.int8)
    has_out = (slots >= 0) & has_outcome
    wts = np.where(has_out, np.maximum(scores, 0.0) * confidence, 0.0)
    outc = np.where(has_out, outcome, 0.0)
    wsum = wts.sum(axis=1)
    mem = np.where(wsum > 0, (wts * outc).sum(axis=1) / np.maximum(wsum, 1e-12), 0.0)
    want_drove, want_sign = drove.copy(), drove_sign.copy()
    want_drove[ix] = np.where(has_out, slots, -1)
    want_sign[ix] = np.where(has_out, np.sign(outc), 0).astype(np.int8)
    pend = np.where(rng.uniform(size=(n, 3)) < 0.2, rng.integers(0, 10_000, (n, 3)), -1)
    got_mem, got_wsum, got_pending = kernels.memory_signal(ix, slots, scores, has_outcome, confidence, outcome, drove,
                                                           drove_sign, pend)
    assert got_wsum.tobytes() == wsum.tobytes() and got_mem.tobytes() == mem.tobytes()   # zeros' signs too
    np.testing.assert_array_equal(got_pending, (pend[ix] >= 0).any(axis=1))
    np.testing.assert_array_equal(drove, want_drove)
    np.testing.assert_array_equal(drove_sign, want_sign)


@FAST
@given(st.integers(0, 2**32 - 1), st.integers(1, 20), st.integers(1, 40), st.sampled_from([0.3, 0.7, 0.0, 1.0]))
def test_served_summary_is_the_numpy_expressions(seed, golems, k, low_flag):
    """A `retrievals` row's served columns in one pass = the array expressions bit for bit: masked
    ids, scores and shadow ids, the low-confidence flag as numpy compares float32 with a Python float
    (0.7 rounds down in float32: a confidence of float32(0.7) is below it there), the served means
    (float64 and float32 pairwise sums), the reactivated count and the pool's means."""
    rng = np.random.default_rng(seed)
    slots = np.where(rng.uniform(size=(golems, k)) < rng.choice([0.0, 0.3, 1.0]), -1, rng.integers(0, 9_999, (golems, k)))
    served = slots >= 0
    scores = rng.uniform(-1, 1, (golems, k))
    ids = np.where(served, rng.integers(0, 10**9, (golems, k)), 123)
    shadow = np.where(rng.uniform(size=(golems, k)) < 0.3, -1, rng.integers(0, 9_999, (golems, k)))
    shadow_id = rng.integers(0, 10**9, (golems, k))
    factors = rng.uniform(0, 1, (golems, k, 4))
    valence = np.where(served & (rng.uniform(size=(golems, k)) < 0.5), rng.uniform(-1, 1, (golems, k)), 0.0).astype(np.float32)
    react = served & (rng.uniform(size=(golems, k)) < 0.2)
    confidence = rng.choice(np.array([0.0, 0.3, 0.7, 0.69, 1.0], np.float32), (golems, k))
    access_count = rng.integers(0, 6, (golems, k)).astype(np.int32)
    pool = rng.uniform(0, 5, (golems, kernels.POOL_COLUMNS))
    pool[:, kernels.POOL_N] = rng.choice([0.0, 1.0, 3.0, 40.0], golems)
    got = kernels.served_summary(slots, scores, ids, shadow, shadow_id, factors[:, :, 3], valence, react, confidence,
                                 access_count, low_flag, 3, pool)
    nserved = served.sum(axis=1)
    low_conf = served & (confidence < low_flag) & (access_count >= 3)
    want = (np.where(served, ids, -1), np.where(served, scores, np.nan), np.where(shadow >= 0, shadow_id, -1),
            np.where(low_conf, ids, -1),
            np.where(nserved > 0, np.where(served, factors[:, :, 3], 0.0).sum(axis=1) / np.maximum(nserved, 1), np.nan),
            np.where(nserved > 0, valence.sum(axis=1) / np.maximum(nserved, 1), np.nan),
            react.sum(axis=1).astype(np.int64), pool[:, 0].astype(np.int64),
            np.where(pool[:, 0] > 0, pool[:, 1] / np.maximum(pool[:, 0], 1), np.nan),
            np.where(pool[:, 0] > 0, pool[:, 2] / np.maximum(pool[:, 0], 1), np.nan))
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype and g.shape == w.shape, i
        assert g.tobytes() == w.tobytes(), i


def _mix(z):
    """SplitMix64's step as uint64 array expressions."""
    m = np.uint64(0xFFFFFFFFFFFFFFFF)
    with np.errstate(over="ignore"):
        z = (z + np.uint64(0x9E3779B97F4A7C15)) & m
        z = ((z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & m
        z = ((z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & m
        return z ^ (z >> np.uint64(31))


def _numpy_uniform(seed, a, b, stream):
    """The counter-based draws as uint64 array expressions (the reference of `golem.rng.uniform`)."""
    with np.errstate(over="ignore"):
        z = _mix(np.full(np.broadcast(np.asarray(a), np.asarray(b)).shape, np.uint64(seed & 0xFFFFFFFFFFFFFFFF)))
        z = _mix(z ^ np.asarray(a).astype(np.uint64))
        z = _mix(z ^ np.asarray(b).astype(np.uint64))
        z = _mix(z ^ np.uint64(stream))
    return (z >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def test_splitmix64_step_by_hand():
    """SplitMix64 from state 0 gives 0xE220A8397B1DCDAF first (its published first output), in
    the array form and the kernel's."""
    from golem.rng import _mix1
    assert int(_mix(np.uint64(0))) == 0xE220A8397B1DCDAF == int(_mix1(np.uint64(0)))


@FAST
@given(st.integers(0, 2**64 - 1), st.integers(0, 40), st.integers(0, 2**20), st.booleans())
def test_uniform_draws_are_the_uint64_expressions(seed, n, stream, scalar_b):
    """`rng.uniform` in one pass = the array expressions bit for bit: negative and huge ids (taken
    modulo 2^64), a scalar tick broadcast against the ids, a 2-D batch; and each draw in [0, 1)."""
    from golem.rng import uniform
    r = np.random.default_rng(seed % 2**32)
    a = r.choice(np.array([-1, 0, 7, 2**63 - 1, -2**63], np.int64), n) + r.integers(-3, 3, n)
    b = int(r.integers(-5, 10**9)) if scalar_b else r.integers(-2**62, 2**62, n)
    got, want = uniform(seed, a, b, stream), _numpy_uniform(seed, a, b, stream)
    assert got.shape == want.shape and got.tobytes() == want.tobytes()
    assert ((got >= 0) & (got < 1)).all()
    a2 = a[: n - n % 2].reshape(-1, 2)
    assert uniform(seed, a2, 3, stream).tobytes() == _numpy_uniform(seed, a2, 3, stream).tobytes()


@FAST
@given(st.integers(0, 2**32 - 1), st.integers(1, 30), st.integers(1, 70), st.sampled_from([np.float32, np.float64]))
def test_query_codes_are_the_array_expressions(seed, n, d, dtype):
    """Query codes in one pass a row = numpy's: scale = query_max / max|q| (1 for a zero row),
    rint half to even (exact halves included), zero padding past d; float32 and float64 queries."""
    rng = np.random.default_rng(seed)
    q = (rng.standard_normal((n, d)) * rng.choice([1e-3, 1.0, 50.0])).astype(dtype)
    q[rng.uniform(size=n) < 0.2] = 0.0
    stride = d + int(rng.integers(0, 40))
    qmax = kernels.query_max(stride)
    if n > 1:                                   # scale 1 (max|q| = query_max): codes on exact halves
        q[1, :] = 0.0
        q[1, 0] = qmax
        q[1, 1:min(d, 4)] = [2.5, -3.5, 0.5][:max(min(d, 4) - 1, 0)]   # -> 2, -4, 0 (half to even)
    qq = q.astype(np.float64)
    top = np.abs(qq).max(axis=1, initial=0.0)
    scale = np.divide(qmax, top, out=np.ones_like(top), where=top > 0)
    want = np.zeros((n, stride), dtype=np.int16)
    want[:, :d] = np.rint(qq * scale[:, None])
    codes, sc = rt.query_codes(q, stride)
    assert codes.dtype == np.int16 and codes.tobytes() == want.tobytes()
    assert sc.tobytes() == scale.tobytes()


@FAST
@given(st.integers(0, 2**32 - 1), st.integers(1, 30), st.integers(1, 6))
def test_learn_markers_is_the_array_expressions(seed, golems, patterns):
    """The somatic markers' update in one pass = the numpy expressions bit for bit: first
    episodes taken as they are, later ones exponentially weighted, counts, targets and the
    emotion's count, for a cohort that is a subset of the population in any order."""
    rng = np.random.default_rng(seed)
    n = golems + int(rng.integers(0, 4))
    ix = rng.permutation(n)[:golems].astype(np.int64)
    pt = rng.integers(0, patterns, golems)
    p, a, target = rng.uniform(-1, 1, golems), rng.uniform(-1, 1, golems), rng.uniform(0, 1, golems)
    emo = rng.integers(0, 9, golems)
    lr = float(rng.choice([0.1, 0.3, 1 / 3]))
    som_sum, som_ar = rng.uniform(-1, 1, (n, patterns)), rng.uniform(0, 1, (n, patterns))
    som_cnt = np.where(rng.uniform(size=(n, patterns)) < 0.4, 0, rng.integers(1, 9, (n, patterns))).astype(np.int32)
    som_target = np.where(som_cnt > 0, rng.uniform(0, 1, (n, patterns)), np.nan)
    som_emo = rng.integers(0, 5, (n, patterns, 9)).astype(np.int32)
    want = [x.copy() for x in (som_sum, som_ar, som_cnt, som_target, som_emo)]
    first = want[2][ix, pt] == 0
    want[0][ix, pt] = np.where(first, p, want[0][ix, pt] + lr * (p - want[0][ix, pt]))
    want[1][ix, pt] = np.where(first, a, want[1][ix, pt] + lr * (a - want[1][ix, pt]))
    want[2][ix, pt] += 1
    want[3][ix, pt] = target
    want[4][ix, pt, emo] += 1
    kernels.learn_markers(ix, pt, p, a, target, emo, lr, som_sum, som_ar, som_cnt, som_target, som_emo)
    for got, w in zip((som_sum, som_ar, som_cnt, som_target, som_emo), want):
        assert got.dtype == w.dtype and got.tobytes() == w.tobytes()


def test_threaded_kernels_give_a_run_the_same_bytes_on_one_thread_or_many(tmp_path, monkeypatch):
    """Every `kernels.Threaded` call of a run on its serial compile, then on its parallel one:
    byte-identical tables. A small capacity and a Clade panic make the run evict, curate, recall
    and push, so each threaded kernel is called (and the test says so if one stops being)."""
    from conftest import run_scenario

    called: dict[str, set] = {}      # served_valence (the anti-rumination guard's) has its own test above

    def forced(which):
        def on(self, work):
            called.setdefault(which, set()).add(self.__name__)
            return getattr(self, which)
        return on

    hashes = {}
    for which in ("serial", "parallel"):
        monkeypatch.setattr(kernels.Threaded, "on", forced(which))
        res = run_scenario("clade_panic", tmp_path / which, sets=["duration=10h", "grimoire.capacity=24"])
        hashes[which] = res.manifest["hashes"]
    assert hashes["serial"] == hashes["parallel"]
    assert called["serial"] == called["parallel"] >= {
        "retrieve_batch", "recall_served", "scan_terms", "scan_terms_stale", "_pick_slots", "curate_slabs",
        "_heat_and_flags", "_price_history"}


@FAST
@given(st.lists(st.sampled_from([0.0, -0.0, 1.0, -1.0, 1e-300, np.inf, -np.inf, np.nan]), min_size=2, max_size=2),
       st.floats(allow_nan=True, allow_infinity=True))
def test_np_minimum_and_maximum_are_numpys(pair, x):
    """Signed zeros, NaNs and infinities in either place: the same bits as np.minimum / np.maximum."""
    for a, b in ((pair[0], pair[1]), (x, pair[0]), (pair[1], x)):
        for mine, theirs in ((kernels.np_minimum, np.minimum), (kernels.np_maximum, np.maximum)):
            assert np.float64(mine(a, b)).tobytes() == np.float64(theirs(a, b)).tobytes(), (a, b)
