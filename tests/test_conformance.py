"""Spec rules one at a time, each on a hand-built Mind or Grimoire whose numbers are
worked out here from SPEC.md: reflection and its counterfactual (§5), the curator's de-biasing
(§7.2), first sightings (§3.3), reflex proposals (§4.5), imports (§3.2, §3.4), arousal bias and
reactivation (§2.4, §2.6), escalation events and empty observations (§13, §3.3), edges of
salience and status (§3.2-3.3), the death reflection (§10)."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minds
from golem import curator as curatorm
from golem import grimoire as gm
from golem import heartbeat as hb
from golem import reflex
from golem import retrieval as rt
from golem.context import topic_code
from golem.heartbeat import CAT, K_DOMINANCE, K_EVENT, K_PRICE, K_REGRET, K_TRADE, TickOutput
from golem.memory_writer import Candidates, score_and_gate, write

DAY = 86_400_000
IX = np.array([0])


def _factor(a):
    """arousal_encoding_factor by hand: exp(-(A - 0.3)^2 / (2 * 0.6^2))."""
    return math.exp(-((a - 0.3) ** 2) / 0.72)


# ----------------------------------------------------------------------------- §5 reflection
def test_counterfactual_is_the_opposite_action_by_hand():
    """The mirrored exposure on the same return: a Golem 80 % in through a 2 % fall would have
    earned (0.2 - 0.8) * -0.02 = 1.2 % more out; a flat one in a 1 % rally 1 % more in; a half-in
    one nothing (its opposite is itself). Outcome = tanh(|alt - held| * r / 1 %)."""
    alt, gain, cf = hb.counterfactual(np.array([0.8, 0.0, 0.5]), np.array([-0.02, 0.01, 0.03]), 1.0, 0.01)
    assert alt.tolist() == pytest.approx([0.2, 1.0, 0.5])
    assert gain.tolist() == pytest.approx([0.012, 0.01, 0.0])
    assert cf.tolist() == pytest.approx([math.tanh(-1.2), math.tanh(1.0), 0.0])
    # 80 % in at the end of a 2 % fall was 0.8 / (1 - 0.02 * 0.2) in at its start
    assert hb.held_exposure(np.array([0.8, 0.0, 1.0]), np.array([-0.02, 0.05, 0.05])).tolist() == \
        pytest.approx([0.8 / 0.996, 0.0, 1.0])


def _reflect(m, s, dd=None, ac=None, obs=None, ix=IX):
    out = TickOutput()
    rf = m.reflect(ix, obs or minds.observation(m), s, dd or minds.decided(m, ix), ac or minds.acted(ix), out)
    return out, rf


def _rows(m, kind):
    """Slots of the Grimoire holding entries of one writer kind."""
    c = m.gr.cols
    return np.flatnonzero((c["id"] >= 0) & (c["kind"] == kind))


def test_regret_insight_holds_the_opposite_actions_outcome_and_the_unbiased_one():
    """Golem 0 was fully in through a 2 % fall: the opposite (out) would have earned 2 % more, so
    an insight with outcome tanh(-2). Golem 1 was out through a 1 % rally: the opposite (in) would
    have earned 1 % more, outcome tanh(+1) (written whether or not a prediction was at stake).
    Golem 2 was 80 % in through a 1 % fall: the opposite (20 % in) stood 0.6 away, outcome
    tanh(-0.6), not the move's tanh(-1). All calm: outcome and raw_outcome agree and nothing is
    tagged arousal_bias."""
    m = minds.mind(n=3)
    ix = np.array([0, 1, 2])
    s = minds.sensed(m, ix, pad=(-0.5, 0.2, 0.0), ret=np.array([-0.02, 0.01, -0.01]),
                     tick_pnl=np.array([-200.0, 0.0, -80.0]))
    x2 = 0.8 * 0.99 / 0.992                     # exposure at the end of the fall of one 80 % in at its start
    _reflect(m, s, minds.decided(m, ix), minds.acted(ix, exposure_before=np.array([1.0, 0.0, x2])), ix=ix)
    c = m.gr.cols
    r = _rows(m, K_REGRET)
    assert (r // m.gr.capacity).tolist() == [0, 1, 2]
    got = {int(sl // m.gr.capacity): (float(c["outcome"][sl]), float(c["raw_outcome"][sl])) for sl in r}
    assert got[0] == pytest.approx((math.tanh(-2.0), math.tanh(-2.0)), abs=1e-6)
    assert got[1] == pytest.approx((math.tanh(1.0), math.tanh(1.0)), abs=1e-6)
    assert got[2] == pytest.approx((math.tanh(-0.6), math.tanh(-0.6)), abs=1e-6)
    assert not c["arousal_bias"][r].any() and (c["category"][r] == CAT["insight"]).all()
    # the opposite action earned less (fully in through a rally): no regret
    m2 = minds.mind(n=1)
    _reflect(m2, minds.sensed(m2, IX, pad=(-0.5, 0.2, 0.0), ret=0.02, tick_pnl=200.0), ac=minds.acted(IX, 1.0))
    assert _rows(m2, K_REGRET).size == 0


def test_an_aroused_counterfactual_is_biased_toward_the_mood_and_keeps_the_unbiased_one():
    """Load A 0.8 > 0.5, P -0.6: the insight's outcome is tanh(-0.5) + 0.3 * -0.6 (fully in
    through a 0.5 % fall), the unbiased tanh(-0.5) is kept beside it, and only insights carry
    arousal_bias (SPEC §2.4), not the episode, event or trade written on the same tick."""
    m = minds.mind(n=1)
    s = minds.sensed(m, IX, pad=(-0.6, 0.8, 0.1), mood=(-0.6, 0.8, 0.1), ret=-0.005, tick_pnl=-50.0)
    obs = minds.observation(m, events=[("flash_crash", 2, "flash-crash cascade")])
    _reflect(m, s, ac=minds.acted(IX, exposure_before=1.0, dexp=-0.5, traded=True), obs=obs)
    c = m.gr.cols
    r = _rows(m, K_REGRET)
    assert r.size == 1
    assert float(c["raw_outcome"][r[0]]) == pytest.approx(math.tanh(-0.5), abs=1e-6)
    assert float(c["outcome"][r[0]]) == pytest.approx(math.tanh(-0.5) - 0.18, abs=1e-6)
    assert c["arousal_bias"][r[0]]
    for kind in (K_PRICE, K_EVENT, K_TRADE):
        rows = _rows(m, kind)
        assert rows.size == 1 and not c["arousal_bias"][rows].any(), kind


def test_an_insight_written_in_a_crisis_emotion_is_tagged_even_when_the_mood_is_calm():
    """SPEC §2.4 with §2.1: the arousal band is the emotion's. Emotion A 0.8 > 0.5 tags the regret
    insight arousal_bias although the mood (A 0.1) is calm; only the mood bends the counterfactual,
    so its outcome stays the unbiased tanh(-0.5) (fully in through a 0.5 % fall); the episode of
    the move written on the same tick is not tagged."""
    m = minds.mind(n=1)
    s = minds.sensed(m, IX, pad=(-0.6, 0.8, 0.1), mood=(-0.6, 0.1, 0.1), ret=-0.005, tick_pnl=-50.0)
    _reflect(m, s, ac=minds.acted(IX, 1.0))
    c = m.gr.cols
    r = _rows(m, K_REGRET)
    assert r.size == 1 and c["arousal_bias"][r[0]]
    assert float(c["outcome"][r[0]]) == pytest.approx(math.tanh(-0.5), abs=1e-6)
    assert float(c["raw_outcome"][r[0]]) == pytest.approx(math.tanh(-0.5), abs=1e-6)
    price = _rows(m, K_PRICE)
    assert price.size == 1 and not c["arousal_bias"][price].any()


def test_calm_reevaluation_contradicts_the_biased_insight_and_restores_the_unbiased_outcome():
    """SPEC §7.2 on the insight above: when the Golem is calm the curator re-runs the
    counterfactual (the kept unbiased outcome); the bias moved it by 0.18 > 0.1, so it is
    contradicted: confidence 0.4 * factor(0.8) - 0.20, outcome back to tanh(-0.5)."""
    m = minds.mind(n=1)
    _reflect(m, minds.sensed(m, IX, pad=(-0.6, 0.8, 0.1), mood=(-0.6, 0.8, 0.1), ret=-0.005, tick_pnl=-50.0),
             ac=minds.acted(IX, 1.0))
    r = _rows(m, K_REGRET)[0]
    assert float(m.gr.cols["confidence"][r]) == pytest.approx(0.4 * _factor(0.8), abs=1e-6)
    m.pop.pad[:] = 0.0                                              # calm: A < 0.3
    f = curatorm.curate(m, 0, 2 * DAY)
    assert (f["reevaluated"], f["reevaluation_contradicted"]) == (1, 1)
    assert float(m.gr.cols["confidence"][r]) == pytest.approx(0.4 * _factor(0.8) - 0.2, abs=1e-6)
    assert float(m.gr.cols["outcome"][r]) == pytest.approx(math.tanh(-0.5), abs=1e-6)
    # a mild mood bends it by 0.3 * -0.2 = 0.06 <= 0.1: validated, + 0.10
    m2 = minds.mind(n=1)
    _reflect(m2, minds.sensed(m2, IX, pad=(-0.2, 0.8, 0.1), mood=(-0.2, 0.8, 0.1), ret=-0.005, tick_pnl=-50.0),
             ac=minds.acted(IX, 1.0))
    r2 = _rows(m2, K_REGRET)[0]
    m2.pop.pad[:] = 0.0
    f2 = curatorm.curate(m2, 0, 2 * DAY)
    assert (f2["reevaluated"], f2["reevaluation_contradicted"]) == (1, 0)
    assert float(m2.gr.cols["confidence"][r2]) == pytest.approx(0.4 * _factor(0.8) + 0.1, abs=1e-6)


@pytest.mark.parametrize("d, written", [(-0.31, True), (-0.29, False)])
def test_dominance_insight_below_minus_0_3_is_internal_and_speculative(d, written):
    """SPEC §5: D < -0.3 -> a "what could I have done" insight, internal attribution; a guess
    with no evidence, so its confidence is the speculative source's 0.2 (SPEC §3.4) x factor(A)."""
    m = minds.mind(n=1)
    _reflect(m, minds.sensed(m, IX, pad=(-0.5, 0.4, d), mood=(-0.5, 0.4, d)))
    r = _rows(m, K_DOMINANCE)
    assert r.size == int(written)
    if written:
        c = m.gr.cols
        assert c["attribution"][r[0]] == gm.ATTRIBUTIONS.index("internal")
        assert float(c["confidence"][r[0]]) == pytest.approx(0.2 * _factor(0.4), abs=1e-6)
        assert c["category"][r[0]] == CAT["insight"]


@pytest.mark.parametrize("p, fires", [(-0.71, True), (-0.69, False)])
def test_backcheck_below_minus_0_7_corrects_the_self_evaluation(p, fires):
    """SPEC §5 with §2.1: the mood's P < -0.7 -> the self-evaluation (the mood's P) is corrected
    halfway up to the ground truth (the outcome part of the stimulus, 0 here): -0.71 becomes -0.355;
    the emotion is left alone."""
    m = minds.mind(n=1)
    m.pop.mood[0] = (p, 0.2, 0.0)
    m.pop.pad[0] = (0.1, 0.2, 0.0)
    out, _ = _reflect(m, minds.sensed(m, IX, pad=(0.1, 0.2, 0.0), mood=(p, 0.2, 0.0)))
    ev = minds.events(out, "backcheck")
    assert len(ev) == int(fires)
    assert m.pop.pad[0, 0] == 0.1
    if fires:
        assert ev[0]["value"] == pytest.approx(p / 2) and m.pop.mood[0, 0] == pytest.approx(p / 2)
    else:
        assert m.pop.mood[0, 0] == p


# ----------------------------------------------------------------------------- §3.3 first sightings
def test_first_sighting_is_per_protocol_or_counterparty_not_per_event_kind():
    """A calm Golem (no affect, no P&L: salience 0) writes an event entry only when the floor of
    0.70 lifts it: on its first sighting of a protocol or counterparty. flash_crash then
    liquidation on the same protocol: one sighting; a named counterparty: its own sighting, once; a
    market-wide event names no one."""
    m = minds.mind(n=1)
    ticks = [  # (kind, tokens, asset), written?
        (("flash_crash", "flash-crash cascade", 0), True),     # protocol:uniswap, new
        (("liquidation", "liquidation cascade", 0), False),    # same protocol, another kind
        (("exploit", "exploit counterparty:0xdead", 0), True),  # counterparty 0xdead, new
        (("rug_pull", "rug-pull counterparty:0xdead", 0), False),
        (("rug_pull", "rug-pull counterparty:0xbeef", 0), True),
        (("gas_spike", "gas-spike", -1), False),               # market-wide: nobody's first sighting
    ]
    for t, ((kind, tokens, asset), want) in enumerate(ticks):
        obs = minds.observation(m, now_ms=(t + 1) * DAY, events=[(kind, 2, tokens)], event_assets=[asset])
        out, rf = _reflect(m, minds.sensed(m, IX), obs=obs)
        rows = minds.written(out)
        ev = rows["kind"] == K_EVENT
        assert bool(ev.any()) == want, kind
        if want:
            assert rows["salience"][ev][0] == pytest.approx(0.7)
    assert set(m.entities) == {"protocol:uniswap", "counterparty:0xdead", "counterparty:0xbeef"}


def test_event_entities_by_hand():
    assert hb.event_entities("exploit counterparty:0xdead counterparty:bob", 1, ("uniswap", "aave")) == \
        ["protocol:aave", "counterparty:0xdead", "counterparty:bob"]
    assert hb.event_entities("gas-spike", -1, ("uniswap",)) == []


# ----------------------------------------------------------------------------- §4.5 reflex proposals
def _acted_entry(times_days, ring=3):
    """One entry with event phrases, acted on at the given days (through the decision's path)."""
    gr = gm.Grimoire(1, 4, 4, act_ring=ring)
    gr.insert(np.array([0]), np.ones((1, 4)), dict(created_ms=0, last_access_ms=0, window_ms=np.inf))
    gr.phrases[0] = "anonymous-deployer"
    for t in times_days:
        _act(gr, int(t * DAY))
    return gr


def _act(gr, now_ms: int) -> None:
    """A decision that serves slot 0 at now_ms (its recall counts the act and keeps its time)."""
    rt.recall(gr, np.array([[0]]), np.array([[0]]), now_ms)


@pytest.mark.parametrize("acts, proposed", [
    ([12, 20, 40], True),            # three within the 30 days before day 41
    ([0, 10, 40], False),            # three in a life, two within 30 days
    ([0, 1, 2, 3, 40], False),       # five in a life, the last recent: still one in the window
    ([1, 2, 11.5, 40, 41], True),    # the last three: 11.5, 40, 41
    ([20, 40], False),               # two
])
def test_reflex_proposal_needs_three_acts_within_30_days(acts, proposed):
    gr = _acted_entry(acts)
    slots, _ = reflex.proposals(gr, np.array([0]), 41 * DAY, 3, 30.0)
    assert (slots.size == 1) == proposed


@pytest.mark.parametrize("acts, proposed", [
    ([12, 70, 75], False),           # day 12 is 68 days before day 80 (in 32 bits of ms: 18 days)
    ([55.5, 70, 75], True),          # day 55.5 is past 2^32 ms (49.7 days): its high bits count
])
def test_act_times_past_2_to_the_32_ms_are_exact(acts, proposed):
    """Act times are kept as 48 bits of ms (6 bytes): a time past 2^32 ms reads back exactly, and
    an act 2^32 ms older than another is not taken for a recent one."""
    gr = _acted_entry(acts)
    assert sorted(gr.acted_at(np.zeros(3, dtype=np.int64), np.arange(3)).tolist()) == [int(t * DAY) for t in acts]
    slots, _ = reflex.proposals(gr, np.array([0]), 80 * DAY, 3, 30.0)
    assert (slots.size == 1) == proposed


def test_reflex_promotion_minimum_is_the_configs():
    gr = _acted_entry([35, 40], ring=2)
    assert reflex.proposals(gr, np.array([0]), 41 * DAY, 2, 30.0)[0].size == 1
    assert reflex.proposals(gr, np.array([0]), 41 * DAY, 2, 5.0)[0].size == 0      # 35 is 6 days back
    m = minds.mind(n=1, cfg=minds.config(**{"reflex.promotion_min": 5}))
    assert m.gr.act_ring == m.gr.acted_lo.shape[1] == m.gr.acted_hi.shape[1] == 5   # the Mind keeps as many act times


@pytest.mark.parametrize("acts, proposed", [
    ([12, 20, 40], True),            # the third most recent act is 29 days before day 41
    ([10, 20, 40], False),           # 31 days: outside the 30
    ([31, 40], False),               # two acts within the 30 days: fewer than 3
])
def test_the_curators_reflex_proposals_use_three_acts_in_30_days_by_default(acts, proposed):
    """SPEC §4.5 with the shipped defaults (not numbers handed to `reflex.proposals`): a curator
    pass on day 41 proposes an entry with event phrases acted on >= 3 times within the last 30 days."""
    m = minds.mind(n=1)
    m.gr.insert(np.array([0]), np.ones((1, m.gr.dim)), dict(created_ms=0, last_access_ms=40 * DAY, window_ms=np.inf,
                                                            decay_class=gm.STRUCTURAL))
    eid = int(m.gr.cols["id"][0])
    m.gr.phrases[eid] = "anonymous-deployer"
    for t in acts:
        _act(m.gr, int(t * DAY))
    assert curatorm.curate(m, 0, 41 * DAY)["reflex_proposals"] == ([eid] if proposed else [])


# ----------------------------------------------------------------------------- §3.2-3.4 imports
def _world(tmp_path, sets=(), text=None, name="w"):
    from sim.market import generate
    from sim.run import prepare
    from sim.world import World
    path = tmp_path / f"{name}.yaml"
    path.write_text(text or "name: w\nduration: 1h\nseed: 1\ngolems:\n  - {count: 2, prefill: 50}\n")
    scenario, cfg, _, seed = prepare(path, sets=list(sets))
    return World(scenario, cfg, generate(scenario.market, scenario.duration_s, seed), seed)


@pytest.mark.parametrize("regimes, patterns", [(1, 12), (4, 48), (20, 192)])
def test_somatic_markers_are_kept_for_the_markets_regimes(tmp_path, regimes, patterns):
    """SPEC §5: a marker per (regime, move sign, probe severity) pattern: 12 a regime, for the
    market's regimes and at most 16 (later regimes share the 16th's), and the memory estimate
    counts the same 64 bytes a pattern."""
    from sim import resources
    names = [f"r{i}" for i in range(regimes)]
    reg = "".join(f"    {n}: {{vol: 0.01, next: {{{names[(i + 1) % regimes]}: 1.0}}}}\n" for i, n in enumerate(names))
    text = f"name: w\nduration: 1h\nseed: 1\nmarket:\n  initial_regime: r0\n  regimes:\n{reg}golems:\n  - {{count: 3}}\n"
    w = _world(tmp_path, text=text)
    for k in ("som_sum", "som_cnt", "som_arousal", "som_target", "som_emotion"):
        assert getattr(w.pop, k).shape[:2] == (3, patterns), k
    per_golem = resources.estimate(w.scenario, w.cfg, record=False)["golems"] / 3
    assert per_golem == resources.PER_GOLEM + 64 * patterns


def test_imports_have_tier_ttl_0_and_their_sources_confidence(tmp_path):
    """SPEC §3.2: an import bypassed gating, so its window is class days x (1 + s) (regime-
    conditional: 14 d); SPEC §3.4: its confidence is its source's, 0.8 for verified records by
    default (untagged: no arousal factor), 0.2 when the config calls them speculative."""
    w = _world(tmp_path)
    c = w.gr.cols
    used = c["id"] >= 0
    assert used.sum() == 100 and (c["kind"][used] == hb.K_IMPORT).all()
    assert (c["ttl_days"][used] == 0).all() and (c["decay_class"][used] == gm.REGIME).all()
    s = c["salience"][used].astype(np.float64)
    assert np.allclose(c["window_ms"][used] / DAY, 14.0 * (1 + s), rtol=1e-6)
    assert np.allclose(c["confidence"][used], 0.8)
    w2 = _world(tmp_path, sets=["grimoire.import_source=speculative"], name="w2")
    assert np.allclose(w2.gr.cols["confidence"][w2.gr.cols["id"] >= 0], 0.2)


def test_the_prefill_is_the_same_in_any_chunks(tmp_path, monkeypatch):
    """The prefill draws and inserts its imports chunk by chunk (the next chunk's normals drawn on
    another thread while one is inserted): in chunks of 7 entries, across Golems, the Grimoire
    holds exactly what one chunk gives (every column, the codes and the scan terms)."""
    import sim.world as world
    text = "name: w\nduration: 1h\nseed: 1\ngolems:\n  - {count: 3, prefill: 50}\n  - {count: 2, prefill: 22}\n"
    whole = _world(tmp_path, text=text).gr
    monkeypatch.setattr(world, "PREFILL_CHUNK", 7)
    pieces = _world(tmp_path, text=text, name="w2").gr
    assert int((whole.cols["id"] >= 0).sum()) == 194
    for name, col in whole.cols.items():
        assert np.array_equal(col, pieces.cols[name], equal_nan=col.dtype.kind == "f"), name
    for name in ("codes", "norm2", "recency", "charge"):
        assert np.array_equal(getattr(whole, name), getattr(pieces, name)), name


# ----------------------------------------------------------------------------- §2.6 reactivation
def _tagged(m, g, emb, topics, created=0):
    n = len(topics)
    m.gr.insert(np.full(n, g), np.asarray(emb, float), dict(
        created_ms=created, last_access_ms=created, window_ms=np.inf, decay_class=gm.STRUCTURAL, has_tag=True,
        p=np.float32(-0.5), a=np.float32(0.5), d=np.float32(-0.2), i0=np.float32(0.4), importance=np.float32(0.5),
        confidence=np.float32(0.8), topic=np.array([topic_code(t) for t in topics], np.int32)))


def _decide(m, s, obs):
    return m.decide(IX, obs, s, TickOutput())


def test_every_topic_can_reactivate_when_its_moment_comes():
    """SPEC §2.6: a served tagged entry whose context matches (cosine >= 0.8) and whose topic is
    one of the current context's is re-lived. Event, trade, flashbulb, dominance and death-
    reflection entries each have their moment, not only `<asset>/price-move`."""
    m = minds.mind(n=1, cfg=minds.config(**{"retrieval.top_k": 8}))
    obs = minds.observation(m, events=[("flash_crash", 2, "flash-crash cascade")])
    calm = minds.sensed(m, IX, pad=(-0.2, 0.2, -0.1), sev=2)
    q = _decide(m, calm, obs).query.astype(np.float64)
    topics = ["ETH/price-move", "ETH/trade", "ETH/flash_crash", "ETH/flashbulb", "ETH/dominance-correction",
              "ETH/death-reflection", "BTC/trade", "ETH/gas_spike"]
    _tagged(m, 0, np.repeat(q, len(topics), axis=0), topics)
    c = m.gr.cols
    _decide(m, calm, obs)
    assert c["reactivated"][:8].tolist() == [True, True, True, False, False, False, False, False]
    assert c["react_count"][:3].tolist() == [1, 1, 1] and (c["last_react_ms"][:3] == obs.now_ms).all()
    # a crisis moment (|P&L| > 5 %: a flashbulb trigger), low control, a Golem near its end
    m.pop.phase[0] = 3
    crisis = minds.sensed(m, IX, pad=(-0.2, 0.2, -0.4), mood=(-0.2, 0.2, -0.4), sev=2, tick_pnl=-600.0)
    _decide(m, crisis, obs)
    assert c["reactivated"][:8].tolist() == [True] * 6 + [False, False]
    assert c["react_count"][:6].tolist() == [2, 2, 2, 1, 1, 1]


def test_reactivation_needs_cosine_0_8():
    m = minds.mind(n=1)
    obs = minds.observation(m)
    s = minds.sensed(m, IX, pad=(-0.2, 0.2, -0.1))
    q = _decide(m, s, obs).query.astype(np.float64)[0]
    u = np.random.default_rng(4).standard_normal(q.size)
    u -= (u @ q) * q
    u /= np.linalg.norm(u)
    _tagged(m, 0, [0.81 * q + math.sqrt(1 - 0.81**2) * u, 0.79 * q + math.sqrt(1 - 0.79**2) * u],
            ["ETH/price-move", "ETH/price-move"])
    _decide(m, s, obs)
    assert m.gr.cols["reactivated"][:2].tolist() == [True, False]
    m2 = minds.mind(n=1, cfg=minds.config(**{"decay.reactivation_cosine": 0.7}))
    q2 = _decide(m2, s, obs).query.astype(np.float64)[0]
    _tagged(m2, 0, [0.79 * q2 + math.sqrt(1 - 0.79**2) * u], ["ETH/price-move"])
    _decide(m2, s, obs)
    assert m2.gr.cols["reactivated"][0]


def test_novelty_is_the_pools_best_semantic_match():
    """SPEC §5: escalate on novelty. The situation is not novel when some memory resembles it
    (cosine 0.6 >= 0.5), even if the top-scored entry (recent and important, cosine 0.3) does not."""
    m = minds.mind(n=1, cfg=minds.config(**{"retrieval.top_k": 1}))
    obs = minds.observation(m, now_ms=100 * DAY)
    s = minds.sensed(m, IX)
    q = _decide(m, s, obs).query.astype(np.float64)[0]
    u = np.random.default_rng(5).standard_normal(q.size)
    u -= (u @ q) * q
    u /= np.linalg.norm(u)
    m.gr.insert(np.array([0, 0]), np.stack([0.3 * q + math.sqrt(0.91) * u, 0.6 * q + 0.8 * u]), dict(
        created_ms=0, last_access_ms=np.array([100 * DAY, 100 * DAY - 1000 * 3_600_000]), window_ms=np.inf,
        decay_class=gm.STRUCTURAL, importance=np.array([1.0, 0.0], np.float32), confidence=np.float32(0.5)))
    dd = _decide(m, s, obs)
    assert dd.nserved[0] == 1 and m.gr.cols["access_count"][0] == 1   # the cosine-0.3 entry is served
    assert not dd.novelty[0] and dd.tier[0] == 0
    m.gr.cols["status"][1] = gm.ARCHIVED                                  # nothing eligible resembles it now
    dd = _decide(m, s, obs)
    assert dd.novelty[0] and dd.tier[0] == 1


# ----------------------------------------------------------------------------- §13, §3.3
def test_escalations_are_events_with_their_reasons():
    m = minds.mind(n=3)
    ix = np.arange(3)
    s = minds.sensed(m, ix, sev=np.array([2, 0, 0]), neg_marker=np.array([False, True, False]))
    dd = minds.decided(m, ix, tier=np.array([1, 1, 0]), novelty=np.array([False, False, False]))
    out, rf = _reflect(m, s, dd, minds.acted(ix), ix=ix)
    ev = minds.events(out, "escalation")
    assert [e["golem_id"] for e in ev] == [0, 1]
    assert [e["value"] for e in ev] == [0.001, 0.001]
    assert ev[0]["payload"] == dict(tier=1, probe=True, marker=False, novelty=False, flashbulb=False)
    assert ev[1]["payload"]["marker"] is True


def test_an_empty_observation_aborts_its_write_loudly():
    """SPEC §3.3: a candidate with nothing in it (here: the Golem has no previous context to file
    the tick's move under) is not written and is reported, never filled with an invented entry."""
    m = minds.mind(n=2)
    m.pop.ctx[1] = 0.0
    ix = np.arange(2)
    out, rf = _reflect(m, minds.sensed(m, ix, pad=(-0.6, 0.5, 0.0)), ix=ix)
    rows = minds.written(out)
    assert rows["golem"][rows["kind"] == K_PRICE].tolist() == [0]
    ev = minds.events(out, "write_aborted")
    assert [e["golem_id"] for e in ev] == [1]
    assert ev[0]["payload"] == {"kind": "price-move", "topic": "ETH/price-move", "reason": "empty embedding"}
    cand = Candidates()
    cand.add(np.zeros((1, 4)), ["ETH/price-move"], p=0.5, a=0.5, d=0.5, has_tag=True, emotion=0, label=0,
             value=1e4, pnl=0.0, signals=0, provenance=-1, tick=0, flashbulb=True, first_sighting=False,
             force_internal=False, arousal_bias=False, golem=0, scope=0, seq=0, kind=K_PRICE, role=0, category=0,
             decay_class=gm.TACTICAL, source_conf=0.9, importance=0.5, outcome=0.0, has_outcome=False, event_kind="")
    gr = gm.Grimoire(1, 4, 4)
    assert write(minds.config(), gr, cand, 0) is None and gr.count[0] == 0      # not even a flashbulb
    assert cand.aborted == [(0, K_PRICE, "ETH/price-move", "empty embedding")]


def test_candidate_columns_keep_each_values_type_and_sign():
    """A scalar given to `add` becomes a column of that value in its own dtype for the add's rows
    (0.0 and -0.0, 1 and True, 1 and 1.0 apart), and the adds' columns are concatenated in order
    (`column`, what `build` takes its rows from)."""
    cand = Candidates()
    for v in (0.0, -0.0, 1, True, 1.0, np.float32(1.0), "x", -0.0, 0.0):
        cand.add(np.ones((2, 4)), ["T/x", "T/x"], v=v, w=np.array([1.5, -2.5]))
    cols = {k: cand.column(k) for k in ("v", "w", "raw_outcome")}
    topics = np.concatenate(cand.topics)
    v = cols["v"]
    assert v.dtype == object                       # with the str, as np.concatenate gives
    got = v.tolist()
    assert [math.copysign(1.0, x) for x in got[:4]] == [1.0, 1.0, -1.0, -1.0]
    assert [type(x) for x in got[4:10]] == [int, int, bool, bool, float, float]
    assert got[12:14] == ["x", "x"]
    assert [math.copysign(1.0, x) for x in got[14:]] == [-1.0, -1.0, 1.0, 1.0]
    assert cols["w"].tolist() == [1.5, -2.5] * 9 and topics.size == 18
    assert cols["raw_outcome"].dtype == np.float64 and np.isnan(cols["raw_outcome"]).all()
    floats = Candidates()
    for v in (0.0, -0.0, np.float32(2.0)):
        floats.add(np.ones((1, 4)), ["T/x"], v=v)
    out = floats.column("v")
    assert out.dtype == np.float64 and np.signbit(out).tolist() == [False, True, False]
    assert out.flags.writeable


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 5), st.sampled_from(["shared", "rows"]),
                          st.sampled_from([0, -0.0, 2.5, True, np.float32(1.5), np.int8(3), "x"])),
                min_size=1, max_size=6),
       st.integers(0, 2**31))
def test_built_rows_are_the_full_columns_taken(adds, seed):
    """`build(take)` gives what the full columns (`column`) indexed by `take` give: the same values,
    dtypes and signs, for columns whose adds share one value (0-d) or give rows, and the embeddings
    and topics of each taken row's own add."""
    rng = np.random.default_rng(seed)
    cand = Candidates()
    for i, (n, how, v) in enumerate(adds):
        col = np.full(n, v, dtype=np.asarray(v).dtype) if how == "rows" else v
        cand.add(rng.standard_normal((n, 4)), [f"T/{i}"] * n, v=col, w=rng.integers(-3, 3, n), k=i)
    full_emb, full_topics = np.concatenate(cand.emb), np.concatenate(cand.topics)
    full = {k: cand.column(k) for k in cand.cols}
    take = rng.permutation(full_emb.shape[0])[:int(rng.integers(0, full_emb.shape[0] + 1))]
    emb, cols, topics = cand.build(take)
    assert emb.tobytes() == full_emb[take].tobytes() and topics.tolist() == full_topics[take].tolist()
    for k, v in full.items():
        assert cols[k].dtype == v.dtype, k
        want = v[take]
        if v.dtype == object:
            assert [(type(x), repr(x)) for x in cols[k].tolist()] == [(type(x), repr(x)) for x in want.tolist()], k
        else:
            assert cols[k].tobytes() == want.tobytes(), k


def test_the_world_logs_an_aborted_write_as_an_error(tmp_path):
    from structlog.testing import capture_logs
    w = _world(tmp_path)
    out = TickOutput(events=[dict(time_ms=5, golem_id=1, clade_id=0, kind="write_aborted", tick=3, entry_id=-1,
                                  other_golem=-1, value=float("nan"),
                                  payload={"kind": "event", "topic": "ETH/exploit", "reason": "no topic"})])
    with capture_logs() as logs:
        w.emit(out)
    assert logs == [dict(event="write_aborted", log_level="error", golem=1, time_ms=5, kind="event",
                         topic="ETH/exploit", reason="no topic")]


# ----------------------------------------------------------------------------- §3.2-3.3 edges
@settings(max_examples=300, deadline=None)
@given(st.floats(0, 1), st.floats(-5000, 5000) | st.sampled_from([0.0, -0.0, 1e-300]),
       st.floats(-1e4, 1e6) | st.sampled_from([0.0, -0.0, -1.0, 1e-300]), st.floats(-1, 1))
def test_salience_of_the_writer_is_the_scalar_for_any_value(inten, pnl, value, p):
    """A Golem with nothing left (value <= 0) scores the same in the writer as in
    grimoire.salience: any P&L is everything (m = 1), none is nothing (m = 0)."""
    c = dict(p=np.array([p]), a=np.zeros(1), d=np.zeros(1), has_tag=np.ones(1, bool), value=np.array([value]),
             pnl=np.array([pnl]), role=np.zeros(1, np.int64), signals=np.zeros(1, np.int64),
             first_sighting=np.zeros(1, bool), flashbulb=np.zeros(1, bool), decay_class=np.full(1, gm.TACTICAL))
    # the writer derives intensity from the tag: give it a tag of that intensity along D
    d = math.sqrt(max(inten**2 * 3 - p * p, 0.0))
    c["d"][0] = d
    want = gm.salience(math.sqrt(p * p + d * d) / math.sqrt(3), pnl, value, p)
    assert score_and_gate(minds.config(), c)["salience"][0] == pytest.approx(want, abs=1e-12)
    if value <= 0:
        assert gm.pnl_magnitude(pnl, value) == (1.0 if pnl != 0 else 0.0)


@settings(max_examples=300, deadline=None)
@given(st.floats(0, 1), st.floats(0, 3))
def test_fill_never_passes_one_whatever_the_term(base, term):
    assert base <= gm.fill(base, term) <= 1.0


def test_at_exactly_twice_its_window_an_entry_is_expired_in_status_and_retrieval():
    w_days = 2.5
    gr = gm.Grimoire(1, 4, 4)
    gr.insert(np.array([0]), np.ones((1, 4)), dict(created_ms=0, last_access_ms=0, window_ms=w_days * DAY,
                                                   decay_class=gm.TACTICAL))
    prm = rt.RetrievalParams.from_config(minds.config())
    q = np.full((1, 4), 0.5, np.float32)
    edge = int(2 * w_days * DAY)
    assert gm.status_at(edge, 0, w_days) == gm.EXPIRED
    assert rt.retrieve(gr, np.array([0]), q, np.zeros((1, 3)), edge, prm).slots[0, 0] == -1
    assert gm.status_at(edge - 1, 0, w_days) == gm.STALE                 # stale entries stay retrievable
    assert rt.retrieve(gr, np.array([0]), q, np.zeros((1, 3)), edge - 1, prm).slots[0, 0] == 0
    assert gm.status_at(int(w_days * DAY), 0, w_days) == gm.STALE
    assert gm.status_at(int(w_days * DAY) - 1, 0, w_days) == gm.ACTIVE


@pytest.mark.parametrize("profile", ["six_factor", "somatic_hdc"])
def test_at_exactly_twice_its_window_the_other_retrieval_profiles_drop_the_entry(profile):
    """SPEC §3.2 in the alternative profiles (§4.1 six-factor, §11 somatic HDC): an entry last
    accessed 5 days ago with a 2.5-day window is expired (not eligible); 1 ms younger it is stale
    and still served."""
    w_days = 2.5
    gr = gm.Grimoire(1, 4, 4, fingerprints=True)
    gr.insert(np.array([0]), np.ones((1, 4)), dict(created_ms=0, last_access_ms=0, window_ms=w_days * DAY,
                                                   decay_class=gm.TACTICAL))
    cfg = minds.config()
    prm = rt.RetrievalParams.from_config(cfg)
    q = np.full((1, 4), 0.5, np.float32)
    edge = int(2 * w_days * DAY)

    def served(now):
        if profile == "six_factor":
            res = rt.retrieve_six(gr, np.array([0]), q, np.zeros((1, 3)), now, prm, rt.six_factor_weights(cfg),
                                  np.array([0]), 0, [set()])
        else:
            res = rt.retrieve_somatic_hdc(gr, np.array([0]), q, np.zeros((1, 3)), now, prm, gr.fp[:1])
        return int(res.slots[0, 0])
    assert served(edge) == -1
    assert served(edge - 1) == 0


# ----------------------------------------------------------------------------- §10 the death reflection
def _dying_mind(heavy_weight=2.0):
    """Golem 1 of two, about to die of its budget, with a hand-made life: which memory it trusted,
    which paid by luck, which it got wrong, two look-alikes that went opposite ways, a flashbulb,
    an unchecked aroused insight, a sibling's copy (not its own), 11 flashbulbs in its life."""
    from golem.pad import EMOTION_CODES
    m = minds.mind(n=2, cap=16, dim=16, cfg=minds.config(**{"mortality.heavy_weight": heavy_weight}),
                   regimes=("calm", "crash"))
    rng = np.random.default_rng(8)
    v = rng.standard_normal((8, 16))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    u = v[4] - (v[4] @ v[3]) * v[3]
    v[4] = 0.9 * v[3] + math.sqrt(1 - 0.81) * u / np.linalg.norm(u)         # cosine 0.9 with v[3]
    topics = ["ETH/price-move", "ETH/trade", "ETH/exploit", "ETH/liquidation", "ETH/gas_spike", "ETH/flashbulb",
              "ETH/depeg", "ETH/regret"]
    for t in topics:
        m.topics[topic_code(t)] = t
    m.gr.insert(np.ones(8, np.int64), v, dict(
        created_ms=0, last_access_ms=0, window_ms=np.inf, decay_class=gm.STRUCTURAL, has_tag=True,
        topic=np.array([topic_code(t) for t in topics], np.int32),
        outcome=np.array([0.5, 0.3, -0.6, 0.4, -0.4, -0.8, 0.9, 0.0], np.float32), has_outcome=np.array([1, 1, 1, 1, 1, 1, 1, 0], bool),
        confidence=np.array([0.8, 0.4, 0.2, 0.7, 0.7, 0.9, 0.1, 0.6], np.float32),
        acted_on_count=np.array([6, 2, 4, 0, 0, 0, 9, 0], np.int32),
        access_count=np.array([10, 1, 5, 2, 2, 8, 50, 0], np.int32),
        flashbulb=np.array([0, 0, 0, 0, 0, 1, 0, 0], bool), arousal_bias=np.array([0, 0, 0, 0, 0, 0, 0, 1], bool),
        provenance=np.array([-1, -1, -1, -1, -1, -1, 0, -1], np.int32)))
    m.flashbulbs[1] = 11
    m.pop.som_sum[1, 0], m.pop.som_cnt[1, 0] = 0.3, 4      # calm patterns: regime 0 (12 patterns a regime)
    m.pop.som_sum[1, 12], m.pop.som_cnt[1, 12] = -0.6, 2   # crash: regime 1
    m.pop.som_emotion[1, 0, EMOTION_CODES.index("fear")] = 5
    m.pop.som_emotion[1, 0, EMOTION_CODES.index("joy")] = 2
    m.pop.pad[1] = (-0.6, 0.8, -0.4)
    m.pop.budget[1] = 50.0
    return m, v


def _die(m):
    out = TickOutput()
    m._die(np.array([1]), minds.observation(m), np.array([0.05]), out)
    return out


def test_death_reflection_comes_from_the_golems_own_history():
    m, v = _dying_mind()
    out = _die(m)
    death = minds.events(out, "death")[0]
    assert death["payload"]["cause"] == "budget"
    assert death["payload"]["reflection"] == {
        "what I did well": "trusted ETH/price-move (6 acts, confidence 0.80); P&L +0.00",
        "what worked by luck": "1 memories paid though their confidence stayed below 0.50, most of all ETH/trade",
        "what I got wrong": "held exposure into crash; died of budget; 2 memories I acted on fell below confidence "
                            "0.50, worst ETH/exploit (0.20)",
        "what confused me": "ETH/liquidation and ETH/gas_spike looked alike (cosine 0.90) and went opposite ways "
                            "(+0.40 vs -0.40)",
        "what I suspect but can't prove": "1 memories I kept recalling never earned confidence, most of all "
                                          "ETH/exploit (5 recalls); 1 insights formed in arousal were never re-checked calm",
        "what I would tell a sibling": "cut exposure when crash begins; calm was where it paid",
        "which memories misled me": "11 flashbulb memories took 29% of my recalls",     # 8 of 28 recalls; not capped at 8
        "how I felt at the end": "mostly fear; at the end P -0.44 A +0.40 D -0.20",
        "what the market taught me": "calm +0.30, crash -0.60",
    }
    assert death["payload"]["weights"]["what confused me"] == 2.0 and death["payload"]["weights"]["what I did well"] == 1.0
    # terminal equanimity (SPEC §10): A and D halfway to 0, P up by 0.5 * (1 - P) * 0.2
    assert m.pop.pad[1].tolist() == pytest.approx([-0.44, 0.4, -0.2])
    assert not m.pop.alive[1] and m.pop.alive[0]
    assert out.pushes == [dict(sender=1, entry_id=death["entry_id"], slot=int(m.gr.slot_of(death["entry_id"])),
                               alert_type="death_reflection")]


@pytest.mark.parametrize("heavy", [2.0, 1.0])
def test_the_heavy_categories_carry_their_weight_into_the_pushed_entry(heavy):
    """The entry's direction is its base tokens plus the memories each category is about, those
    of what I got wrong (v2), what confused me (v3, v4) and what I suspect (v2) `heavy` times."""
    m, v = _dying_mind(heavy)
    death = minds.events(_die(m), "death")[0]
    slot = m.gr.slot_of(death["entry_id"])
    base = m.lex.token("death-reflection") + m.lex.token("asset:ETH")
    e = m.gr.emb.astype(np.float64)[16:24]         # as stored (unit, float32, decoded from the codes)
    want = base + e[0] + e[1] + heavy * (e[2] + e[3] + e[4] + e[2]) + e[5]
    # stored as the codes of that direction (grimoire.quantise)
    assert m.gr.codes[slot].tolist() == gm.quantise(want, m.gr.codes.shape[1]).tolist()
    tag = m.gr.cols
    assert (tag["p"][slot], tag["a"][slot], tag["d"][slot]) == pytest.approx((-0.44, 0.4, -0.2), abs=1e-6)
    assert tag["category"][slot] == CAT["death_reflection"] and tag["decay_class"][slot] == gm.STRUCTURAL


# ----------------------------------------------------------------------------- rules no other test protected
def _entries(m, g, emb, **vals):
    n = len(emb)
    base = dict(created_ms=0, last_access_ms=0, window_ms=np.inf, decay_class=gm.STRUCTURAL, has_tag=True,
                importance=np.float32(0.5), confidence=np.float32(0.8), i0=np.float32(0.5))
    base.update(vals)
    return m.gr.insert(np.full(n, g), np.asarray(emb, float), base)


def test_contrarian_needs_confidence_0_6_and_the_opposite_valence_and_keeps_top_k():
    """SPEC §4.4: entries of the opposite valence sign with confidence >= 0.6; the top 3 (the
    config's contrarian.top_k: 5 here) form the overlooked section the next decision weighs."""
    from golem import contrarian
    m = minds.mind(n=1, cfg=minds.config(**{"contrarian.top_k": 5}))
    rng = np.random.default_rng(2)
    emb = rng.standard_normal((9, m.gr.dim))
    conf = np.array([0.59, 0.6, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.95], np.float32)
    p = np.array([-0.5, -0.5, -0.5, -0.5, -0.5, -0.5, -0.5, -0.5, 0.5], np.float32)   # the last: same sign as the mood
    _entries(m, 0, emb, confidence=conf, p=p, a=np.float32(0.1), d=np.float32(0.0))
    figs = contrarian.pass_(m, IX, m.pop.ctx[IX], np.array([[0.4, 0.1, 0.0]]), DAY)
    got = figs["ids"][0]
    assert len(got) == 5 and 0 not in got and 8 not in got
    assert figs["pool_n"][0] == 7 and m.pop.contrarian_pending.shape == (1, 5)
    dd = m.decide(IX, minds.observation(m), minds.sensed(m, IX), TickOutput())    # weighs all five
    assert (m.pop.contrarian_pending[0] == -1).all() and dd.mem.shape == (1,)


@pytest.mark.parametrize("pnl, fires", [(-501.0, True), (-499.0, False), (501.0, True), (500.0, False), (-500.0, False)])
def test_flashbulb_pnl_trigger_is_5_percent_of_value(pnl, fires):
    """SPEC §6: |tick P&L| > 5 % of portfolio value; exactly 5 % (500 of 10,000) does not fire."""
    from golem import flashbulb
    cfg = minds.config()
    trig = flashbulb.triggers(cfg, np.zeros(1), np.zeros(1, np.int64), np.array([pnl]), np.array([10_000.0]),
                              np.zeros(1, bool), np.zeros(1, np.int64))
    assert trig[0].tolist() == [False, fires, False, False]


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 40), st.integers(0, 2**31))
def test_any_trigger_is_any_of_the_row(n, seed):
    from golem import flashbulb
    trig = np.random.default_rng(seed).random((n, len(flashbulb.TRIGGERS))) < 0.2
    np.testing.assert_array_equal(flashbulb.any_trigger(trig), trig.any(axis=1))


@pytest.mark.parametrize("run_before, fires", [(-1, True), (0, False)])
def test_the_arousal_trigger_counts_this_ticks_arousal(run_before, fires):
    """SPEC §6: the arousal trigger fires on the tick a run of A > 0.7 reaches
    flashbulb.consecutive_ticks, once: SENSING adds this tick to the run before it reads the
    triggers that DECIDING and REFLECTING take from it. A run one tick short reaches it now; a run
    already there does not fire again."""
    m = minds.mind(n=1)
    k = m.cfg.flashbulb.consecutive_ticks
    m.pop.pad[0] = m.pop.mood[0] = (0.0, 1.0, 0.0)
    m.pop.high_a_run[0] = k + run_before
    s = m.sense(IX, minds.observation(m))
    assert s.pad[0, 1] > m.cfg.flashbulb.arousal and m.pop.high_a_run[0] == k + run_before + 1
    assert s.triggers[0].tolist() == [fires, False, False, False]


@pytest.mark.parametrize("strength, escalated", [(3, False), (4, True)])
def test_a_negative_somatic_marker_escalates_only_with_strength_above_3(strength, escalated):
    """SPEC §5 SENSING: valence < -0.5 and strength > 3 escalate an all-normal tick to T1."""
    obs = minds.observation(minds.mind(n=1))
    pattern = minds.mind(n=1).sense(IX, obs).pattern[0]           # this tick's pattern
    m = minds.mind(n=1)
    m.pop.som_sum[0, pattern], m.pop.som_cnt[0, pattern] = -0.6, strength
    s = m.sense(IX, obs)
    assert bool(s.neg_marker[0]) == escalated and s.tier[0] == int(escalated)
    m2 = minds.mind(n=1)
    m2.pop.som_sum[0, pattern], m2.pop.som_cnt[0, pattern] = -0.4, 10    # not negative enough
    assert not m2.sense(IX, obs).neg_marker[0]


def test_writer_promotes_one_class_never_above_regime_and_windows_hold_the_tier_ttl():
    """SPEC §3.3: s >= 0.7 promotes one class, never above regime-conditional; SPEC §3.2: the
    window is max(class days, tier TTL) x (1 + s): an ephemeral entry (1 d) at s 0.55 (TTL 14 d)
    keeps 14 x 1.55 = 21.7 days, one at s 0.8 becomes tactical with 30 x 1.8 = 54 days."""
    cfg = minds.config()
    n = 4
    intensity = np.array([0.55, 0.8, 0.8, 0.35])
    c = dict(p=np.zeros(n), a=np.zeros(n), d=intensity * math.sqrt(3), has_tag=np.ones(n, bool), value=np.full(n, 1e4),
             pnl=np.zeros(n), role=np.zeros(n, np.int64), signals=np.zeros(n, np.int64), first_sighting=np.zeros(n, bool),
             flashbulb=np.zeros(n, bool), decay_class=np.array([gm.EPHEMERAL, gm.EPHEMERAL, gm.REGIME, gm.TACTICAL]))
    sc = score_and_gate(cfg, c)
    assert sc["salience"].tolist() == pytest.approx(intensity.tolist())
    assert sc["decay_class"].tolist() == [gm.EPHEMERAL, gm.TACTICAL, gm.REGIME, gm.TACTICAL]
    assert sc["ttl_days"].tolist() == [14, 30, 30, 7]
    assert (sc["window_ms"] / DAY).tolist() == pytest.approx([14 * 1.55, 30 * 1.8, 30 * 1.8, 7 * 1.35])


def test_the_dead_receive_nothing_even_when_a_push_was_sent_before_they_died(tmp_path):
    """SPEC §9: a push in flight to a sibling that dies before it arrives is not delivered to it:
    no copy, no contagion."""
    w = _world(tmp_path, text="name: w\nduration: 1h\nseed: 1\ngolems:\n  - {count: 3}\n")
    w.gr.insert(np.array([0]), np.ones((1, w.gr.dim)), dict(created_ms=0, last_access_ms=0, window_ms=np.inf,
                                                            has_tag=True, p=np.float32(-0.8), a=np.float32(0.9)))
    from golem import clade
    entry = clade.capture(w.gr, 0)
    w.pop.alive[2] = False
    before = w.pop.pad.copy()
    w.deliver([(0, entry, "flashbulb", np.array([1, 2]), np.array([2.0, 2.0]))])
    assert w.gr.count.tolist() == [1, 1, 0]
    assert w.pop.pad[1, 0] == pytest.approx(before[1, 0] - 0.8 * 0.3) and (w.pop.pad[2] == before[2]).all()


def test_no_golem_receives_its_own_push(tmp_path):
    """SPEC §9: a parcel whose receivers list its sender is not delivered back to it (no copy, no
    contagion); its living sibling stores the copy and its P moves by -0.8 x 0.3."""
    w = _world(tmp_path, text="name: w\nduration: 1h\nseed: 1\ngolems:\n  - {count: 2}\n")
    w.gr.insert(np.array([0]), np.ones((1, w.gr.dim)), dict(created_ms=0, last_access_ms=0, window_ms=np.inf,
                                                            has_tag=True, p=np.float32(-0.8), a=np.float32(0.9)))
    from golem import clade
    entry = clade.capture(w.gr, 0)
    before = w.pop.pad.copy()
    w.deliver([(0, entry, "flashbulb", np.array([0, 1]), np.array([2.0, 2.0]))])
    assert w.gr.count.tolist() == [1, 1]
    assert (w.pop.pad[0] == before[0]).all() and w.pop.pad[1, 0] == pytest.approx(before[1, 0] - 0.8 * 0.3)


@pytest.mark.parametrize("jitter", ["0s", "1s"])
def test_a_dying_golems_push_reaches_its_one_living_sibling(tmp_path, jitter):
    """SPEC §9, §10: the death reflection is pushed when its writer is already dead; a Clade of two
    has one living sibling, who receives it (with and without jitter: one shared receiver array or
    a list per push) after the Clade's latency, and the dead writer gets nothing back."""
    w = _world(tmp_path, text=f"name: w\nduration: 1h\nseed: 1\nclades:\n  - {{name: c, jitter: {jitter}}}\n"
                              "golems:\n  - {count: 2, clade: c}\n")
    w.gr.insert(np.array([0]), np.ones((1, w.gr.dim)), dict(created_ms=0, last_access_ms=0, window_ms=np.inf,
                                                            has_tag=True, p=np.float32(-0.8), a=np.float32(0.9)))
    w.pop.alive[0] = False
    before = w.pop.pad.copy()
    w.push([dict(sender=0, slot=0, entry_id=int(w.gr.cols["id"][0]), alert_type="death_reflection")])
    w.env.run(until=1.999 if jitter == "0s" else 1.0)      # the default latency 2 s (jitter 1 s: 2-3 s)
    assert w.gr.count.tolist() == [1, 0]
    w.env.run(until=2.001 if jitter == "0s" else 3.001)
    assert w.stats.pushes == 1 and w.gr.count.tolist() == [1, 1]
    assert w.pop.pad[1, 0] == pytest.approx(before[1, 0] - 0.8 * 0.3) and (w.pop.pad[0] == before[0]).all()


def test_a_clade_without_jitter_sends_its_pushes_of_an_instant_to_one_receiver_array(tmp_path):
    """docs/decisions.md, "A push wave holds nothing per copy": three pushes of one instant from a
    jitter-free Clade of four are one delivery whose parcels share one receiver array (the
    living members, senders included), and each sender's copies reach its three siblings only."""
    from sim.world import Delivery
    w = _world(tmp_path, text="name: w\nduration: 1h\nseed: 1\ngolems:\n  - {count: 4}\n")
    w.gr.insert(np.arange(3), np.ones((3, w.gr.dim)), dict(created_ms=0, last_access_ms=0, window_ms=np.inf))
    w.push([dict(sender=g, slot=g * w.gr.capacity, entry_id=int(w.gr.cols["id"][g * w.gr.capacity]),
                 alert_type="flashbulb") for g in range(3)])
    deliveries = [cb for *_, ev in w.env._queue for cb in ev.callbacks if isinstance(cb, Delivery)]
    assert len(deliveries) == 1 and len(deliveries[0].parcels) == 3
    recv = [p[3] for p in deliveries[0].parcels]
    assert recv[0] is recv[1] is recv[2] and recv[0].tolist() == [0, 1, 2, 3]
    w.env.run(until=2.001)
    assert w.gr.count.tolist() == [1 + 2, 1 + 2, 1 + 2, 3] and w.stats.deliveries == 9


@pytest.mark.parametrize("arousal, pushed", [(0.3, True), (0.9, False)])
def test_warnings_are_pushed_only_at_confidence_0_7(arousal, pushed):
    """SPEC §9: a warning (a high-severity event) goes to the Clade when its confidence, 0.9 x
    factor(A), is >= 0.7: at A 0.3 it is 0.9, at A 0.9 0.9 x exp(-0.5) = 0.55."""
    m = minds.mind(n=1)
    obs = minds.observation(m, events=[("exploit", 3, "exploit drained-pool")])
    out, _ = _reflect(m, minds.sensed(m, IX, pad=(-0.5, arousal, 0.0), sev=3), obs=obs)
    rows = minds.written(out)
    warn = rows["category"] == CAT["warning"]
    assert warn.sum() == 1 and rows["confidence"][warn][0] == pytest.approx(0.9 * _factor(arousal), abs=1e-6)
    assert [p["alert_type"] for p in out.pushes if p["alert_type"] != "flashbulb"] == (["warning"] if pushed else [])
    r = dict(category=np.array([CAT["warning"]] * 3), confidence=np.array([0.69, 0.7, 0.71], np.float32),
             flashbulb=np.zeros(3, bool), golem=np.zeros(3, np.int64), id=np.arange(3), slot=np.arange(3))
    assert [p["entry_id"] for p in hb.warning_pushes(r, 0.7)] == [1, 2]


def test_protection_threshold_is_the_configs():
    """grimoire.protected_salience (0.7): from it an entry is never evicted nor archived and dreams
    re-boost it; raised to 0.8, an entry at 0.75 is neither protected nor re-boosted."""
    from golem import dreams
    for protect, kept in ((0.7, True), (0.8, False)):
        m = minds.mind(n=1, cap=2, cfg=minds.config(**{"grimoire.protected_salience": protect}))
        _entries(m, 0, np.eye(2, m.gr.dim), salience=np.array([0.75, 0.1], np.float32), decay_class=gm.TACTICAL,
                 window_ms=np.float64(DAY), importance=np.array([0.1, 0.9], np.float32))
        slots, _ = m.gr.insert(np.array([0]), np.ones((1, m.gr.dim)), dict(created_ms=0, last_access_ms=0))
        assert (slots[0] == 1) == kept                     # protected: the other one goes
        m2 = minds.mind(n=1, cap=2, cfg=minds.config(**{"grimoire.protected_salience": protect}))
        _entries(m2, 0, np.eye(1, m2.gr.dim), salience=np.float32(0.75), decay_class=gm.TACTICAL,
                 window_ms=np.float64(DAY), importance=np.float32(0.1))
        assert curatorm.curate(m2, 0, 10 * DAY)["archived"] == int(not kept)   # demoted, then past 2 x 1.75 d
        dreams.dream(m2.gr, 0, 10 * DAY, m2.cfg)
        assert m2.gr.cols["importance"][0] == pytest.approx(0.1 if kept else 0.1 * 0.95)


def test_windows_of_the_loss_history_and_rumination_are_the_configs():
    """emotion.recurring_loss_window: the losses counted are the last n ticks'; retrieval.
    rumination_window: the guard looks at that many retrievals."""
    def recent_losses(window):      # after a flat first tick on the history 0b11001 (newest last)
        m = minds.mind(n=1, cfg=minds.config(**{"emotion.recurring_loss_window": window}))
        m.pop.loss_bits[0] = 0b11001
        return int(m.sense(IX, minds.observation(m)).recent_losses[0])
    assert [recent_losses(w) for w in (1, 3, 5)] == [0, 1, 2]     # 0b110010 seen through 1, 3, 5 ticks
    m = minds.mind(n=1, cfg=minds.config(**{"emotion.recurring_loss_window": 3, "retrieval.rumination_window": 4}))
    assert m.pop.neg_share.shape == (1, 4)
    _entries(m, 0, np.ones((2, m.gr.dim)), p=np.array([-0.9, 0.2], np.float32),
             importance=np.array([1.0, 0.0], np.float32))
    m2 = minds.mind(n=1, cfg=minds.config(**{"retrieval.top_k": 1, "retrieval.rumination_window": 4}))
    _entries(m2, 0, np.ones((2, m2.gr.dim)), p=np.array([-0.9, 0.2], np.float32),
             importance=np.array([1.0, 0.0], np.float32))
    for shares, fires in (([0.9, 0.9, 0.9, 0.1], False), ([0.9, 0.9, 0.9, 0.9], True)):
        m2.pop.neg_share[0] = shares
        out = TickOutput()
        m2.decide(IX, minds.observation(m2), minds.sensed(m2, IX, pad=(-0.5, 0.5, 0.0)), out)
        assert len(minds.events(out, "anti_rumination")) == int(fires)


def test_the_decision_reads_the_entry_anti_rumination_serves():
    """SPEC §4.3: the non-negative entry that takes the last served place is the one the decision
    reads (its id in the retrieval row, its outcome in the memory signal), not the negative one
    the retrieval first served."""
    m = minds.mind(n=1, cfg=minds.config(**{"retrieval.top_k": 1, "retrieval.rumination_window": 4}))
    _, ids = _entries(m, 0, np.ones((2, m.gr.dim)), p=np.array([-0.9, 0.2], np.float32),
                      importance=np.array([1.0, 0.0], np.float32), has_outcome=True,
                      outcome=np.array([-0.8, 0.8], np.float32), confidence=np.array([0.3, 0.9], np.float32))
    m.pop.neg_share[0] = [0.9] * 4
    out = TickOutput()
    decided = m.decide(IX, minds.observation(m), minds.sensed(m, IX, pad=(-0.5, 0.5, 0.0)), out)
    assert len(minds.events(out, "anti_rumination")) == 1
    assert np.asarray(out.retrievals["ids"]).tolist() == [[ids[1]]]
    assert decided.mem[0] == pytest.approx(0.8)


def test_a_parcel_that_reaches_nobody_is_not_numbered_among_the_delivered(tmp_path):
    """Pushes of one instant share a receiver array, so a parcel may find all its receivers dead
    on arrival: it stores nothing and moves no one, and the contagion rows number the parcels
    that reached someone (here the second parcel is parcel 0). Only such parcels: no delivery."""
    from golem import clade as cladem
    w = _world(tmp_path, text="name: w\nduration: 1h\nseed: 1\ngolems:\n  - {count: 3}\n")
    w.gr.insert(np.arange(2), np.ones((2, w.gr.dim)), dict(created_ms=0, last_access_ms=0, window_ms=np.inf))
    entries = [cladem.capture(w.gr, g * w.gr.capacity) for g in range(2)]
    recv, lat = np.arange(3, dtype=np.int32), np.full(3, 2000)
    w.pop.alive[[1, 2]] = False
    before = w.pop.pad.copy()
    assert cladem.receive(w.mind, [(0, entries[0], "flashbulb", recv, lat)], 2000, 0.3) == (0, None)
    assert w.gr.count.tolist() == [1, 1, 0] and (w.pop.pad == before).all()
    n, rows = cladem.receive(w.mind, [(0, entries[0], "flashbulb", recv, lat), (1, entries[1], "flashbulb", recv, lat)],
                             2000, 0.3)
    assert n == 1 and rows["parcel"].tolist() == [0] and rows["other_golem"].tolist() == [1]
    assert rows["golem_id"].tolist() == [0] and w.gr.count.tolist() == [2, 1, 0]


def _reference_query(m, obs, s):
    """The context query row by row as array expressions over the whole cohort: base context, a
    1.5-weighted token per kind of event seen (sorted), normalised to float32."""
    base = m.lex.contexts(list(m.assets), s.asset, list(m.regime_names), s.regime, s.ret, s.vol_ratio)
    for kind in sorted({k for k, _, _ in obs.events}):
        rows = obs.seeing((kind,))
        base[rows] = m.lex.with_tokens(base[rows], [f"event:{kind}"], 1.5)
    return (base / np.maximum(np.linalg.norm(base, axis=-1, keepdims=True), 1e-12)).astype(np.float32)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 60))
def test_the_query_built_once_per_distinct_context_is_every_rows_own(seed, n):
    """The query of each distinct (context, kinds seen) built once and gathered = each row's own,
    byte for byte: two assets, regimes, moves and volatilities in few buckets (many repeats) and
    events of up to three kinds, seen by some Golems, one kind twice."""
    rng = np.random.default_rng(seed)
    m = minds.mind(n=n, dim=16, assets=("ETH", "BTC"), regimes=("calm", "crash", "bull"))
    kinds = ["flash_crash", "gas_spike", "depeg"][:int(rng.integers(0, 4))]
    events = [(k, 2, k) for k in kinds] + ([(kinds[0], 1, "again")] if kinds and rng.integers(0, 2) else [])
    obs = minds.observation(m, events=events, sees=rng.uniform(size=(n, len(events))) < 0.5)
    s = minds.sensed(m, np.arange(n), asset=rng.integers(0, 2, n), regime=rng.integers(0, 3, n),
                     ret=rng.choice([0.0, 0.004, -0.02, 0.3], n), vol_ratio=rng.choice([1.0, 0.3, 5.0], n))
    got = m._query(obs, s)
    want = _reference_query(m, obs, s)
    assert got.dtype == np.float32 and got.tobytes() == want.tobytes()
