"""Hyperdimensional fingerprints (SPEC §11): algebra, kernels vs scalar references, determinism, queries."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from golem import hdc
from golem.hdc import D_BITS, N_WORDS, ItemMemory

SEEDS = st.integers(0, 2**32 - 1)
FAST = settings(max_examples=40, deadline=None)


def rand_hvs(seed: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2**64, size=(n, N_WORDS), dtype=np.uint64, endpoint=False)


def test_sizes():
    assert D_BITS == 10_240 and N_WORDS == 160
    im = ItemMemory(0)
    for v in (im.R_pleasure, im.role("gas"), im.symbol("fear"), im.level(0.3), im.tiebreak):
        assert v.dtype == np.uint64 and v.shape == (N_WORDS,)
        assert v.nbytes == 1280


# --- algebra ---------------------------------------------------------------------------------


@FAST
@given(SEEDS)
def test_self_similarity_is_one(seed):
    v = rand_hvs(seed, 1)[0]
    assert hdc.similarity(v, v) == 1.0
    assert hdc.similarity(v, ~v) == 0.0


@FAST
@given(SEEDS)
def test_independent_vectors_are_quasi_orthogonal(seed):
    a, b = rand_hvs(seed, 2)
    assert abs(hdc.similarity(a, b) - 0.5) < 0.03


@FAST
@given(SEEDS, st.sampled_from([3, 5]))
def test_bundle_is_similar_to_its_parts(seed, k):
    vs = rand_hvs(seed, k + 1)
    parts, unrelated = vs[:k], vs[k]
    b = hdc.bundle(parts)
    for p in parts:
        assert hdc.similarity(b, p) > 0.6
    assert abs(hdc.similarity(b, unrelated) - 0.5) < 0.03


@FAST
@given(SEEDS, st.integers(1, 9))
def test_bundle_kernel_matches_reference(seed, k):
    vs = rand_hvs(seed, k + 1)
    assert np.array_equal(hdc.bundle(vs[:k], vs[k]), hdc.bundle_reference(vs[:k], vs[k]))


def test_bundle_even_ties_follow_tiebreak():
    a, tb = rand_hvs(3, 2)
    # two complementary votes tie on every bit: the tie-break vector decides all of them
    assert np.array_equal(hdc.bundle(np.stack([a, ~a]), tb), tb)
    assert np.array_equal(hdc.bundle(a[None, :]), a)


@FAST
@given(SEEDS)
def test_bind_is_its_own_inverse_and_dissimilar(seed):
    a, b = rand_hvs(seed, 2)
    ab = hdc.bind(a, b)
    assert np.array_equal(hdc.bind(ab, b), a)
    assert abs(hdc.similarity(ab, a) - 0.5) < 0.03


@FAST
@given(SEEDS, st.integers(-3 * D_BITS, 3 * D_BITS))
def test_permute_is_invertible_rotation(seed, shift):
    a = rand_hvs(seed, 1)[0]
    assert np.array_equal(hdc.permute(hdc.permute(a, shift), -shift), a)
    bits = np.unpackbits(a.view(np.uint8), bitorder="little")
    rot = np.unpackbits(hdc.permute(a, shift).view(np.uint8), bitorder="little")
    assert np.array_equal(rot, np.roll(bits, shift))


@settings(max_examples=10, deadline=None)
@given(SEEDS, st.sampled_from([7, 21]))
def test_level_similarity_decreases_with_distance(seed, n_levels):
    table = ItemMemory(seed).level_table(n_levels)
    for i in range(n_levels):
        sims = [hdc.similarity(table[i], table[j]) for j in range(i, n_levels)]
        assert all(x > y for x, y in zip(sims, sims[1:]))
    assert abs(hdc.similarity(table[0], table[-1]) - 0.5) < 0.03
    assert hdc.similarity(table[0], table[1]) > 0.9


def test_level_quantisation():
    im = ItemMemory(1)
    assert hdc.level_index(-1.0) == 0 and hdc.level_index(1.0) == 20 and hdc.level_index(5.0) == 20
    for x in np.linspace(0, 1, 23):
        assert hdc.level_index(x, 0.0, 1.0, hdc.INTENSITY_LEVELS) == round(x * 6)
    assert np.array_equal(im.level(0.8, 0.0, 1.0, 7), im.level_table(7)[5])
    with pytest.raises(ValueError):
        hdc.level_index(float("nan"))


# --- numba kernels vs scalar reference --------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    arrays(np.uint64, N_WORDS),
    arrays(np.uint64, st.tuples(st.integers(1, 12), st.just(N_WORDS))),
)
def test_hamming_kernel_matches_scalar(q, fps):
    got = hdc.hamming_similarity_batch(q, fps)
    want = np.array([hdc.similarity(q, row) for row in fps])
    assert np.array_equal(got, want)


@settings(max_examples=40, deadline=None)
@given(SEEDS, st.integers(1, 300), st.integers(1, 40), st.booleans())
def test_topk_matches_stable_argsort(seed, n, k, with_dups):
    fps = rand_hvs(seed, n)
    if with_dups:  # force equal similarities so the tie order is exercised
        rng = np.random.default_rng(seed)
        fps[rng.integers(0, n, n // 2)] = fps[0]
    q = hdc.bundle(fps[: min(3, n)])
    ref = np.array([hdc.similarity(q, row) for row in fps])
    ids, sims = hdc.hamming_topk(q, fps, k)
    want = np.argsort(-ref, kind="stable")[:k]
    assert np.array_equal(ids, want)
    assert np.array_equal(sims, ref[want])


# --- encoding, determinism -------------------------------------------------------------------


def test_encode_is_bundle_of_bound_roles():
    im = ItemMemory(5)
    pad, inten = (0.2, -0.7, 0.45), 0.62
    fp = hdc.encode(pad, "fear", inten, "crash", im, {"protocol": "aave", "gas": "spiking"})
    parts = [
        hdc.bind(im.R_pleasure, im.level(pad[0])),
        hdc.bind(im.R_arousal, im.level(pad[1])),
        hdc.bind(im.R_dominance, im.level(pad[2])),
        hdc.bind(im.R_emotion, im.symbol("fear")),
        hdc.bind(im.R_intensity, im.level_table(7)[round(inten * 6)]),
        hdc.bind(im.R_regime, im.symbol("crash")),
        hdc.bind(im.role("protocol"), im.symbol("aave")),
        hdc.bind(im.role("gas"), im.symbol("spiking")),
    ]
    assert np.array_equal(fp, hdc.bundle_reference(np.stack(parts), im.tiebreak))
    assert all(hdc.similarity(fp, p) > 0.6 for p in parts)


@settings(max_examples=10, deadline=None)
@given(SEEDS, st.integers(1, 20))
def test_encode_batch_rows_equal_encode(seed, n):
    rng = np.random.default_rng(seed)
    im = ItemMemory(seed)
    p, a, d = (rng.uniform(-1, 1, n).astype(np.float32) for _ in range(3))
    inten = rng.uniform(0, 1, n)
    emo = list(rng.choice(["fear", "joy", "anger", "neutral"], n))
    reg = list(rng.choice(["calm", "crash", "bull"], n))
    prot = list(rng.choice(["aave", "uniswap"], n))
    batch = hdc.encode_batch(p, a, d, emo, inten, reg, im, extra={"protocol": prot})
    assert batch.shape == (n, N_WORDS) and batch.dtype == np.uint64
    for i in range(n):
        one = hdc.encode((p[i], a[i], d[i]), emo[i], inten[i], reg[i], im, {"protocol": prot[i]})
        assert np.array_equal(batch[i], one)


def test_same_seed_same_fingerprints_other_seed_differs():
    args = ((-0.3, 0.6, -0.2), "fear", 0.5, "crash")
    e1 = hdc.encode(*args, ItemMemory(7), {"gas": "spiking"})
    e2 = hdc.encode(*args, ItemMemory(7), {"gas": "spiking"})
    e3 = hdc.encode(*args, ItemMemory(8), {"gas": "spiking"})
    assert np.array_equal(e1, e2)
    assert abs(hdc.similarity(e1, e3) - 0.5) < 0.03


def test_vectors_independent_of_call_order():
    names = ["fear", "joy", "aave", "spiking", "crash"]
    a, b = ItemMemory(7), ItemMemory(7)
    va = {n: a.symbol(n) for n in names}
    vb = {n: b.symbol(n) for n in reversed(names)}
    b.level_table(7)
    b.role("protocol")
    assert all(np.array_equal(va[n], vb[n]) for n in names)
    assert np.array_equal(a.level(0.3), b.level(0.3))
    # roles and symbols live in separate namespaces
    assert abs(hdc.similarity(a.role("gas"), a.symbol("gas")) - 0.5) < 0.03


def test_vectors_are_read_only():
    im = ItemMemory(0)
    with pytest.raises(ValueError):
        im.symbol("fear")[0] = 0


# --- compositional query and uses -------------------------------------------------------------


def test_compositional_query_ranks_the_match_first():
    im = ItemMemory(11)
    combos = list(itertools.product(["fear", "joy", "anger"], ["aave", "uniswap", "curve"], ["spiking", "normal"]))
    rng = np.random.default_rng(0)
    fps = np.stack(
        [
            hdc.encode(
                tuple(rng.uniform(-1, 1, 3)), emo, rng.uniform(0, 1), "crash", im, {"protocol": prot, "gas": gas}
            )
            for emo, prot, gas in combos
        ]
    )
    q = hdc.query(im, emotion="fear", protocol="aave", gas="spiking")
    ids, sims = hdc.hamming_topk(q, fps, len(combos))
    assert combos[ids[0]] == ("fear", "aave", "spiking")
    assert sims[0] - sims[1] > 0.02
    # partial matches (2 of 3) rank above combinations sharing at most 1 item
    shared = [sum(x == y for x, y in zip(combos[i], ("fear", "aave", "spiking"))) for i in ids]
    assert shared == sorted(shared, reverse=True)


def test_query_single_item_is_the_bound_pair():
    im = ItemMemory(2)
    assert np.array_equal(hdc.query(im, regime="crash"), hdc.bind(im.R_regime, im.symbol("crash")))


def test_high_arousal_prototype_prefers_fearful_entries():
    im = ItemMemory(3)
    proto = hdc.high_arousal_prototype(im)
    fear = hdc.encode((-0.5, 0.8, -0.4), "fear", 0.7, "crash", im)
    calm = hdc.encode((0.5, -0.6, 0.4), "trust", 0.3, "calm", im)
    assert hdc.similarity(proto, fear) > hdc.similarity(proto, calm) + 0.1


def test_somatic_score_weights():
    assert hdc.somatic_score(1, 1, 1, 1) == pytest.approx(1.0)
    assert hdc.somatic_score(1, 0, 0, 0) == pytest.approx(0.30)
    assert hdc.somatic_score(0, 1, 0, 0) == pytest.approx(0.30)
    assert hdc.somatic_score(0, 0, 1, 0) == pytest.approx(0.25)
    assert hdc.somatic_score(0, 0, 0, 1) == pytest.approx(0.15)
