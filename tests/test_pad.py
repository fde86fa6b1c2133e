"""The formula layer (SPEC §16) against hand-computed values."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from golem import pad
from golem.curator import emotional_balance
from golem.grimoire import fill
from golem.retrieval import four_factor_score

DAY = 86_400_000
unit = st.floats(-1, 1, allow_nan=False)


def test_pad_cosine_safe_hand_values():
    assert pad.pad_cosine_safe((1, 0, 0), (1, 0, 0)) == pytest.approx(1.0, abs=1e-12)
    assert pad.pad_cosine_safe((1, 0, 0), (-1, 0, 0)) == pytest.approx(0.0, abs=1e-12)
    assert pad.pad_cosine_safe((1, 0, 0), (0, 1, 0)) == pytest.approx(0.5, abs=1e-12)
    assert pad.pad_cosine_safe((1, 1, 0), (1, 0, 0)) == pytest.approx((1 / math.sqrt(2) + 1) / 2, abs=1e-12)


def test_pad_cosine_safe_zero_vectors_are_neutral():
    assert pad.pad_cosine_safe((0, 0, 0), (0.3, -0.2, 0.9)) == 0.5
    assert pad.pad_cosine_safe((0.3, -0.2, 0.9), (0, 0, 0)) == 0.5
    assert pad.pad_cosine_safe((0, 0, 0), (0, 0, 0)) == 0.5


def test_intensity():
    assert pad.intensity((1, 1, 1)) == pytest.approx(1.0)
    assert pad.intensity((-1, -1, -1)) == pytest.approx(1.0)
    assert pad.intensity((0.3, 0.4, 0.0)) == pytest.approx(0.5 / math.sqrt(3))
    assert pad.intensity((0, 0, 0)) == 0.0


def test_arousal_encoding_factor():
    assert pad.arousal_encoding_factor(0.3) == pytest.approx(1.0)
    assert pad.arousal_encoding_factor(0.9) == pytest.approx(math.exp(-0.5))
    assert pad.arousal_encoding_factor(-0.3) == pytest.approx(math.exp(-0.5))
    assert pad.arousal_encoding_factor(-1.0) == pytest.approx(math.exp(-1.69 / 0.72))


def test_classify_prototypes_and_neutral():
    protos = pad.load_prototypes()
    for name, vec in protos.items():
        assert pad.classify(vec) == name
    assert pad.classify((0, 0, 0)) == "neutral"
    assert pad.classify((0.02, 0.02, 0.02)) == "neutral"   # norm 0.035 < 0.05
    assert pad.classify((0.03, 0.03, 0.03)) != "neutral"   # norm 0.052


def test_prototypes_match_the_sign_patterns():
    for name, vec in pad.load_prototypes().items():
        for sign, x in zip(pad.SIGN_PATTERNS[name], vec):
            if sign:
                assert (x > 0) == (sign > 0), name


def test_emotional_intensity_at_decay_and_reactivation():
    # half-life 3 days: after 3 days half, after 6 a quarter
    assert pad.emotional_intensity_at(0.8, 0, 3 * DAY, False, None) == pytest.approx(0.4)
    assert pad.emotional_intensity_at(0.8, 0, 6 * DAY, False, None) == pytest.approx(0.2)
    # never reactivated: no boost even with a timestamp
    assert pad.emotional_intensity_at(0.8, 0, 3 * DAY, False, 3 * DAY) == pytest.approx(0.4)
    # reactivated without a timestamp: no boost
    assert pad.emotional_intensity_at(0.8, 0, 3 * DAY, True, None) == pytest.approx(0.4)
    # reactivated now: +0.3; reactivated 3 days ago: +0.15
    assert pad.emotional_intensity_at(0.8, 0, 3 * DAY, True, 3 * DAY) == pytest.approx(0.7)
    assert pad.emotional_intensity_at(0.8, 0, 6 * DAY, True, 3 * DAY) == pytest.approx(0.2 + 0.15)
    # capped at 1
    assert pad.emotional_intensity_at(1.0, 0, 0, True, 0) == 1.0


def test_charge_fading_factor():
    assert pad.faded_emotional_factor(0.9, 1.0) == pytest.approx(0.9)
    assert pad.faded_emotional_factor(0.9, 0.5) == pytest.approx(0.7)
    assert pad.faded_emotional_factor(0.1, 0.0) == pytest.approx(0.5)
    assert pad.charge(0.8, 0.4) == pytest.approx(0.5)
    assert pad.charge(0.0, 0.3) == 1.0          # zero-intensity tag: clipped, not divided by zero
    assert pad.charge(0.5, 0.9) == 1.0          # reactivation above i0 clips to 1


def test_apply_contagion_moves_p_and_a_only_and_clamps():
    assert pad.apply_contagion((0.9, 0.5, -0.4), (0.5, 0.8, 0.9)) == pytest.approx((1.0, 0.74, -0.4))
    assert pad.apply_contagion((-0.9, -0.95, 0.2), (-0.6, -0.5, -1.0)) == pytest.approx((-1.0, -1.0, 0.2))
    assert pad.apply_contagion((0.0, 0.0, 0.3), (0.5, 0.5, 0.5), attenuation=0.5) == pytest.approx((0.25, 0.25, 0.3))


def test_affect_step_by_hand():
    # rho = 2^(-dt / H): one half-life leaves half of the previous state
    assert pad.affect_step((0.5, 0.0, 0.0), (1.0, 0.0, 0.0), 600, 600) == pytest.approx((0.75, 0.0, 0.0))
    # two half-lives: rho = 0.25; 0.25 * 0.2 + 0.75 * -1 = -0.70; 0.25 * -0.4 + 0.75 = 0.65; 0.75 * 0.5 = 0.375
    assert pad.affect_step((0.2, -0.4, 0.0), (-1.0, 1.0, 0.5), 1200, 600) == pytest.approx((-0.70, 0.65, 0.375))
    assert pad.affect_step((0.3, 0.3, 0.3), (1.0, 1.0, 1.0), 0, 600) == pytest.approx((0.3, 0.3, 0.3))   # no time, no change


def test_emotion_step_by_hand_and_its_steady_state():
    # 300 s at H = 600 s: rho = 2^-0.5 = 0.70710678; 0.9 rho + (1 - rho) = 0.92928932
    assert pad.emotion_step((0.9, 0.9, 0.9), (1, 1, 1), 300) == pytest.approx((0.92928932,) * 3)
    e = (0.0, 0.0, 0.0)
    for _ in range(200):   # a constant stimulus is where emotion comes to rest, never past it
        e = pad.emotion_step(e, (0.8, -0.6, 0.99), 300)
        assert all(abs(x) <= 0.99 + 1e-12 for x in e)
    assert e == pytest.approx((0.8, -0.6, 0.99), abs=1e-9)


def test_mood_step_by_hand_rests_at_temperament_and_clamps():
    # one half-life (12 h): mood - baseline = 0.5 * (0.1 - 0.2, 0 + 0.2, 0) + 0.5 * (-0.5, 0.5, 0) = (-0.30, 0.35, 0)
    assert pad.mood_step((0.1, 0.0, 0.0), (-0.5, 0.5, 0.0), (0.2, -0.2, 0.0), 43_200) == pytest.approx((-0.10, 0.15, 0.0))
    m = (0.7, -0.7, 0.7)
    for _ in range(240):   # ten days of nothing felt: the mood returns to the temperament
        m = pad.mood_step(m, (0.0, 0.0, 0.0), (0.2, -0.1, 0.0), 3600)
    assert m == pytest.approx((0.2, -0.1, 0.0), abs=1e-3)
    for _ in range(200):   # temperament 0.5 plus an emotion of 0.9 would be 1.4: every write clamps
        m = pad.mood_step(m, (0.9, 0.0, 0.0), (0.5, 0.0, 0.0), 43_200)
    assert m[0] == 1.0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(unit, unit, unit, unit, unit, unit, unit, unit, unit, st.floats(0, 1e6)), min_size=1, max_size=8))
def test_vectorised_affect_updates_match_the_scalar_steps(rows):
    from golem.appraisal import emotion_update, mood_update
    prev = np.array([r[0:3] for r in rows])
    stim = np.array([r[3:6] for r in rows])
    base = np.array([r[6:9] for r in rows])
    dt = np.array([r[9] for r in rows])
    emo = emotion_update(prev, stim, dt, 600.0)
    mood = mood_update(prev, emo, base, dt, 43_200.0)
    for i, r in enumerate(rows):
        e = pad.emotion_step(tuple(prev[i]), tuple(stim[i]), dt[i], 600.0)
        assert tuple(emo[i]) == pytest.approx(e, abs=1e-12)
        assert tuple(mood[i]) == pytest.approx(pad.mood_step(tuple(prev[i]), e, tuple(base[i]), dt[i], 43_200.0), abs=1e-12)


def test_emotional_balance_counts_untagged_in_n():
    vc, ac = emotional_balance([0.6, 0.4], [0.9, 0.5], 4)   # 2 tagged, 2 untagged
    assert vc == pytest.approx(-0.25 * 0.4)
    assert ac == pytest.approx(-(0.35 - 0.3) * 0.3)
    vc, ac = emotional_balance([0.6, 0.4], [0.9, 0.5], 2)
    assert vc == pytest.approx(-0.5 * 0.4)
    assert ac == pytest.approx(-(0.7 - 0.3) * 0.3)
    assert emotional_balance([], [], 0) == (0.0, 0.0)
    assert emotional_balance([-0.5], [0.1], 1) == (pytest.approx(0.2), 0.0)


def test_four_factor_score():
    """SPEC §16: the second argument is the hours since the last access (temporal = 0.995 ** it)."""
    assert four_factor_score(0.5, 10, 0.4, 0.7) == pytest.approx(0.2 + 0.2 * 0.995**10 + 0.1 + 0.105)
    assert four_factor_score(1, 0, 1, 1) == pytest.approx(1.0)
    assert four_factor_score(-1, 0, 0, 0) == pytest.approx(-0.2)


def test_fill_never_passes_one():
    assert fill(0.4, 0.5) == pytest.approx(0.7)
    assert fill(1.0, 1.0) == 1.0
    assert fill(0.0, 0.0) == 0.0


def test_attribution_and_bands():
    assert pad.attribution(0.5) == "internal"
    assert pad.attribution(-0.5) == "external"
    assert pad.attribution(0.2) == "mixed"
    assert pad.arousal_band(-0.31) == "low"
    assert pad.arousal_band(0.5) == "moderate"
    assert pad.arousal_band(0.51) == "high"


def test_emotion_label_rules():
    assert pad.emotion_label(-0.3, 0.0, 2, 0, False) == "frustration"
    assert pad.emotion_label(0.3, 0.0, 0, 3, False) == "success"
    assert pad.emotion_label(0.3, 0.0, 0, 2, False) == "neutral"
    assert pad.emotion_label(-0.1, 0.7, 1, 0, False) == "risk"
    assert pad.emotion_label(0.5, 0.0, 0, 0, True) == "risk"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(unit, unit, unit), min_size=1, max_size=40), st.integers(0, 2**31))
def test_classify_batch_is_the_scalar_classify_whatever_the_batch(pads, seed):
    """The cohort's emotion codes (`appraisal.classify_batch`) name what `pad.classify` names for
    each PAD (the prototypes' cosines within 1e-9 of each other aside, where the two arithmetics may
    pick either), and a Golem's code is the same alone as in any batch."""
    from golem.appraisal import classify_batch, prototype_matrix
    units = prototype_matrix()
    rng = np.random.default_rng(seed)
    p, a, d = (np.array(c, dtype=np.float64) * rng.choice([1.0, 0.03, 0.0], len(pads)) for c in zip(*pads))
    codes = classify_batch(p, a, d, units)
    names = ("neutral",) + pad.EMOTIONS
    for i in range(len(pads)):
        v = (p[i], a[i], d[i])
        assert classify_batch(p[i:i + 1], a[i:i + 1], d[i:i + 1], units)[0] == codes[i]
        want = pad.classify(v)
        if names[codes[i]] != want:
            cos = sorted(pad.pad_cosine_safe(v, u) for u in pad.load_prototypes().values())
            assert cos[-1] - cos[-2] < 1e-9, (v, names[codes[i]], want)


def test_classify_batch_prototypes_neutral_and_ties_by_hand():
    from golem.appraisal import classify_batch, prototype_matrix
    protos = pad.load_prototypes()
    vecs = np.array([protos[e] for e in pad.EMOTIONS] + [(0.02, 0.02, 0.02), (0.03, 0.03, 0.03), (0.0, 0.0, 0.0)])
    codes = classify_batch(vecs[:, 0], vecs[:, 1], vecs[:, 2], prototype_matrix())
    assert codes[:len(pad.EMOTIONS)].tolist() == list(range(1, len(pad.EMOTIONS) + 1))
    assert codes[-3] == 0 and codes[-2] != 0 and codes[-1] == 0        # norms 0.035, 0.052, 0
    # two identical prototypes: the earlier one in SPEC order wins
    twin = prototype_matrix()[[1, 1, 0]]
    assert classify_batch(np.array([twin[0, 0]]), np.array([twin[0, 1]]), np.array([twin[0, 2]]), twin)[0] == 1
