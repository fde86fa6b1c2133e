"""Memory colours emotion (SPEC §2.1 recalled feeling) and the mood sets risk (SPEC §5 risk channel):
the formula layer by hand, the kernels against it, and a mind's tick that shows which level each reads."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from golem import appraisal, pad
from tests import minds

DAY = 86_400_000
H = 3 * DAY          # the tag half-life, SPEC §2.6


# ------------------------------------------------------------------ recalled feeling, by hand
def test_recalled_feeling_weighs_tags_by_score_and_charge():
    # two tagged entries: w = 0.6 * 1 and 0.2 * 0.5; P = (0.6 * -0.8 + 0.1 * 0.4) / 0.7, A likewise
    p, a = pad.recalled_feeling([0.6, 0.2], [1.0, 0.5], [(-0.8, 0.5, 0.1), (0.4, -0.2, 0.9)])
    assert p == pytest.approx((0.6 * -0.8 + 0.1 * 0.4) / 0.7, abs=1e-12)
    assert a == pytest.approx((0.6 * 0.5 + 0.1 * -0.2) / 0.7, abs=1e-12)


def test_untagged_entries_and_negative_scores_evoke_nothing():
    # the untagged entry (None) and the negative score weigh 0: only the first tag is felt
    assert pad.recalled_feeling([0.3, 0.9, -0.4], [1.0, 1.0, 1.0], [(-0.5, 0.2, 0.0), None, (0.9, 0.9, 0.9)]) == \
        pytest.approx((-0.5, 0.2), abs=1e-12)
    assert pad.recalled_feeling([0.9], [1.0], [None]) == (0.0, 0.0)
    assert pad.recalled_feeling([], [], []) == (0.0, 0.0)


def test_a_faded_tag_evokes_less_and_a_reactivated_one_more():
    # written at t = 0 with i0 0.8; one half-life later its charge is 0.5, two later 0.25
    assert pad.recall_charge(0.8, 0, H, False, None) == pytest.approx(0.5, abs=1e-12)
    assert pad.recall_charge(0.8, 0, 2 * H, False, None) == pytest.approx(0.25, abs=1e-12)
    # reactivated one half-life ago, read two half-lives after writing: (0.2 + 0.3 * 0.5) / 0.8
    assert pad.recall_charge(0.8, 0, 2 * H, True, H) == pytest.approx((0.2 + 0.15) / 0.8, abs=1e-12)
    # reactivated now, at creation: min(1, 0.8 + 0.3) / 0.8 = 1.25: more than when written
    assert pad.recall_charge(0.8, 0, 0, True, 0) == pytest.approx(1.25, abs=1e-12)
    assert pad.recall_charge(0.0, 0, 0, False, None) == 0.0
    # a fresh negative memory against a faded positive one of the same score: the fresh one dominates
    fresh, faded = pad.recall_charge(0.8, H * 2, H * 2, False, None), pad.recall_charge(0.8, 0, 2 * H, False, None)
    p, _ = pad.recalled_feeling([0.5, 0.5], [fresh, faded], [(-0.6, 0.0, 0.0), (0.6, 0.0, 0.0)])
    assert p == pytest.approx((1.0 * -0.6 + 0.25 * 0.6) / 1.25, abs=1e-12)


# ------------------------------------------------------------------ the kernel against the reference
def _grimoire_cols(rng, n_slots):
    return dict(has_tag=rng.random(n_slots) < 0.8, p=rng.uniform(-1, 1, n_slots).astype(np.float32),
                a=rng.uniform(-1, 1, n_slots).astype(np.float32), i0=rng.uniform(0, 1, n_slots).astype(np.float32),
                created_ms=rng.integers(0, 5 * DAY, n_slots), reactivated=rng.random(n_slots) < 0.3,
                last_react_ms=np.where(rng.random(n_slots) < 0.5, rng.integers(0, 5 * DAY, n_slots), -1),
                id=np.where(rng.random(n_slots) < 0.9, np.arange(n_slots), -1))


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 6), st.integers(1, 8))
def test_recalled_rows_is_the_scalar_reference(seed, n, k):
    rng = np.random.default_rng(seed)
    c = _grimoire_cols(rng, 64)
    slots = np.where(rng.random((n, k)) < 0.8, rng.integers(0, 64, (n, k)), -1)
    scores = rng.uniform(-0.3, 1.0, (n, k))
    pending = np.where(rng.random((n, 3)) < 0.4, rng.integers(0, 64, (n, 3)), -1)
    now = 6 * DAY
    got = appraisal.recalled_rows(np.arange(n), slots, scores, pending, c["has_tag"], c["p"], c["a"], c["i0"],
                                  c["created_ms"], c["reactivated"], c["last_react_ms"], c["id"], np.int64(now),
                                  float(H), 0.3, np.empty((n, 2)))
    for i in range(n):
        sc, ch, tags = [], [], []
        served = [j for j in range(k) if slots[i, j] >= 0]
        for j in served:
            s = slots[i, j]
            sc.append(scores[i, j])
            ch.append(pad.recall_charge(float(c["i0"][s]), int(c["created_ms"][s]), now, bool(c["reactivated"][s]),
                                        None if c["last_react_ms"][s] < 0 else int(c["last_react_ms"][s])))
            tags.append((float(c["p"][s]), float(c["a"][s]), 0.0) if c["has_tag"][s] else None)
        if served:     # the contrarian section, at the served entries' mean score (contrarian.weigh)
            mean = max(float(np.mean([scores[i, j] for j in served])), 0.0)
            for s in pending[i]:
                if s >= 0 and c["id"][s] >= 0:
                    sc.append(mean)
                    ch.append(pad.recall_charge(float(c["i0"][s]), int(c["created_ms"][s]), now,
                                                bool(c["reactivated"][s]),
                                                None if c["last_react_ms"][s] < 0 else int(c["last_react_ms"][s])))
                    tags.append((float(c["p"][s]), float(c["a"][s]), 0.0) if c["has_tag"][s] else None)
        assert tuple(got[i]) == pytest.approx(pad.recalled_feeling(sc, ch, tags), abs=1e-9)


def test_the_contrarian_section_joins_the_recalled_feeling_when_pending():
    # one served entry (P -0.8, score 0.4) and a pending overlooked entry (P +0.6): weights 0.4 and 0.4
    ix = np.array([0])
    has_tag = np.array([True, True])
    p, a = np.array([-0.8, 0.6], np.float32), np.array([0.2, -0.4], np.float32)
    i0, created = np.array([0.5, 0.5], np.float32), np.array([0, 0])
    react, last, ids = np.zeros(2, bool), np.array([-1, -1]), np.array([0, 1])
    args = (has_tag, p, a, i0, created, react, last, ids, np.int64(0), float(H), 0.3, np.empty((1, 2)))
    alone = appraisal.recalled_rows(ix, np.array([[0]]), np.array([[0.4]]), np.full((1, 3), -1), *args).copy()
    both = appraisal.recalled_rows(ix, np.array([[0]]), np.array([[0.4]]), np.array([[1, -1, -1]]), *args)
    assert alone[0] == pytest.approx((float(p[0]), float(a[0])), abs=1e-7)
    assert both[0] == pytest.approx(((float(p[0]) + float(p[1])) / 2, (float(a[0]) + float(a[1])) / 2), abs=1e-7)


# ------------------------------------------------------------------ the stimulus term
def test_the_recalled_feeling_enters_p_and_a_inside_their_tanh_and_never_d():
    cfg = minds.config(appraisal__recall_gain=0.5)
    ap = cfg.appraisal
    one = np.ones(1)
    kw = dict(outcome=0.1 * one, prediction=0 * one, contradicted=0 * one, vol_ratio=one, probe_sev=np.zeros(1, int),
              impulse_a=0 * one, impulse_d=0 * one, control=0 * one, worked=0 * one, shock=0 * one)
    p, a, d = appraisal.stimulus(ap, recalled=np.array([[-0.6, 0.4]]), **kw)
    assert p[0] == pytest.approx(math.tanh(0.1 + 0.5 * -0.6), abs=1e-12)
    assert a[0] == pytest.approx(math.tanh(0.7 * (0.0 + 0.5 * 0.4)), abs=1e-12)
    p0, a0, d0 = appraisal.stimulus(ap, **kw)
    assert d[0] == d0[0] == pytest.approx(0.0, abs=1e-12)
    assert p0[0] == pytest.approx(math.tanh(0.1), abs=1e-12) and a0[0] == 0.0
    # recall_gain 0: the market-only update
    p, a, _ = appraisal.stimulus(minds.config(appraisal__recall_gain=0.0).appraisal, recalled=np.array([[-0.6, 0.4]]),
                                 **kw)
    assert (p[0], a[0]) == (p0[0], a0[0])


def test_a_tick_feels_what_the_last_decision_recalled():
    """Two Golems, one market: the one whose last decision recalled a dark memory feels it in its next
    emotion (P lower by the term's effect), the other not; with recall_gain 0 both feel alike."""
    def tick(gain):
        m = minds.mind(n=2, cfg=minds.config(appraisal__recall_gain=gain))
        m.pop.recalled[0] = (-0.8, 0.6)
        m.pop.last_ms[:] = minds.DAY - 300_000
        m.pop.last_price[:] = 100.0
        m.pop.last_value[:] = 10_000.0
        s = m.sense(np.arange(2), minds.observation(m))
        return s.pad
    felt, plain = tick(0.5), tick(0.0)
    assert felt[0, 0] < felt[1, 0] and felt[0, 1] > felt[1, 1]
    assert felt[0, 2] == felt[1, 2]                 # dominance is judged from the present
    assert felt[1] == pytest.approx(plain[1], abs=0) and plain[0] == pytest.approx(plain[1], abs=0)


# ------------------------------------------------------------------ the risk channel, by hand
RISK = minds.config().decision.risk_by_emotion


def _mood(name, intensity):
    """A mood on the prototype of `name` with the given intensity (||pad|| / sqrt(3))."""
    v = np.asarray(pad.load_prototypes()[name], dtype=float)
    return tuple(v / np.linalg.norm(v) * intensity * math.sqrt(3))


@pytest.mark.parametrize("name, band_values", [
    ("fear", (0.90, 0.80, 0.60)), ("sadness", (0.90, 0.80, 0.60)), ("surprise", (0.90, 0.90, 0.90)),
    ("anger", (1.05, 1.10, 1.15)), ("joy", (1.0, 1.0, 1.0)), ("trust", (1.0, 1.0, 1.0)),
    ("anticipation", (1.0, 1.0, 1.0)), ("disgust", (1.0, 1.0, 1.0))])
def test_the_risk_multiplier_by_label_and_band(name, band_values):
    """SPEC §5: fear and sadness -10 / -20 / -40 %, surprise -10 %, anger +5 / +10 / +15 %, the rest 0;
    bands mild < 0.33 <= moderate < 0.66 <= intense of the mood's intensity."""
    for intensity, want in zip((0.2, 0.5, 0.8), band_values):
        assert pad.risk_multiplier(_mood(name, intensity), RISK) == pytest.approx(want, abs=1e-12), (name, intensity)
    # the band edges belong to the band above
    assert pad.risk_multiplier(_mood(name, 0.33 + 1e-9), RISK) == pytest.approx(band_values[1], abs=1e-12)
    assert pad.risk_multiplier(_mood(name, 0.66 + 1e-9), RISK) == pytest.approx(band_values[2], abs=1e-12)


def test_a_neutral_mood_changes_nothing_and_the_boost_is_capped():
    assert pad.risk_multiplier((0.02, -0.02, 0.01), RISK) == 1.0          # norm below 0.05
    assert pad.risk_multiplier(_mood("anger", 0.9), {"anger": (0.5, 0.5, 0.5)}) == pytest.approx(1.2, abs=1e-12)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(*(st.floats(-1, 1, allow_nan=False),) * 3), min_size=1, max_size=12))
def test_the_risk_kernel_is_the_scalar_reference(moods):
    m = np.array(moods, dtype=float)
    got = appraisal.risk_multiplier_batch(m, appraisal.prototype_matrix(), appraisal.risk_table(RISK), 0.2, 0.05)
    for row, g in zip(moods, got):
        assert g == pytest.approx(pad.risk_multiplier(row, RISK), abs=1e-12)


def test_the_decision_scales_exposure_by_the_mood_not_the_emotion():
    """A fearful mood (intense) under a joyful emotion costs 40 % of a built-in's target; the swap (a fearful
    emotion under a calm mood) costs nothing: the risk channel reads the mood (SPEC §2.1, §5)."""
    fear, joy = _mood("fear", 0.8), _mood("joy", 0.8)

    def target(emotion, mood):
        m = minds.mind(n=1)
        s = minds.sensed(m, [0], pad=emotion, mood=mood)
        out = minds.TickOutput()
        return m.decide(np.array([0]), minds.observation(m), s, out).target[0]
    calm = target(joy, (0.01, 0.0, 0.01))
    assert target(joy, fear) == pytest.approx(0.6 * calm, abs=1e-12)
    assert target(fear, (0.01, 0.0, 0.01)) == pytest.approx(calm, abs=1e-12)
