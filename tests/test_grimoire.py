"""Grimoire: salience and gating (§3.3), windows (§3.2), confidence (§3.4), capacity (§3.5)."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from golem import grimoire as gm
from golem.config import default_config
from golem.memory_writer import score_and_gate

DAY = 86_400_000


def test_salience_hand_values():
    # m = 250 / (0.05 * 10000) = 0.5: fill(0.4, 0.5) = 0.7; loss fills 0.25*0.6 = 0.15 further
    assert gm.salience(0.4, 250, 10_000, 0.6) == pytest.approx(0.7)
    assert gm.salience(0.4, -250, 10_000, -0.6) == pytest.approx(0.7 + 0.15 * 0.3)
    # signals add 0.1 each, capped at 1
    assert gm.salience(0.2, 0, 10_000, 0.1, probe_high=True, regime_shift=True) == pytest.approx(0.4)
    assert gm.salience(0.9, 0, 10_000, 0.1, probe_high=True, regime_shift=True, recurring_loss=True) == 1.0
    # a first sighting is floored at 0.70 even when calm
    assert gm.salience(0.0, 0, 10_000, 0.0, first_sighting=True) == pytest.approx(0.7)


@settings(max_examples=200, deadline=None)
@given(st.floats(0, 1), st.floats(0, 5_000), st.floats(100, 1e6), st.floats(0, 1),
       st.booleans(), st.booleans(), st.booleans(), st.sampled_from([0.9, 1.0, 1.1]))
def test_loss_never_encodes_weaker_than_equal_gain(inten, pnl, value, p, probe, shift, rec, role):
    gain = gm.salience(inten, pnl, value, p, probe_high=probe, regime_shift=shift, recurring_loss=rec, role_scale=role)
    loss = gm.salience(inten, -pnl, value, -p, probe_high=probe, regime_shift=shift, recurring_loss=rec, role_scale=role)
    assert loss >= gain - 1e-12
    assert 0.0 <= gain <= 1.0 and 0.0 <= loss <= 1.0


def test_gate_tiers_and_promotion():
    assert gm.gate(0.29) == (False, 0.0, False)
    assert gm.gate(0.29, flashbulb=True)[0] is True
    assert gm.gate(0.3) == (True, 7, False)
    assert gm.gate(0.5) == (True, 14, False)
    assert gm.gate(0.7) == (True, 30, True)
    assert gm.promote(gm.EPHEMERAL) == gm.TACTICAL
    assert gm.promote(gm.TACTICAL) == gm.REGIME
    assert gm.promote(gm.REGIME) == gm.REGIME        # never above regime-conditional by promotion
    assert gm.promote(gm.STRUCTURAL) == gm.STRUCTURAL


def test_effective_window_and_status():
    assert gm.effective_window_days(gm.TACTICAL, 14, 0.5) == pytest.approx(21.0)   # max(7, 14) * 1.5
    assert gm.effective_window_days(gm.REGIME, 7, 0.0) == pytest.approx(14.0)
    assert gm.effective_window_days(gm.EPHEMERAL, 0, 0.2) == pytest.approx(1.2)     # bypassed gating: TTL 0
    assert math.isinf(gm.effective_window_days(gm.STRUCTURAL, 30, 0.9))
    assert gm.status_at(10 * DAY, 0, 14) == gm.ACTIVE
    assert gm.status_at(15 * DAY, 0, 14) == gm.STALE
    assert gm.status_at(29 * DAY, 0, 14) == gm.EXPIRED
    assert gm.status_at(29 * DAY, 20 * DAY, 14) == gm.ACTIVE   # age counts from the last access
    assert gm.status_at(0, 0, math.inf) == gm.ACTIVE


@settings(max_examples=100, deadline=None)
@given(st.floats(0, 1), st.floats(-1, 1), st.floats(0.05, 2),
       st.lists(st.floats(-1, 1) | st.sampled_from([-1.0, 0.0, 0.3, 1.0, 0.29999999999999993, -0.0]), max_size=50),
       st.integers(0, 2**32 - 1))
def test_initial_confidence_batch_is_the_scalar_bit_for_bit(source, peak, width, arousals, seed):
    """A Clade push's copies: the batch gives each receiver what `initial_confidence` gives it,
    to the last bit (values where numpy's pow/exp or x * x would differ come with the random ones)."""
    a = np.concatenate([np.array(arousals, dtype=np.float64), np.random.default_rng(seed).uniform(-1, 1, 2000)])
    got = gm.initial_confidence_batch(source, a, peak, width)
    want = np.array([gm.initial_confidence(source, x, peak, width) for x in a.tolist()])
    assert got.tobytes() == want.tobytes()


def test_confidence_at_encoding_and_propagation():
    assert gm.initial_confidence(0.9, 0.3) == pytest.approx(0.9)
    assert gm.initial_confidence(0.6, 0.9) == pytest.approx(0.6 * math.exp(-0.5))
    assert gm.propagate_confidence(0.5, True) == pytest.approx(0.6)
    assert gm.propagate_confidence(0.5, False) == pytest.approx(0.3)
    assert gm.propagate_confidence(0.95, True) == 1.0
    assert gm.propagate_confidence(0.1, False) == 0.0


def _cands(n, **over):
    c = dict(p=np.zeros(n), a=np.zeros(n), d=np.zeros(n), has_tag=np.ones(n, bool), value=np.full(n, 1e4),
             pnl=np.zeros(n), role=np.zeros(n, np.int64), signals=np.zeros(n, np.int64),
             first_sighting=np.zeros(n, bool), flashbulb=np.zeros(n, bool), decay_class=np.full(n, gm.TACTICAL))
    c.update({k: np.asarray(v) for k, v in over.items()})
    return c


def _score_and_gate_by_arrays(cfg, c):
    """`memory_writer.score_and_gate` as the candidates' array expressions (its kernel's reference)."""
    s_cfg = cfg.salience
    p, a, d = c["p"], c["a"], c["d"]
    inten = np.where(c["has_tag"], np.sqrt(p * p + a * a + d * d) / np.sqrt(3.0), 0.0)
    value, pnl = c["value"], c["pnl"]
    denom = s_cfg.pnl_scale * value
    with np.errstate(over="ignore", invalid="ignore"):
        m = np.where(denom > 0, np.minimum(1.0, np.abs(pnl) / np.where(denom > 0, denom, 1.0)),
                     (pnl != 0).astype(np.float64))
    s = np.minimum(1.0, inten + m * (1 - inten))
    neg = c["has_tag"] & (p < 0)
    s = np.where(neg, np.minimum(1.0, s + s_cfg.negativity * np.abs(p) * (1 - s)), s)
    role_scale = np.array([s_cfg.role_observation, s_cfg.role_action, s_cfg.role_insight])[c["role"]]
    s = np.minimum(1.0, s * role_scale)
    s = np.minimum(1.0, s + s_cfg.signal_boost * c["signals"])
    s = np.where(c["first_sighting"], np.maximum(s, s_cfg.first_sighting_floor), s)
    write = (s >= s_cfg.gate_min) | c["flashbulb"] | c.get("force", np.zeros(s.shape, bool)).astype(bool)
    ttl = np.where(s < s_cfg.gate_min, 0.0, np.where(s < s_cfg.tier_14d, s_cfg.ttl_days_low,
                   np.where(s < s_cfg.tier_30d, s_cfg.ttl_days_mid, s_cfg.ttl_days_high))).astype(np.float64)
    dc = c["decay_class"].astype(np.int8)
    promote = (s >= s_cfg.promotion) & (dc < gm.REGIME)
    dc = np.where(promote, dc + 1, dc).astype(np.int8)
    dc = np.where(c["flashbulb"], gm.STRUCTURAL, dc).astype(np.int8)
    g = cfg.grimoire
    class_days = np.array([g.ephemeral_days, g.tactical_days, g.regime_conditional_days, np.inf])[dc]
    window_days = np.where(dc == gm.STRUCTURAL, np.inf, np.maximum(class_days, ttl) * (1 + s))
    return {"salience": s, "write": write, "ttl_days": ttl, "decay_class": dc, "window_ms": window_days * gm.DAY_MS,
            "intensity": inten}


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**31), st.integers(1, 60))
def test_the_salience_kernel_is_the_array_expressions_bit_for_bit(seed, n):
    """Tagged and untagged, books with and without value (NaN P&L among them), every role, signal
    count, class and first sighting, flashbulbs and forced writes: the same salience, gate, TTL,
    class, window and intensity, bit for bit."""
    rng = np.random.default_rng(seed)
    cfg = default_config()
    c = _cands(n, p=rng.choice([-1.0, -0.3, 0.0, 0.4, 1.0], n) * rng.uniform(0, 1, n), a=rng.uniform(-1, 1, n),
               d=rng.uniform(-1, 1, n), has_tag=rng.random(n) < 0.8,
               value=rng.choice([1e4, 3e3, 1e4, 3e3, 1e4, 0.0, -50.0, 1e-300], n),
               pnl=rng.choice([0.0, -0.0, 5.0, -12.0, 25.0, 5.0, -400.0, np.nan], n) * rng.uniform(0.5, 2, n),
               role=rng.integers(0, 3, n), signals=rng.integers(0, 4, n), first_sighting=rng.random(n) < 0.2,
               flashbulb=rng.random(n) < 0.1, decay_class=rng.integers(0, 4, n))
    if rng.random() < 0.5:
        c["force"] = rng.random(n) < 0.2
    got, want = score_and_gate(cfg, c), _score_and_gate_by_arrays(cfg, c)
    assert got.keys() == want.keys()
    for k in want:
        assert got[k].dtype == want[k].dtype and got[k].tobytes() == want[k].tobytes(), k


def test_vectorised_scoring_matches_scalar_salience():
    cfg = default_config()
    rng = np.random.default_rng(5)
    n = 500
    c = _cands(n, p=rng.uniform(-1, 1, n), a=rng.uniform(-1, 1, n), d=rng.uniform(-1, 1, n),
               pnl=rng.normal(0, 400, n), role=rng.integers(0, 3, n), signals=rng.integers(0, 3, n),
               first_sighting=rng.random(n) < 0.1)
    sc = score_and_gate(cfg, c)
    scales = (cfg.salience.role_observation, cfg.salience.role_action, cfg.salience.role_insight)
    for i in range(n):
        inten = math.sqrt(c["p"][i] ** 2 + c["a"][i] ** 2 + c["d"][i] ** 2) / math.sqrt(3)
        sig = int(c["signals"][i])
        want = gm.salience(inten, c["pnl"][i], 1e4, c["p"][i], probe_high=sig >= 1, regime_shift=sig >= 2,
                           role_scale=scales[c["role"][i]], first_sighting=bool(c["first_sighting"][i]))
        assert sc["salience"][i] == pytest.approx(want, abs=1e-12)
        w, ttl, promote = gm.gate(want)
        assert bool(sc["write"][i]) == w
        if w:
            assert sc["ttl_days"][i] == ttl
            assert sc["decay_class"][i] == (gm.promote(gm.TACTICAL) if promote else gm.TACTICAL)


def _fill_slab(gr, g, n, **vals):
    base = dict(importance=np.full(n, 0.5, np.float32), confidence=np.full(n, 0.5, np.float32),
                salience=np.full(n, 0.3, np.float32), decay_class=np.full(n, gm.TACTICAL, np.int8),
                window_ms=np.full(n, 7.0 * DAY))
    base.update(vals)
    return gr.insert(np.full(n, g), np.random.default_rng(g).normal(size=(n, gr.dim)), base)


def test_eviction_takes_lowest_score_and_never_protected():
    gr = gm.Grimoire(2, 4, 8)
    imp = np.array([0.9, 0.1, 0.05, 0.8], np.float32)
    sal = np.array([0.1, 0.1, 0.75, 0.1], np.float32)      # slot 2 is protected (salience >= 0.7)
    _fill_slab(gr, 0, 4, importance=imp, salience=sal)
    slots, ids = _fill_slab(gr, 0, 1)
    assert slots[0] == 1       # lowest importance*confidence*(1+salience) among unprotected
    assert gr.cols["id"][2] == 2  # protected entry survives
    # a slab of protected entries refuses the write instead of evicting
    gr2 = gm.Grimoire(1, 3, 8)
    _fill_slab(gr2, 0, 3, decay_class=np.array([gm.STRUCTURAL] * 3, np.int8))
    slots, ids = _fill_slab(gr2, 0, 1)
    assert slots[0] == -1 and ids[0] == -1
    assert sorted(gr2.cols["id"][:3].tolist()) == [0, 1, 2]


def test_flashbulb_entries_are_never_evicted():
    gr = gm.Grimoire(1, 3, 8)
    _fill_slab(gr, 0, 3, flashbulb=np.array([True, True, False]), importance=np.array([0.0, 0.0, 0.9], np.float32))
    slots, _ = _fill_slab(gr, 0, 2)
    assert slots[0] == 2 and slots[1] == -1   # the second write finds only protected entries left
    assert gr.cols["flashbulb"][:2].all()


def test_embeddings_are_unit_and_memory_per_entry_is_O_d():
    for d in (64, 384):
        gr = gm.Grimoire(3, 16, d)
        _fill_slab(gr, 1, 5)
        norms = np.linalg.norm(gr.emb[16:21], axis=1)
        assert np.allclose(norms, 1.0, atol=1e-6)
        assert gr.bytes_per_entry() <= 2 * d + 128
    # codes, the columns, the act-time ring (3 x 6 B), the scan terms (norm2, recency, charge)
    assert gm.Grimoire(1, 1, 64).bytes_per_entry() == 64 + 125 + 18 + 12


def test_quantise_by_hand():
    """round(v * 127 / max|v|), half to even, zero-padded to the stride; a zero row stays zero;
    the scale of the input does not matter."""
    v = np.array([[0.5, -0.25, 0.1, 0.0], [0.0, 0.0, 0.0, 0.0], [5.0, -2.5, 1.0, 0.0]])
    got = gm.quantise(v, 32)
    assert got.shape == (3, 32) and got.dtype == np.int8
    assert got[0, :4].tolist() == [127, -64, 25, 0]          # -63.5 rounds to the even -64
    assert not got[1].any() and not got[0, 4:].any()
    assert got[2].tolist() == got[0].tolist()
    assert gm.code_stride(64) == 64 and gm.code_stride(65) == 96 and gm.code_stride(4) == 32


def _numpy_quantise(v, stride):
    """`quantise` as the array expressions (the reference of its kernel)."""
    x = np.asarray(v).astype(np.float64)
    n, d = x.shape
    top = np.abs(x).max(axis=1, initial=0.0)
    scale = np.divide(gm.CODE_MAX, top, out=np.zeros_like(top), where=top > 0)
    with np.errstate(invalid="ignore"):
        r = np.rint(x * scale[:, None])
    out = np.zeros((n, stride), np.int8)
    out[:, :d] = np.where(np.isfinite(r), r, 0).astype(np.int8)   # a NaN code is 0, as numpy casts it here
    return out


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 70), st.integers(1, 9), st.integers(0, 2**32 - 1), st.sampled_from([np.float32, np.float64]),
       st.sampled_from(["normal", "halves", "zero", "nan", "inf", "huge"]))
def test_quantise_is_the_array_expressions(d, n, seed, dtype, kind):
    """The quantise kernel = the numpy expressions, code for code: float32 and float64 rows, exact
    halves (round half to even), zero rows, rows with a NaN or an infinity (all zero codes), and
    rows whose largest component is far from 1."""
    rng = np.random.default_rng(seed)
    v = rng.standard_normal((n, d))
    if kind == "halves":
        v = rng.integers(-254, 255, (n, d)) / 2.0
        v[:, 0] = 127.0
    elif kind == "zero":
        v[rng.integers(0, n)] = 0.0
    elif kind in ("nan", "inf"):
        v[rng.integers(0, n), rng.integers(0, d)] = np.nan if kind == "nan" else -np.inf
    elif kind == "huge":
        v *= 10.0 ** rng.integers(-30, 30, (n, 1))
    v = v.astype(dtype)
    stride = gm.code_stride(d)
    assert np.array_equal(gm.quantise(v, stride), _numpy_quantise(v, stride))


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 130), st.integers(0, 2**32 - 1))
def test_codes_survive_decoding(d, seed):
    """An entry's vector read back (a Clade copy, a lesson framed on its anchor) and stored again
    gets the same codes; the stored direction is within the rounding's bound of the original:
    codes = s v + e with |e_t| <= 1/2 and s = 127 / max|v|, so the angle between them is at most
    asin(sqrt(d) / 2 / (s |v|)) and the cosine with any unit query moves by no more than that."""
    v = np.random.default_rng(seed).standard_normal((5, d))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    codes = gm.quantise(v, gm.code_stride(d))
    back = gm.decode(codes, d)
    assert np.array_equal(gm.quantise(back, gm.code_stride(d)), codes)
    assert np.allclose(np.linalg.norm(back, axis=1), 1.0, atol=1e-6)
    bound = np.arcsin(np.minimum(1.0, np.sqrt(d) / 2 * np.abs(v).max(axis=1) / 127))
    cos = np.sum(back.astype(np.float64) * v, axis=1)
    assert np.all(np.arccos(np.minimum(cos, 1.0)) <= bound + 1e-6)


def test_embeddings_view_reads_and_writes_codes():
    gr = gm.Grimoire(1, 3, 4)
    gr.emb[1] = [0.0, 3.0, 4.0, 0.0]
    assert gr.codes[1].tolist()[:4] == [0, 95, 127, 0]       # 3 * 127 / 4 = 95.25
    np.testing.assert_allclose(gr.emb[1], np.array([0, 95, 127, 0]) / math.hypot(95, 127), rtol=1e-6)
    assert gr.emb.shape == (3, 4) and gr.emb.nbytes == gr.codes.nbytes
    assert not np.asarray(gr.emb)[0].any()


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**31), st.integers(1, 3), st.integers(1, 6), st.lists(st.integers(0, 9), max_size=6))
def test_slots_below_the_count_always_hold_an_entry(seed, n_golems, cap, batches):
    """Retrieval reads no id column: every slot below a slab's count must hold an entry, through
    free slots, evictions and refused writes (a slab of protected entries)."""
    rng = np.random.default_rng(seed)
    gr = gm.Grimoire(n_golems, cap, 4)
    for size in batches:
        gr.insert(rng.integers(0, n_golems, size), rng.normal(size=(size, 4)), dict(
            importance=rng.uniform(0, 1, size).astype(np.float32),
            salience=rng.choice([0.1, 0.9], size).astype(np.float32),
            decay_class=rng.integers(0, 4, size).astype(np.int8)))
        for g in range(n_golems):
            assert (gr.cols["id"][g * cap:g * cap + gr.count[g]] >= 0).all()


def _reference_slots(golems, count, cap, imp, conf, sal, dclass, flash, status):
    """The eviction rule written out plainly: free slot first, else the unprotected slot with the
    lowest importance*confidence*(1+salience) (archived first, ties to the earlier slot); a slot
    taken by an entry of the batch is off-limits to the rest of it."""
    count = count.copy()
    dclass = dclass.copy()
    out = []
    for g in golems:
        if count[g] < cap:
            out.append(g * cap + count[g])
            dclass[g * cap + count[g]] = gm.STRUCTURAL
            count[g] += 1
            continue
        best, best_score = -1, float("inf")
        for s in range(g * cap, g * cap + cap):
            if dclass[s] == gm.STRUCTURAL or flash[s] or sal[s] >= 0.7:
                continue
            score = -1.0 if status[s] == gm.ARCHIVED else float(imp[s]) * float(conf[s]) * (1.0 + float(sal[s]))
            if score < best_score:
                best, best_score = s, score
        if best >= 0:
            dclass[best] = gm.STRUCTURAL
        out.append(best)
    return out


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**31), st.integers(1, 3), st.integers(1, 6), st.integers(0, 12))
def test_slot_picker_matches_the_reference(seed, n_golems, cap, batch):
    rng = np.random.default_rng(seed)
    gr = gm.Grimoire(n_golems, cap, 4)
    pre = int(rng.integers(0, n_golems * cap + 1))
    if pre:
        gr.insert(rng.integers(0, n_golems, pre), rng.normal(size=(pre, 4)), dict(
            importance=rng.choice([0.1, 0.5, 0.9], pre).astype(np.float32),
            confidence=rng.choice([0.2, 0.8], pre).astype(np.float32),
            salience=rng.choice([0.0, 0.3, 0.7, 0.9], pre).astype(np.float32),
            decay_class=rng.integers(0, 4, pre).astype(np.int8), flashbulb=rng.random(pre) < 0.2,
            status=np.where(rng.random(pre) < 0.2, gm.ARCHIVED, gm.ACTIVE).astype(np.int8)))
    c = gr.cols
    golems = rng.integers(0, n_golems, batch)
    want = _reference_slots(golems, gr.count, cap, c["importance"], c["confidence"], c["salience"],
                            c["decay_class"], c["flashbulb"], c["status"])
    for many in (0, 3):     # the sorted path for a Golem's evictions beyond `many` (insert: MANY_EVICTIONS)
        picked, held = gm._pick_slots(golems, np.argsort(golems, kind="stable"), gr.count.copy(), cap, c["id"],
                                      c["importance"], c["confidence"], c["salience"], c["decay_class"].copy(),
                                      c["flashbulb"].view(np.int8), c["status"], many)
        assert picked.tolist() == want
        assert held.tolist() == [int(c["id"][t]) if t >= 0 else -1 for t in want]
    slots, ids = gr.insert(golems, rng.normal(size=(batch, 4)), dict(decay_class=gm.TACTICAL))
    assert slots.tolist() == want
    assert (ids[slots < 0] == -1).all() and len(set(ids[slots >= 0].tolist())) == int((slots >= 0).sum())
    assert len(set(slots[slots >= 0].tolist())) == int((slots >= 0).sum())   # no two entries share a slot


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([-1.0, 0.0, 0.05, 0.25, 0.3, 1.2, np.inf]) | st.floats(-1, 2), max_size=40),
       st.integers(1, 50))
def test_smallest_values_come_in_minimum_after_minimum_order(values, m):
    buf = np.array(values, dtype=np.float64)
    order = np.argsort(buf, kind="stable")
    want = [int(t) for t in order if buf[t] < np.inf][:m]
    assert gm._smallest(buf, m).tolist() == want


def test_a_batch_that_fills_a_slab_keeps_every_entry():
    """Three entries for a Golem with one free slot: the first takes it, the others evict older
    entries, never the slot the first was just given (its columns are not written yet)."""
    gr = gm.Grimoire(1, 4, 4)
    gr.insert(np.zeros(3, np.int64), np.eye(4)[:3], dict(importance=np.full(3, 0.5), confidence=np.full(3, 0.5)))
    slots, ids = gr.insert(np.zeros(3, np.int64), np.eye(4)[1:], dict(importance=np.full(3, 0.9), confidence=np.full(3, 0.9)))
    assert slots.tolist() == [3, 0, 1] and ids.tolist() == [3, 4, 5]
    assert sorted(gr.cols["id"].tolist()) == [2, 3, 4, 5]


def test_eviction_drops_the_evicted_entries_side_records_only():
    gr = gm.Grimoire(2, 3, 8)
    _fill_slab(gr, 0, 3, importance=np.array([0.9, 0.1, 0.8], np.float32))
    _fill_slab(gr, 1, 2)
    for eid in range(5):
        gr.phrases[eid], gr.links[eid], gr.recall_when[eid] = f"p{eid}", (eid,), ("fear",)
        gr.last_fired[eid] = 1000 * eid
    slots, ids = _fill_slab(gr, 0, 1)                 # evicts id 1 (lowest importance) from slot 1
    assert slots[0] == 1 and gr.cols["id"][1] == ids[0]
    for side in (gr.phrases, gr.links, gr.recall_when, gr.last_fired):
        assert 1 not in side and set(side) == {0, 2, 3, 4}
    assert list(gr.phrases) == [0, 2, 3, 4]           # the others keep their order


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**31), st.integers(1, 5), st.integers(1, 6), st.integers(0, 40), st.integers(1, 7))
def test_insert_in_pieces_is_one_insert(seed, n_golems, cap, batch, max_rows):
    """A large batch inserted in pieces of whole Golems (`insert_pieces`, a Clade push's copies)
    gives the slots, ids, columns and codes of one insert of the whole batch, refusals included."""
    rng = np.random.default_rng(seed)
    arenas = [gm.Grimoire(n_golems, cap, 4) for _ in range(2)]
    pre = int(rng.integers(0, n_golems * cap + 1))
    pre_rows = (rng.integers(0, n_golems, pre), rng.normal(size=(pre, 4)), dict(
        importance=rng.choice([0.1, 0.5, 0.9], pre).astype(np.float32),
        salience=rng.choice([0.0, 0.3, 0.9], pre).astype(np.float32),
        decay_class=rng.integers(0, 4, pre).astype(np.int8)))
    golem = rng.integers(0, n_golems, batch)
    codes = gm.quantise(rng.normal(size=(batch, 4)), 32)
    imp = rng.choice([0.05, 0.5, 0.95], batch).astype(np.float32)
    sal = rng.choice([0.0, 0.8], batch).astype(np.float32)

    def rows(idx):
        return codes[idx], dict(importance=imp[idx], salience=sal[idx], created_ms=7)
    got = []
    for gr, pieces in zip(arenas, (False, True)):
        if pre:
            gr.insert(*pre_rows)
        if pieces:
            got.append(gr.insert_pieces(golem, rows, max_rows=max_rows))
        else:
            got.append(gr.insert(golem, None, rows(np.arange(batch))[1], codes=codes))
    for a, b in zip(*got):
        np.testing.assert_array_equal(a, b)
    one, split = arenas
    assert one.next_id == split.next_id
    np.testing.assert_array_equal(one.codes, split.codes)
    np.testing.assert_array_equal(one.count, split.count)
    for k in one.cols:
        np.testing.assert_array_equal(one.cols[k], split.cols[k], err_msg=k)


def _allocation(a: np.ndarray) -> np.ndarray:
    while a.base is not None:
        a = a.base
    return a


def test_slot_arrays_are_zeroed_disjoint_lines_of_one_allocation():
    spec = [("flag", np.bool_, ()), ("ms", np.int64, ()), ("codes", np.int8, (3,)), ("x", np.float32, ()),
            ("pair", np.uint16, (2,))]
    arrays = gm.slot_arrays(7, spec)
    assert [(a.shape, a.dtype) for a in arrays.values()] == [((7,), np.bool_), ((7,), np.int64), ((7, 3), np.int8),
                                                             ((7,), np.float32), ((7, 2), np.uint16)]
    assert len({id(_allocation(a)) for a in arrays.values()}) == 1
    for a in arrays.values():
        assert a.flags["C_CONTIGUOUS"] and a.flags["WRITEABLE"] and a.ctypes.data % 64 == 0
        assert not a.any()
    for name, a in arrays.items():          # writing one array leaves every other as it was
        a[...] = 1
        assert all(not b.any() for other, b in arrays.items() if other != name)
        a[...] = 0
    gr = gm.Grimoire(4, 8, 64)              # a fresh Grimoire's scan arrays are views of one buffer too
    assert len({id(_allocation(a)) for a in [*gr.cols.values(), gr.codes, gr.norm2, gr.recency, gr.charge]}) == 1
    assert (gr.cols["id"] == -1).all() and (gr.recency == 1).all() and not gr.codes.any()
