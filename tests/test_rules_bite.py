"""Spec rules that a one-line mutation could break unseen, each asserted by hand from SPEC.md on a
hand-built Mind (tests/minds.py) whose mood differs from its emotion, so a rule that reads the
wrong level of affect (§2.1) fails: the two time scales over an irregular Δt, the engine's own
classification and intensity, the arousal band, the regime shift's boost, mood-congruent recall and
its safe cosine, the contrarian query, the flashbulb's budget, trigger and price, the warnings'
threshold, the reference four-factor score (§16); and a run whose recorded mood, intensity and
flashbulb windows are recomputed from its other columns."""
from __future__ import annotations

import json
import math

import numpy as np
import polars as pl
import pytest

import minds
from conftest import events, table
from golem import contrarian
from golem import grimoire as gm
from golem.heartbeat import CAT, K_PRICE, TickOutput
from golem.pad import EMOTION_CODES, load_prototypes
from golem.retrieval import four_factor_score

DAY = minds.DAY
HOUR = 3_600_000
IX = np.array([0])
AWAKE = "SENSING>DECIDING>ACTING>REFLECTING"


def _rho(dt_s: float, half_life_s: float) -> float:
    """SPEC §2.1: ρ(H) = 2^(-Δt / H)."""
    return 2.0 ** (-dt_s / half_life_s)


def _pad_cos(a, b) -> float:
    """SPEC §4.1 pad_cosine_safe, written out: (dot / (max(|a|, 1e-8) max(|b|, 1e-8)) + 1) / 2."""
    dot = sum(x * y for x, y in zip(a, b))
    na = max(math.sqrt(sum(x * x for x in a)), 1e-8)
    nb = max(math.sqrt(sum(x * x for x in b)), 1e-8)
    return (dot / (na * nb) + 1.0) / 2.0


def _factor(a: float) -> float:
    """SPEC §2.4 arousal_encoding_factor: exp(-(A - 0.3)^2 / (2 * 0.6^2))."""
    return math.exp(-((a - 0.3) ** 2) / 0.72)


def _awake(pad, mood, dt_s: float, now_ms: int = DAY, **cfg):
    """A Mind of len(pad) Golems that last ticked dt_s ago (awake, no dream due) with this emotion and
    mood, holding nothing, at price 100 as before: the next `tick` at now_ms is a plain awake tick."""
    pad = np.asarray(pad, float)
    m = minds.mind(n=len(pad), cfg=minds.config(**{"dream.enabled": False, **cfg}))
    pop = m.pop
    pop.last_price[:] = 100.0
    pop.last_value[:] = 10_000.0
    pop.last_ms[:] = now_ms - int(round(dt_s * 1000))
    pop.last_regime[:] = 0
    pop.pad[:] = pad
    pop.mood[:] = np.asarray(mood, float)
    return m


def _columns(h, *names) -> np.ndarray:
    return np.stack([np.asarray(h[k], float) for k in names], axis=1)


# ----------------------------------------------------------------------------- §1, §2.1 two time scales
def test_emotion_and_mood_follow_their_half_lives_over_an_irregular_dt():
    """Δt = 1234 s since the last tick (not the 300 s cadence). Two Golems alike but for their
    emotion and mood see the same stimulus, so their emotions after the tick differ by ρ(600 s) times
    their difference before (§2.1: emotion = ρ e + (1 - ρ) stimulus, H_e = 10 min): 2^(-1234/600) =
    0.2404, not the 0.7071 of a fixed 300 s step. The mood integrates the emotion after the tick,
    not the stimulus: mood = ρ(12 h) mood + (1 - ρ(12 h)) emotion (baseline 0)."""
    dt = 1234.0
    e0 = np.array([[0.6, -0.5, 0.4], [-0.2, 0.3, -0.1]])
    m0 = np.array([[-0.3, 0.2, 0.1], [0.4, -0.1, 0.2]])
    m = _awake(e0, m0, dt)
    h = m.tick(np.arange(2), minds.observation(m)).heartbeats
    e = _columns(h, "p", "a", "d")
    mood = _columns(h, "mood_p", "mood_a", "mood_d")
    rho_e = 2.0 ** (-1234.0 / 600.0)
    assert rho_e == pytest.approx(0.24037, abs=1e-5)
    np.testing.assert_allclose(e[0] - e[1], rho_e * (e0[0] - e0[1]), rtol=0, atol=1e-12)
    stimulus = (e[0] - rho_e * e0[0]) / (1.0 - rho_e)      # what both saw: far from the emotion after
    assert np.abs(stimulus - e[0]).max() > 0.05
    rho_m = 2.0 ** (-1234.0 / 43_200.0)
    np.testing.assert_allclose(mood, rho_m * m0 + (1.0 - rho_m) * e, rtol=0, atol=1e-12)


# ----------------------------------------------------------------------------- §2.2, §2.3 the engine's copies
def test_a_tick_classifies_from_norm_0_05_and_records_intensity_over_sqrt_3():
    """The emotion code and intensity a tick records come from the engine's own classification and
    intensity (SENSING), not the reference functions. A second after the last tick the emotion is
    its old value to ~1e-3: a fear-like PAD of norm 0.1 is fear (the neutral threshold is |PAD| <
    0.05, §2.2), one of norm 0.04 neutral; (0.6, 0, 0.8), of norm 1, has intensity 1 / sqrt 3 =
    0.5774 (§2.3), not 1 / 3."""
    fear = np.asarray(load_prototypes()["fear"], float)
    fear = fear / np.linalg.norm(fear)
    e0 = np.array([0.1 * fear, 0.04 * fear, [0.6, 0.0, 0.8]])
    m = _awake(e0, [[0.2, 0.1, 0.1]] * 3, dt_s=1.0)
    h = m.tick(np.arange(3), minds.observation(m)).heartbeats
    e = _columns(h, "p", "a", "d")
    norm = np.sqrt((e * e).sum(axis=1))
    assert norm[0] == pytest.approx(0.1, abs=2e-3) and norm[1] == pytest.approx(0.04, abs=2e-3)
    assert [EMOTION_CODES[c] for c in h["emotion"]][:2] == ["fear", "neutral"]
    assert h["intensity"][2] == pytest.approx(1.0 / math.sqrt(3.0), abs=2e-3)
    np.testing.assert_allclose(h["intensity"], norm / math.sqrt(3.0), rtol=0, atol=1e-12)


# ----------------------------------------------------------------------------- §2.4 arousal band
def test_the_low_arousal_band_is_the_emotions():
    """§2.4 with §2.1: the band is the emotion's. Golem 0 feels A -0.5 < -0.3 in a mood of A +0.2: its
    price-move episode is ephemeral; Golem 1 feels A +0.2 in a mood of A -0.5: tactical. Both
    salience = |PAD| / sqrt 3 (P >= 0, no P&L, no signal), below 0.7, so neither is promoted."""
    m = minds.mind(n=2)
    ix = np.arange(2)
    pad = np.array([[0.3, -0.5, 0.2], [0.3, 0.2, 0.45]])
    mood = np.array([[0.1, 0.2, 0.0], [0.1, -0.5, 0.0]])
    m.reflect(ix, minds.observation(m), minds.sensed(m, ix, pad=pad, mood=mood), minds.decided(m, ix),
              minds.acted(ix), TickOutput())
    c = m.gr.cols
    rows = np.flatnonzero((c["id"] >= 0) & (c["kind"] == K_PRICE))
    assert (rows // m.gr.capacity).tolist() == [0, 1]
    assert c["decay_class"][rows].tolist() == [gm.EPHEMERAL, gm.TACTICAL]
    want = [math.sqrt(0.09 + 0.25 + 0.04) / math.sqrt(3), math.sqrt(0.09 + 0.04 + 0.2025) / math.sqrt(3)]
    assert c["salience"][rows].tolist() == pytest.approx(want, abs=1e-6)


# ----------------------------------------------------------------------------- §3.3 regime shift
def test_a_regime_shift_adds_0_1_to_salience():
    """§3.3: salience = |PAD| / sqrt 3 = sqrt(0.5) / sqrt 3 = 0.4082 for PAD (0.3, 0.4, 0.5) (P > 0, no
    P&L, role scale 1 for an observation); a regime shift adds 0.1: 0.5082."""
    m = minds.mind(n=2)
    ix = np.arange(2)
    s = minds.sensed(m, ix, pad=(0.3, 0.4, 0.5), regime_shift=np.array([False, True]))
    m.reflect(ix, minds.observation(m), s, minds.decided(m, ix), minds.acted(ix), TickOutput())
    c = m.gr.cols
    rows = np.flatnonzero((c["id"] >= 0) & (c["kind"] == K_PRICE))
    base = math.sqrt(0.5) / math.sqrt(3)
    assert c["salience"][rows].tolist() == pytest.approx([base, base + 0.1], abs=1e-6)


# ----------------------------------------------------------------------------- §4.1 mood-congruent recall
def _put(m, g, tags, now_ms, conf=0.8, emb=None):
    """Entries of Golem g with these PAD tags, written now (charge 1: no fading), all alike else."""
    n = len(tags)
    tags = np.asarray(tags, float)
    emb = np.tile(np.eye(1, m.gr.dim), (n, 1)) if emb is None else emb
    slots, _ = m.gr.insert(np.full(n, g), emb, dict(
        created_ms=now_ms, last_access_ms=now_ms, window_ms=np.inf, decay_class=gm.STRUCTURAL, has_tag=True,
        p=tags[:, 0].astype(np.float32), a=tags[:, 1].astype(np.float32), d=tags[:, 2].astype(np.float32),
        i0=np.float32(0.5), importance=np.float32(0.5), confidence=np.float32(conf)))
    return m.gr.cols["id"][slots].tolist()


def test_recall_scores_the_tag_against_the_mood_with_the_safe_cosine():
    """§4.1: emotional = pad_cosine_safe(tag, mood). Golem 0: tag (0.6, 0.8, 0), mood (0.3, 0.4, 0)
    (cosine 1: factor 1.0), emotion (-0.6, -0.8, 0) (cosine -1: it would give 0). Golem 1: the same
    tag, a mood of norm 0.05, (0.03, 0.04, 0): max(0.05, 1e-8) leaves it whole, so the factor is
    1.0 again (an epsilon of 0.1 would give 0.75). The recorded query is the mood."""
    m = minds.mind(n=2)
    ix = np.arange(2)
    ids = [_put(m, g, [(0.6, 0.8, 0.0)], DAY)[0] for g in ix]
    mood = np.array([[0.3, 0.4, 0.0], [0.03, 0.04, 0.0]])
    s = minds.sensed(m, ix, pad=np.array([[-0.6, -0.8, 0.0], [-0.3, -0.4, 0.1]]), mood=mood)
    out = TickOutput()
    m.decide(ix, minds.observation(m), s, out)
    r = out.retrievals
    assert [int(r["ids"][g][0]) for g in ix] == ids
    assert _pad_cos((0.6, 0.8, 0.0), (0.03, 0.04, 0.0)) == pytest.approx(1.0)
    assert r["factors"][:, 0, 3].tolist() == pytest.approx([1.0, 1.0], abs=1e-12)
    sem, temporal, imp = r["factors"][:, 0, 0], r["factors"][:, 0, 1], r["factors"][:, 0, 2]
    assert temporal.tolist() == [1.0, 1.0] and imp.tolist() == pytest.approx([0.5, 0.5])
    np.testing.assert_allclose(r["scores"][:, 0], 0.40 * sem + 0.20 + 0.25 * 0.5 + 0.15 * 1.0, rtol=0, atol=1e-6)
    assert np.c_[r["query_p"], r["query_a"], r["query_d"]].tolist() == mood.tolist()


def test_the_reference_four_factor_score_takes_the_hours_since_access():
    """§16: four_factor_score(semantic, hours_since_access, importance, emotional) =
    0.40 semantic + 0.20 * 0.995 ** hours + 0.25 importance + 0.15 emotional."""
    assert four_factor_score(0.5, 10.0, 0.4, 0.7) == pytest.approx(0.2 + 0.2 * 0.995**10 + 0.1 + 0.105, abs=1e-15)
    assert four_factor_score(0.0, 0.0, 0.0, 0.0) == pytest.approx(0.2, abs=1e-15)       # 0.995 ** 0 = 1
    assert four_factor_score(-1.0, 138.3, 1.0, 0.0) == pytest.approx(-0.4 + 0.1 + 0.25, abs=1e-4)   # half-life 138.3 h
    assert four_factor_score(1.0, 1.0, 1.0, 1.0) == pytest.approx(0.8 + 0.2 * 0.995, abs=1e-15)


# ----------------------------------------------------------------------------- §4.4 contrarian
def test_the_contrarian_query_flips_the_moods_pleasure_and_keeps_3():
    """§4.4: for a mood (0.5, 0.5, 0) the query is (-0.5, 0.5, 0) over entries of negative P with
    confidence >= 0.6, and the section holds the top 3. Five such entries, alike but for their tags:
    against the flipped query their emotional factors are 1.0, 0.8726, 0.8904, 0.9069, 0.5 (tag
    (-0.5, 0.5, 0), (-x, 0.9, 0) for x = 0.05, 0.1, 0.15, then (-0.5, -0.5, 0)), so the section is
    entries 0, 3, 2 in that order; with the mood's own P it would be 1, 2, 3 (0.8334, 0.8124,
    0.7906 against 0.5 for entry 0). The entry of positive P is never in it."""
    m = minds.mind(n=1)
    tags = [(-0.5, 0.5, 0.0), (-0.05, 0.9, 0.0), (-0.1, 0.9, 0.0), (-0.15, 0.9, 0.0), (-0.5, -0.5, 0.0),
            (0.5, 0.5, 0.0)]
    ids = _put(m, 0, tags, DAY)
    flipped = (-0.5, 0.5, 0.0)
    emo = [_pad_cos(t, flipped) for t in tags[:5]]
    assert emo == pytest.approx([1.0, 0.8726, 0.8904, 0.9069, 0.5], abs=1e-4)
    figs = contrarian.pass_(m, IX, np.eye(1, m.gr.dim, dtype=np.float32), np.array([[0.5, 0.5, 0.0]]), DAY)
    assert figs["ids"][0] == [ids[0], ids[3], ids[2]]
    assert figs["valence_sign"].tolist() == [-1] and figs["pool_n"].tolist() == [5]
    assert m.pop.contrarian_pending.shape == (1, 3)


def test_the_contrarian_pass_of_a_tick_reads_the_mood_not_the_emotion():
    """§4.4 with §2.1: the 100th tick's contrarian pass queries the opposite valence of the mood.
    Mood P +0.4, emotion P -0.5: the section holds entries of negative P only (the one written
    beforehand among them), never the positive one, and its event records the mood's P."""
    m = _awake([[-0.5, 0.2, 0.0]], [[0.4, 0.1, 0.0]], dt_s=1.0)
    neg, pos = _put(m, 0, [(-0.4, 0.3, 0.0), (0.4, 0.3, 0.0)], DAY - 1000)
    m.pop.tick[:] = 99
    out = m.tick(IX, minds.observation(m))
    ev = minds.events(out, "contrarian")
    assert len(ev) == 1
    pl_ = ev[0]["payload"]
    assert pl_["mood_p"] == pytest.approx(float(out.heartbeats["mood_p"][0]), abs=1e-12) and pl_["mood_p"] > 0.39
    assert pl_["valence_sign"] == -1
    c = m.gr.cols
    got = pl_["ids"]
    assert neg in got and pos not in got
    assert all(c["p"][m.gr.slot_of(i)] < 0 for i in got)


# ----------------------------------------------------------------------------- §5, §6 flashbulbs
@pytest.mark.parametrize("ago_h, fires", [((13, 14, 23.5), False), ((13, 14, 24), True), ((1, 25, 30), True)])
def test_the_flashbulb_budget_is_a_rolling_24_hours(ago_h, fires):
    """§6: at most 3 per rolling 24 h; a 4th needs A > 0.8. Three flashbulbs 13, 14 and 23.5 h ago are
    all in the window: a P&L trigger at A 0.75 is suppressed (in_window 3, required 0.8). One exactly
    24 h ago has left it (in_window 2: fires), as have two 25 and 30 h ago."""
    m = minds.mind(n=1)
    now = 3 * DAY
    m.pop.fb_times[0, :3] = [now - int(h * HOUR) for h in ago_h]
    s = minds.sensed(m, IX, pad=(-0.3, 0.75, 0.0), tick_pnl=-600.0)
    out = TickOutput()
    rf = m.reflect(IX, minds.observation(m, now_ms=now), s, minds.decided(m, IX), minds.acted(IX), out)
    assert bool(rf.flashbulb[0]) == fires
    ev = minds.events(out, "flashbulb" if fires else "flashbulb_suppressed")
    assert len(ev) == 1 and ev[0]["payload"]["in_window"] == {(13, 14, 23.5): 3, (13, 14, 24): 2, (1, 25, 30): 1}[ago_h]
    assert ev[0]["payload"]["required_arousal"] == (0.7 if fires else 0.8)


def test_a_flashbulbs_forced_t2_reflection_costs_the_t2_price():
    """§5: T2 deep costs $0.35 and is forced for flashbulbs: the REFLECTING of a tick whose P&L is 6 %
    of value (a trigger, §6) takes 0.35 from the budget and records tier 2."""
    m = minds.mind(n=1)
    before = float(m.pop.budget[0])
    rf = m.reflect(IX, minds.observation(m), minds.sensed(m, IX, pad=(-0.3, 0.5, 0.0), tick_pnl=-600.0),
                   minds.decided(m, IX), minds.acted(IX), TickOutput())
    assert rf.flashbulb.tolist() == [True] and rf.tier.tolist() == [2]
    assert before - float(m.pop.budget[0]) == pytest.approx(0.35, abs=1e-12)


def test_the_arousal_trigger_fires_on_the_second_tick_above_0_7():
    """§6: A > 0.7 for >= 2 consecutive ticks. A Golem at A ~1 ticks every second: no flashbulb on
    its first tick of high arousal, one on the second (trigger "arousal"), none on the third (one
    surge, one flashbulb)."""
    m = _awake([[0.0, 1.0, 0.0]], [[0.1, 0.1, 0.1]], dt_s=1.0)
    fired = []
    for k in range(3):
        out = m.tick(IX, minds.observation(m, now_ms=DAY + 1000 * k))
        assert out.heartbeats["a"][0] > 0.99
        fired.append(bool(out.heartbeats["flashbulb"][0]))
        if fired[-1]:
            assert minds.events(out, "flashbulb")[0]["payload"]["triggers"] == ["arousal"]
    assert fired == [False, True, False]


# ----------------------------------------------------------------------------- §9 warnings
@pytest.mark.parametrize("arousal, pushed", [(0.78, False), (0.7, True)])
def test_a_warning_is_pushed_from_confidence_0_7_not_below(arousal, pushed):
    """§9: warnings with confidence >= 0.7 go to the Clade. A high-severity event's warning has
    confidence 0.9 x factor(A) (§3.4): at A 0.78 that is 0.9 exp(-0.48^2 / 0.72) = 0.6535 (kept
    home), at A 0.7 0.9 exp(-0.4^2 / 0.72) = 0.7206 (pushed)."""
    m = minds.mind(n=1)
    obs = minds.observation(m, events=[("exploit", 3, "exploit drained-pool")])
    out = TickOutput()
    m.reflect(IX, obs, minds.sensed(m, IX, pad=(-0.5, arousal, 0.0), sev=3), minds.decided(m, IX), minds.acted(IX),
              out)
    rows = minds.written(out)
    warn = rows["category"] == CAT["warning"]
    conf = {0.78: 0.6535, 0.7: 0.7206}[arousal]
    assert warn.sum() == 1 and rows["confidence"][warn][0] == pytest.approx(conf, abs=1e-4)
    assert rows["confidence"][warn][0] == pytest.approx(0.9 * _factor(arousal), abs=1e-6)
    assert [p["alert_type"] for p in out.pushes if p["alert_type"] == "warning"] == (["warning"] if pushed else [])


# ----------------------------------------------------------------------------- a run, recomputed
def test_a_runs_mood_intensity_and_flashbulb_windows_follow_from_its_other_columns(flash_run):
    """On the flash_crash run, every recorded figure that derives from others is recomputed: the
    intensity is ||(p, a, d)|| / sqrt 3 (§2.3); each awake tick's mood is baseline + ρ(12 h) (mood
    before - baseline) + (1 - ρ) emotion over the Δt since the Golem's last awake tick (§2.1; P
    excepted where a backcheck corrected it after the update, §5); each flashbulb check's in_window
    counts the Golem's flashbulbs of the 24 h before it (§6)."""
    h = table(flash_run.run_dir, "heartbeats").sort("golem_id", "time_ms")
    e = _columns(h, "p", "a", "d")
    np.testing.assert_allclose(h["intensity"].to_numpy(), np.sqrt((e * e).sum(axis=1)) / math.sqrt(3.0),
                               rtol=0, atol=1e-12)
    awake = h.filter(pl.col("state_path") == AWAKE)
    back = {(t, g) for t, g in events(flash_run.run_dir, "backcheck").select("time_ms", "golem_id").iter_rows()}
    base = flash_run.world.pop.baseline
    checked = 0
    for (g,), rows in awake.group_by(["golem_id"], maintain_order=True):
        t = rows["time_ms"].to_numpy()
        em, mood = _columns(rows, "p", "a", "d"), _columns(rows, "mood_p", "mood_a", "mood_d")
        rho = 2.0 ** (-(np.diff(t) / 1000.0) / 43_200.0)
        want = base[g] + rho[:, None] * (mood[:-1] - base[g]) + (1.0 - rho[:, None]) * em[1:]
        ok_p = np.array([(int(x), g) not in back for x in t[1:]])
        np.testing.assert_allclose(mood[1:, 1:], want[:, 1:], rtol=0, atol=1e-9)
        np.testing.assert_allclose(mood[1:, 0][ok_p], want[:, 0][ok_p], rtol=0, atol=1e-9)
        checked += t.size - 1
    assert checked > 5000 and len(back) < checked / 10
    fb = events(flash_run.run_dir).filter(pl.col("kind").is_in(["flashbulb", "flashbulb_suppressed"]))
    fired = fb.filter(pl.col("kind") == "flashbulb")
    windows = []
    for t, g, payload in fb.select("time_ms", "golem_id", "payload").iter_rows():
        mine = fired.filter((pl.col("golem_id") == g) & (pl.col("time_ms") > t - DAY) & (pl.col("time_ms") < t))
        windows.append(json.loads(payload)["in_window"])
        assert windows[-1] == mine.height, (t, g)
    assert max(windows) >= 3 and fb.height > fired.height      # the budget was reached and suppressed some
