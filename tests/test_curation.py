"""Curator, contrarian pass, dreams and the reflex lane."""
from __future__ import annotations

import json
from unittest import mock

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import events, payloads, table
from golem import dreams, kernels, reflex
from golem import grimoire as gm
from golem.config import build_config, default_table
from golem.curator import consolidation_groups, curate, curate_slabs, heat
from golem.kernels import charge_at
from golem.pad import emotional_intensity_at

DAY = 86_400_000


def test_curator_every_50th_and_contrarian_every_100th_tick(flash_run):
    h = table(flash_run.run_dir, "heartbeats")
    for kind, every in (("curator", 50), ("contrarian", 100)):
        ev = events(flash_run.run_dir, kind)
        got = ev.group_by("golem_id").agg(pl.col("tick").sort()).sort("golem_id")
        last_tick = h.group_by("golem_id").agg(pl.col("tick").max()).sort("golem_id")
        for (g, ticks), (_, last) in zip(got.iter_rows(), last_tick.iter_rows()):
            assert ticks == list(range(every - 1, last + 1, every)), (kind, g)
        assert got.height == h["golem_id"].n_unique()


def test_curator_event_carries_the_balance_figures(flash_run):
    p = payloads(events(flash_run.run_dir, "curator"))
    assert all(set(x) >= {"n_entries", "mean_valence", "valence_correction", "arousal_correction", "archived",
                          "promoted", "demoted", "lessons", "low_confidence"} for x in p)
    for x in p:
        assert x["valence_correction"] == pytest.approx(-x["mean_valence"] * 0.4)
        assert x["arousal_correction"] == pytest.approx(min(0.0, -(x["mean_arousal"] - 0.3) * 0.3))


def test_contrarian_section_is_weighed_by_the_next_decision(flash_run):
    ev = events(flash_run.run_dir, "contrarian")
    r = table(flash_run.run_dir, "retrievals")
    considered = r.filter(pl.col("contrarian_ids").list.len() > 0)
    assert considered.height > 0
    # the next DECIDING after a pass reads exactly the pass's ids
    for g, t, p in zip(ev["golem_id"], ev["tick"], payloads(ev)):
        if not p["ids"]:
            continue
        nxt = r.filter((pl.col("golem_id") == g) & (pl.col("tick") == t + 1))
        if nxt.height:
            assert set(nxt["contrarian_ids"][0]) <= set(p["ids"])
    # contrarian entries have the opposite valence sign of the mood that asked and confidence >= 0.6
    e = table(flash_run.run_dir, "entries").select("id", "p", "confidence")
    for p in payloads(ev):
        if p["ids"]:
            ps = e.filter(pl.col("id").is_in(p["ids"]))["p"]
            assert (np.sign(ps) == p["valence_sign"]).all()


class _Mind:
    """Just enough of golem.heartbeat.Mind for a curator pass on a hand-built Grimoire."""

    def __init__(self, gr, cfg, pad=(0.0, 0.0, 0.0)):
        from golem.population import Population
        self.gr, self.cfg = gr, cfg
        self.pop = Population(n=gr.n_golems, clade=np.zeros(gr.n_golems, np.int32), clade_names=("c",),
                              asset=np.zeros(gr.n_golems, np.int16), strategy=np.zeros(gr.n_golems, np.int8),
                              baseline=np.tile(pad, (gr.n_golems, 1)), budget0=np.ones(gr.n_golems),
                              value0=np.ones(gr.n_golems))
        self.pending_entries = []

    def topic_name(self, code):
        return f"topic-{code}"


def _cfg(**over):
    tree = {k: dict(v) for k, v in default_table().items()}
    for key, v in over.items():
        s, k = key.split(".")
        tree[s][k] = v
    return build_config(tree)


def _insert(gr, n, **vals):
    base = dict(created_ms=0, last_access_ms=0, window_ms=np.full(n, 7.0 * DAY), importance=np.float32(0.5),
                confidence=np.float32(0.5), salience=np.float32(0.3), decay_class=gm.TACTICAL, category=0,
                has_tag=True, p=np.float32(0.0), a=np.float32(0.0), d=np.float32(0.0))
    base.update(vals)
    return gr.insert(np.zeros(n, np.int64), np.random.default_rng(n).normal(size=(n, gr.dim)), base)


def test_balance_weights_minority_and_aroused_entries():
    gr = gm.Grimoire(1, 16, 4)
    # 4 tagged (3 strongly negative, 1 positive) + 1 untagged: mean valence = (-0.9*3 + 0.6) / 5 = -0.42
    _insert(gr, 5, p=np.array([-0.9, -0.9, -0.9, 0.6, 0.0], np.float32), a=np.array([0.8, 0.1, 0.1, 0.1, 0], np.float32),
            has_tag=np.array([True, True, True, True, False]), created_ms=DAY)
    m = _Mind(gr, _cfg())
    f = curate(m, 0, 2 * DAY)
    assert f["mean_valence"] == pytest.approx(-2.1 / 5) and f["n_entries"] == 5 and f["n_tagged"] == 4
    assert f["valence_correction"] == pytest.approx(0.4 * 2.1 / 5)
    assert f["mean_arousal"] == pytest.approx(1.1 / 5)
    # |mean| 0.42 < 0.5: no minority weights; the aroused entry (A 0.8 > 0.5) gets 1 + arousal_correction (0 here)
    assert np.allclose(gr.cols["curator_weight"][:5], 1.0)
    gr2 = gm.Grimoire(1, 16, 4)
    _insert(gr2, 4, p=np.array([-0.9, -0.9, -0.9, 0.6], np.float32), a=np.array([0.9, 0.9, 0.9, 0.1], np.float32),
            created_ms=DAY)
    f2 = curate(_Mind(gr2, _cfg()), 0, 2 * DAY)
    vc, ac = f2["valence_correction"], f2["arousal_correction"]
    assert f2["mean_valence"] == pytest.approx(-2.1 / 4) and vc == pytest.approx(0.4 * 2.1 / 4)
    assert ac == pytest.approx(-(2.8 / 4 - 0.3) * 0.3)
    assert np.allclose(gr2.cols["curator_weight"][:4], [1 + ac, 1 + ac, 1 + ac, 1 + abs(vc)])
    gr3 = gm.Grimoire(1, 16, 4)
    _insert(gr3, 4, p=np.array([-0.9, -0.9, -0.9, 0.6], np.float32), a=np.float32(0.9), created_ms=DAY)
    curate(_Mind(gr3, _cfg(**{"curator.balance": False})), 0, 2 * DAY)
    assert np.allclose(gr3.cols["curator_weight"][:4], 1.0)            # the A/B switch


def test_archiving_spares_protected_entries():
    gr = gm.Grimoire(1, 16, 4)
    # all expired: last access 100 days ago with a 7-day window
    _insert(gr, 4, decay_class=np.array([gm.TACTICAL, gm.STRUCTURAL, gm.TACTICAL, gm.TACTICAL], np.int8),
            flashbulb=np.array([False, False, True, False]), salience=np.array([0.3, 0.3, 0.3, 0.75], np.float32))
    f = curate(_Mind(gr, _cfg()), 0, 100 * DAY)
    assert f["archived"] == 1
    assert gr.cols["status"][:4].tolist() == [gm.ARCHIVED, gm.ACTIVE, gm.ACTIVE, gm.ACTIVE]


@pytest.mark.parametrize("n, age_days, lessons", [(3, 31, 1), (2, 31, 0), (3, 29, 0), (4, 40, 1)])
def test_consolidation(n, age_days, lessons):
    gr = gm.Grimoire(1, 16, 4)
    sal = np.linspace(0.3, 0.6, n).astype(np.float32)
    _insert(gr, n, topic=np.int32(7), scope=np.int32(0), salience=sal, window_ms=np.inf, decay_class=gm.REGIME,
            p=np.linspace(-0.5, 0.5, n).astype(np.float32))
    m = _Mind(gr, _cfg())
    f = curate(m, 0, age_days * DAY)
    assert len(f["lessons"]) == lessons
    assert gr.count[0] == n + lessons                      # the episodes stay
    if lessons:
        s = gr.slot_of(f["lessons"][0])
        assert gr.cols["category"][s] == gm.CATEGORIES.index("lesson")
        assert set(gr.links[f["lessons"][0]]) == set(range(n))
        anchor = int(np.argmax(sal))
        assert gr.cols["p"][s] == pytest.approx(gr.cols["p"][anchor])      # framed on the most salient episode
        assert np.allclose(gr.emb[s], gr.emb[anchor])
        f2 = curate(m, 0, age_days * DAY + 1)
        assert f2["lessons"] == []                                           # never consolidated twice


def test_consolidation_groups_need_same_scope_and_topic():
    g = consolidation_groups(np.array([0, 0, 1, 0]), np.array([5, 5, 5, 5]), np.zeros(4, np.int64),
                             np.zeros(4, bool), np.zeros(4, np.int8), 31 * DAY)
    assert [x.tolist() for x in g] == [[0, 1, 3]]


def test_arousal_bias_reevaluated_only_when_calm():
    """SPEC §7.2 with §3.4: when calm (A < 0.3) each arousal-biased insight's counterfactual is
    re-run without the bias (its stored raw_outcome); it is validated (+0.10) when the bias moved
    it by at most curator.reevaluation_tolerance (0.1), contradicted (-0.20) otherwise, takes the
    unbiased outcome and loses the flag. An insight without a counterfactual only loses the flag."""
    gr = gm.Grimoire(1, 8, 4)
    insight = gm.CATEGORIES.index("insight")
    _insert(gr, 5, category=np.array([insight] * 4 + [0], np.int8), arousal_bias=True,
            has_outcome=np.array([True, True, True, False, True]),
            outcome=np.array([-0.5, 0.35, -0.3, 0.0, -0.9], np.float32),
            raw_outcome=np.array([-0.2, 0.3, 0.3, 0.0, 0.9], np.float32), confidence=np.float32(0.5))
    f = curate(_Mind(gr, _cfg(), pad=(0.0, 0.6, 0.0)), 0, DAY)      # aroused: nothing re-evaluated
    assert f["reevaluated"] == 0 and gr.cols["arousal_bias"][:5].all()
    f = curate(_Mind(gr, _cfg(), pad=(0.0, 0.1, 0.0)), 0, DAY)
    # |-0.5 - -0.2| = 0.3 > 0.1: contradicted; |0.35 - 0.3| = 0.05: validated; a flipped sign: contradicted
    assert f["reevaluated"] == 3 and f["reevaluation_contradicted"] == 2
    assert gr.cols["confidence"][:5].tolist() == pytest.approx([0.3, 0.6, 0.3, 0.5, 0.5])
    assert gr.cols["outcome"][:4].tolist() == pytest.approx([-0.2, 0.3, 0.3, 0.0])
    assert not gr.cols["arousal_bias"][:4].any()
    assert gr.cols["arousal_bias"][4] and gr.cols["outcome"][4] == np.float32(-0.9)   # an episode: not an insight
    # the tolerance is the config's: 0.4 lets the first one agree too
    gr2 = gm.Grimoire(1, 8, 4)
    _insert(gr2, 1, category=np.int8(insight), arousal_bias=True, has_outcome=True, outcome=np.float32(-0.5),
            raw_outcome=np.float32(-0.2), confidence=np.float32(0.5))
    f = curate(_Mind(gr2, _cfg(**{"curator.reevaluation_tolerance": 0.4}), pad=(0.0, 0.1, 0.0)), 0, DAY)
    assert f["reevaluation_contradicted"] == 0 and gr2.cols["confidence"][0] == pytest.approx(0.6)


def test_heat_is_log_scaled_access_count():
    assert np.allclose(heat(np.array([0.0, 1.0, 3.0, 15.0])), np.log1p([0, 1, 3, 15]) / np.log(16))
    assert np.allclose(heat(np.zeros(3)), 0.0)


def test_rem_depotentiation_three_cycles():
    assert dreams.rem_depotentiate(0.9, 3) == pytest.approx(0.3, abs=1e-9)
    assert dreams.REM_FACTOR ** 3 == pytest.approx(1 / 3, abs=1e-12)


def test_dream_replay_keeps_confidence_direction_and_content():
    gr = gm.Grimoire(1, 40, 4)
    n = 30
    rng = np.random.default_rng(1)
    _insert(gr, n, i0=rng.random(n).astype(np.float32), importance=rng.random(n).astype(np.float32),
            a=np.float32(0.9), p=np.float32(-0.5), salience=np.where(np.arange(n) < 5, 0.8, 0.3).astype(np.float32))
    emb = gr.emb.copy()
    imp = gr.cols["importance"][:n].copy()
    conf = gr.cols["confidence"][:n].copy()
    cfg = _cfg(**{"dream.replay_budget": 16})
    f = dreams.dream(gr, 0, 0, cfg)
    score = gr.cols["i0"][:n] * imp
    chosen = np.lexsort((np.arange(n), -score))[:16]
    assert sorted(gr.slot_of(e) for e in f["replayed"]) == sorted(chosen.tolist())
    assert np.allclose(gr.cols["a"][chosen], 0.9 * dreams.REM_FACTOR)
    others = np.setdiff1d(np.arange(n), chosen)
    assert np.allclose(gr.cols["a"][others], 0.9)
    assert np.allclose(gr.cols["confidence"][chosen], np.minimum(1, conf[chosen] + 0.02))
    assert np.allclose(gr.cols["p"][:n], -0.5) and np.array_equal(gr.emb, emb)
    assert np.allclose(gr.cols["importance"][5:n], imp[5:] * 0.95)          # homeostasis
    assert np.allclose(gr.cols["importance"][:5], imp[:5])                   # salient re-boosted
    # the unit PAD vectors (what the alternative profiles read) follow the new arousal
    u = gr.unit_pad(chosen)
    v = np.stack([gr.cols["p"][chosen], gr.cols["a"][chosen], gr.cols["d"][chosen]], 1).astype(float)
    assert np.allclose(u, v / np.linalg.norm(v, axis=1, keepdims=True), atol=1e-6)


def _dream_rows_by_arrays(golems, cap, count, replay, ids, has_tag, a, confidence, importance, salience, protect,
                          boost, rem_cycles, downscale):
    """What `dreams._dream_rows` does, as the array expressions over the dreaming Golems (its reference)."""
    chosen = replay >= 0
    r = replay[chosen]
    before_a = a[r].astype(np.float64)
    confidence[r] = np.minimum(1.0, confidence[r] + boost)
    tagged = r[has_tag[r]]
    a[tagged] = dreams.rem_depotentiate(a[tagged].astype(np.float64), rem_cycles)
    after_a = a[r]
    slots = golems[:, None] * cap + np.arange(cap)
    live = (np.arange(cap)[None, :] < count[golems][:, None]) & (ids[slots] >= 0)
    imp = importance.reshape(-1, cap)
    pre = imp[golems]
    salient = salience[slots] >= protect
    imp[golems] = np.where(live & ~salient, pre * downscale, pre)
    n = chosen.sum(axis=1)
    full = (n == replay.shape[1]) & (n > 0)
    before, after = np.zeros(golems.size), np.zeros(golems.size)
    if full.any():
        before[full] = np.abs(before_a[np.repeat(full, n)].reshape(-1, replay.shape[1])).mean(axis=1)
        after[full] = np.abs(after_a[np.repeat(full, n)].reshape(-1, replay.shape[1])).mean(axis=1)
    bounds = np.concatenate([[0], np.cumsum(n)])
    for i in np.flatnonzero(~full & (n > 0)):
        before[i] = np.abs(before_a[bounds[i]:bounds[i + 1]]).mean()
        after[i] = np.abs(after_a[bounds[i]:bounds[i + 1]]).mean()
    return (ids[r].astype(np.int64), bounds.astype(np.int64), before, after,
            (live & ~salient).sum(axis=1).astype(np.int64), (live & salient).sum(axis=1).astype(np.int64))


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**31), st.integers(1, 8), st.sampled_from([4, 16, 40]), st.integers(1, 16))
def test_the_dream_kernel_is_the_array_expressions_bit_for_bit(seed, n, cap, budget):
    """Replays full, short and empty, tagged and untagged entries, slabs partly filled and with
    holes, salient and not, a boost past 1: the same ids, means and counts, and the same columns
    left, bit for bit."""
    rng = np.random.default_rng(seed)
    g_all = n + int(rng.integers(0, 3))
    size = g_all * cap
    golems = np.sort(rng.permutation(g_all)[:n]).astype(np.int64)
    count = rng.integers(0, cap + 1, g_all).astype(np.int32)
    ids = np.where(rng.random(size) < 0.15, -1, np.arange(size) + 1000).astype(np.int64)
    k = min(budget, cap)
    replay = np.full((n, k), -1, np.int64)
    for i, g in enumerate(golems):
        live = np.flatnonzero(ids[g * cap:g * cap + count[g]] >= 0)
        m = int(rng.integers(0, min(k, live.size) + 1))
        replay[i, :m] = g * cap + rng.permutation(live)[:m]
    cols = dict(has_tag=rng.random(size) < 0.7, a=rng.uniform(-1, 1, size).astype(np.float32),
                confidence=np.where(rng.random(size) < 0.2, 1.0, rng.uniform(0, 1, size)).astype(np.float32),
                importance=rng.uniform(0, 1, size).astype(np.float32),
                salience=rng.choice([0.3, 0.7, 0.71, 0.9], size).astype(np.float32))
    ref = {key: v.copy() for key, v in cols.items()}
    boost, cycles, down = float(rng.uniform(0.001, 0.3)), int(rng.integers(0, 4)), float(rng.choice([0.95, 0.5]))
    got = dreams._dream_rows(golems, cap, count, replay, ids, cols["has_tag"], cols["a"], cols["confidence"],
                             cols["importance"], cols["salience"], np.float32(0.7), boost,
                             dreams.rem_depotentiate(1.0, cycles), down)
    want = _dream_rows_by_arrays(golems, cap, count, replay, ids, ref["has_tag"], ref["a"], ref["confidence"],
                                 ref["importance"], ref["salience"], np.float32(0.7), boost, cycles, down)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.tobytes() == w.tobytes()
    for key in cols:
        assert cols[key].tobytes() == ref[key].tobytes(), key


def test_dreaming_ticks_do_not_trade(flash_run):
    h = table(flash_run.run_dir, "heartbeats").filter(pl.col("state_path") == "DREAMING")
    assert h.height > 0 and not h["traded"].any()
    ev = events(flash_run.run_dir, "dream")
    assert ev.height == h.height
    p = payloads(ev)
    # the replay budget: 16 entries, fewer only while a Golem holds fewer (each Golem dreams at its own
    # phase of the day, the first time perhaps in its first hours): whenever it had written or been
    # given at least 32 entries before the dream (room for what the curator archived), exactly 16
    e = table(flash_run.run_dir, "entries").select("golem_id", "created_ms")
    had = [e.filter((pl.col("golem_id") == g) & (pl.col("created_ms") < t)).height
           for g, t in ev.select("golem_id", "time_ms").iter_rows()]
    n = [len(x["replayed"]) for x in p]
    assert all(k <= 16 and k <= w for k, w in zip(n, had))
    assert any(w >= 32 for w in had) and all(k == 16 for k, w in zip(n, had) if w >= 32)
    assert all(x["arousal_after"] <= x["arousal_before"] + 1e-9 for x in p)


# --- reflex lane -------------------------------------------------------------------------------

def test_reflex_matching_rules():
    desc = set(reflex.tokens("tvl-spike anonymous-deployer concentrated-liquidity npm-shrinkwrap new deployment"))
    assert reflex.phrase_matches("anonymous-deployer with concentrated-liquidity", desc)
    assert not reflex.phrase_matches("anonymous-deployer and flash-loan", desc)       # all tokens required
    assert reflex.phrase_matches("the tvl-spike of an anonymous-deployer", desc)     # function words ignored
    assert not reflex.phrase_matches("deployment", desc)                             # one plain word never fires
    assert reflex.phrase_matches("npm-shrinkwrap", desc)                             # an identifier does
    assert reflex.phrase_matches("the npm-shrinkwrap", desc)
    assert not reflex.phrase_matches("deploy", desc)                                 # no prefix match
    assert not reflex.phrase_matches("tvl-spik anonymous-deployer", desc)            # no fuzzy match
    assert reflex.phrase_matches("v3 pool0", {"pool0"})          # 'v3' (< 3 chars) dropped: 'pool0' is an identifier
    assert not reflex.phrase_matches("v3 pool", {"pool", "v3"})  # ... but 'pool' alone is a plain word


def test_reflex_budget_per_tick_and_cooldown():
    cands = [(i, 100 + i, ("anonymous-deployer",), -(10**12)) for i in range(5)]
    fired = reflex.fire("anonymous-deployer", cands, 0, max_per_turn=2)
    assert [f[1] for f in fired] == [100, 101]
    assert len(reflex.fire("anonymous-deployer", cands, 0, max_per_turn=9)) == 5     # clamped to 5
    assert len(reflex.fire("anonymous-deployer", cands, 0, max_per_turn=0)) == 1     # clamped to 1
    just = [(0, 100, ("anonymous-deployer",), 0), (1, 101, ("anonymous-deployer",), 0)]
    assert reflex.fire("anonymous-deployer", just, 4 * 3_600_000 - 1) == []           # once per 4 h
    assert len(reflex.fire("anonymous-deployer", just, 4 * 3_600_000)) == 2


def test_reflex_promotion_and_firing_in_a_run(tmp_path):
    from conftest import run_scenario
    s = tmp_path / "r.yaml"
    s.write_text("""name: reflexes
duration: 3d
seed: 4
market:
  events:
""" + "".join(f"    - {{kind: gas_spike, at: {h}h, duration: 2h, severity: medium, gas_multiplier: 4}}\n"
              for h in range(2, 70, 6)) + """golems:
  - {count: 3, asset: ETH}
""")
    # manual promotion and reflexes switched off run the first day only: auto fires within it
    manual = run_scenario(s, tmp_path / "manual", sets=["reflex.promotion_min=2", "duration=1d"])
    auto = run_scenario(s, tmp_path / "auto", sets=["reflex.promotion_min=2", "reflex.promotion=auto"])
    props = events(manual.run_dir, "reflex_proposal")
    assert props.height > 0 and not any(p["applied"] for p in payloads(props))
    # each curator row is followed by its Golem's proposals, in the order its payload lists them
    ev = events(manual.run_dir).sort("seq")
    rows = list(zip(ev["kind"], ev["golem_id"], ev["entry_id"], ev["payload"]))
    listed = 0
    for i, (kind, g, _, text) in enumerate(rows):
        if kind == "curator":
            want = json.loads(text)["reflex_proposals"]
            listed += len(want)
            assert [r[:3] for r in rows[i + 1:i + 1 + len(want)]] == [("reflex_proposal", g, e) for e in want]
    assert listed == props.height
    assert events(manual.run_dir, "reflex").height == 0                 # proposals only recorded
    fired = events(auto.run_dir, "reflex")
    assert fired.filter(pl.col("time_ms") < 86_400_000).height > 0
    for p in payloads(fired):
        assert 1 <= len(p["served_ids"]) <= 2 and p["pool_size"] >= len(p["served_ids"])
        assert all(reflex.phrase_matches(m, set(reflex.tokens(p["description"]))) for m in p["matched"])
    # each entry at most once per 4 h
    rows = fired.with_columns(ids=pl.col("payload").str.json_decode(pl.Struct({"served_ids": pl.List(pl.Int64)}))
                              .struct.field("served_ids")).explode("ids").sort("time_ms")
    for _, grp in rows.group_by("ids"):
        t = np.array(grp["time_ms"])
        assert (np.diff(t) >= 4 * 3_600_000).all()
    off = run_scenario(s, tmp_path / "off", sets=["reflex.promotion_min=2", "reflex.promotion=auto", "duration=1d"],
                       environ={"GOLEM_REFLEX": "off"})
    assert events(off.run_dir, "reflex").height == 0


def test_lessons_are_written_and_recorded_in_a_run(tmp_path):
    from conftest import run_scenario
    s = tmp_path / "old.yaml"
    s.write_text("name: old\nduration: 12h\nseed: 3\ngolems:\n  - {count: 2, asset: ETH, prefill: 60}\n")
    res = run_scenario(s, tmp_path / "r")
    lessons = table(res.run_dir, "entries").filter(pl.col("category") == "lesson")
    assert lessons.height > 0 and (lessons["kind"] == "lesson").all()
    cur = payloads(events(res.run_dir, "curator"))
    assert sum(len(p["lessons"]) for p in cur) == lessons.height
    gr = res.world.gr
    for eid in lessons["id"]:
        members = gr.links[int(eid)]
        assert len(members) >= 3
        s_ = [gr.slot_of(m) for m in members]
        assert gr.cols["consolidated"][s_].all()


def _tiers_reference(golems, cap, live, c, now_ms, promote, demote, class_days):
    """Curator step 3 entry by entry from the spec's pieces (not the kernel's expressions): an
    unprotected entry (`grimoire.is_protected`) with curator score weight x importance x confidence
    x (1 + salience) (the float32 columns' product) >= promote goes up one class (`grimoire.promote`:
    never above regime-conditional), <= demote down one; its window becomes
    `grimoire.effective_window_days(new class, tier TTL, salience)` (SPEC §3.2); it is archived
    when its age since last access is at least twice its window."""
    counts = np.zeros((3, golems.size), dtype=np.int64)
    for r, g in enumerate(golems):
        for j in range(cap):
            s = g * cap + j
            sal = c["salience"][s]
            if not live[r, j] or gm.is_protected(int(c["decay_class"][s]), bool(c["flashbulb"][s]), sal):
                continue
            score = c["curator_weight"][s] * c["importance"][s] * c["confidence"][s] * (np.float32(1) + sal)
            dc = int(c["decay_class"][s])
            new = dc
            if score >= np.float32(promote) and gm.promote(dc) != dc:
                new = gm.promote(dc)
            elif score <= np.float32(demote) and dc > gm.EPHEMERAL:
                new = dc - 1
            if new != dc:
                counts[0 if new > dc else 1, r] += 1
                c["decay_class"][s] = new
                c["window_ms"][s] = gm.effective_window_days(new, float(c["ttl_days"][s]), float(sal),
                                                             tuple(class_days[:3])) * DAY
            if now_ms - int(c["last_access_ms"][s]) >= 2 * c["window_ms"][s] and c["status"][s] != gm.ARCHIVED:
                c["status"][s] = gm.ARCHIVED
                counts[2, r] += 1
    return tuple(counts)



def _pass_tiers(golems, cap, live, c, now_ms, promote, demote, class_days, protect=0.7):
    """`curate_slabs` with steps 1 and 2 idle (no entry since the last pass, not calm, no
    balance): its step 3 alone, as (promoted, demoted, archived) per Golem."""
    n = c["salience"].size
    f32 = np.zeros(n, np.float32)
    last = np.full(max(golems.max(initial=0) + 1, 1), np.iinfo(np.int64).max)
    _, cnt = curate_slabs(golems, cap, live, last, np.zeros(n, np.int64), np.zeros(n, bool), f32, f32,
                          c["curator_weight"], np.zeros(n, bool), np.zeros(n, np.int8), f32.copy(), f32, np.zeros(n, bool),
                          c["confidence"], np.zeros(golems.size, bool), False, 0.4, 0.3, 0.3, 0.2, 0.5,
                          gm.CATEGORIES.index("insight"), 0.1, 0.2, 0.1, c["salience"], c["decay_class"], c["flashbulb"],
                          c["importance"], c["window_ms"], c["ttl_days"], c["last_access_ms"], c["status"], now_ms,
                          promote, demote, class_days, protect)
    return cnt[:, 5], cnt[:, 6], cnt[:, 7]


def _pass_balance(golems, cap, live, last_ms, c, calm, balance, minority):
    """`curate_slabs` with step 3 idle (every entry structural, so protected): steps 1 and 2
    alone, as (figures, the five counts), with the constants of `_balance_reference`'s callers."""
    n = c["p"].size
    structural = np.full(n, gm.STRUCTURAL, np.int8)
    fig, cnt = curate_slabs(golems, cap, live, last_ms, c["created_ms"], c["has_tag"], c["p"], c["a"],
                            c["curator_weight"], c["arousal_bias"], c["category"], c["outcome"], c["raw_outcome"],
                            c["has_outcome"], c["confidence"], calm, balance, 0.4, 0.3, 0.3, minority, 0.5,
                            gm.CATEGORIES.index("insight"), 0.1, 0.2, 0.1, c["salience"], structural,
                            np.zeros(n, bool), np.ones(n, np.float32), np.ones(n), np.zeros(n, np.float32),
                            np.zeros(n, np.int64), np.zeros(n, np.int8), 0, 0.6, 0.2, np.array([3.0, 7.0, 14.0, np.inf]),
                            0.7)
    assert not cnt[:, 5:].any() and (structural == gm.STRUCTURAL).all()
    return fig, cnt[:, :5]

@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**31), st.integers(1, 4), st.integers(1, 40), st.sampled_from([0.3, 0.6, 0.7]),
       st.sampled_from([0.05, 0.1, 0.3]))
def test_tier_kernel_matches_the_spec_entry_by_entry(seed, n_golems, cap, promote, demote):
    rng = np.random.default_rng(seed)
    n = n_golems * cap
    c = dict(salience=rng.choice([0.0, 0.3, 0.69999999, 0.7, 0.9], n).astype(np.float32),
             decay_class=rng.integers(0, 4, n).astype(np.int8), flashbulb=rng.random(n) < 0.1,
             curator_weight=rng.choice([0.5, 1.0, 1.3], n).astype(np.float32),
             importance=rng.random(n).astype(np.float32), confidence=rng.random(n).astype(np.float32),
             window_ms=rng.choice([3.0, 7.0, 14.0, 30.0], n) * DAY * (1 + rng.random(n)),
             ttl_days=rng.choice([0.0, 7.0, 14.0, 30.0], n).astype(np.float32),
             last_access_ms=rng.integers(0, 60, n) * DAY, status=rng.integers(0, 4, n).astype(np.int8))
    # boundaries: scores exactly at the float32 thresholds, ages exactly at twice the window
    edge = rng.random(n) < 0.3
    c["curator_weight"][edge], c["confidence"][edge], c["salience"][edge] = 1.0, 1.0, 0.0
    c["importance"][edge] = rng.choice(np.array([promote, demote], np.float32), int(edge.sum()))
    whole = rng.random(n) < 0.3
    c["window_ms"][whole] = rng.choice([3.0, 7.0], int(whole.sum())) * DAY
    c["last_access_ms"][whole] = 40 * DAY - 2 * c["window_ms"][whole].astype(np.int64) + rng.integers(-1, 2, int(whole.sum()))
    want = {k: v.copy() for k, v in c.items()}
    golems = rng.permutation(n_golems)[:int(rng.integers(1, n_golems + 1))]
    live = rng.random((golems.size, cap)) < 0.8
    class_days = np.array([3.0, 7.0, 14.0, np.inf])
    got = _pass_tiers(golems, cap, live, c, 40 * DAY, promote, demote, class_days)
    ref = _tiers_reference(golems, cap, live, want, 40 * DAY, promote, demote, class_days)
    for a, b in zip(got, ref):
        assert a.tolist() == b.tolist()
    for k in c:
        assert np.array_equal(c[k], want[k]), k


def test_promotion_and_demotion_windows_by_hand():
    """SPEC §3.2 after a change of class: window = max(new class days, tier TTL) x (1 + s). A
    demotion shortens it (regime 14 d -> tactical 7 d with TTL 7: 18.9 -> 9.45 days); an import
    (TTL 0) demoted from regime-conditional keeps only the class days; promotion never goes above
    regime-conditional; protected entries (salience >= 0.7) never move."""
    gr = gm.Grimoire(1, 16, 4)
    rows = [  # class, ttl, salience, importance, confidence
        (gm.REGIME, 7.0, 0.35, 0.1, 0.5),      # score 0.0675: demoted
        (gm.REGIME, 0.0, 0.2, 0.1, 0.5),       # an import: demoted, TTL 0
        (gm.TACTICAL, 14.0, 0.4, 0.1, 0.5),    # demoted to ephemeral: the TTL holds the window
        (gm.TACTICAL, 7.0, 0.4, 1.0, 0.9),     # score 1.26: promoted
        (gm.REGIME, 30.0, 0.6, 1.0, 0.9),      # promoted? never above regime-conditional
        (gm.TACTICAL, 30.0, 0.75, 0.1, 0.5),   # protected
    ]
    dc, ttl, sal, imp, conf = (np.array(col) for col in zip(*rows))
    g = default_table()["grimoire"]
    class_days = (g["ephemeral_days"], g["tactical_days"], g["regime_conditional_days"])
    win = np.array([max(class_days[int(k)], t) * (1 + x) for k, t, x in zip(dc, ttl, sal)]) * DAY
    _insert(gr, len(rows), decay_class=dc.astype(np.int8), ttl_days=ttl.astype(np.float32),
            salience=sal.astype(np.float32), importance=imp.astype(np.float32), confidence=conf.astype(np.float32),
            window_ms=win, last_access_ms=10 * DAY, created_ms=10 * DAY)
    f = curate(_Mind(gr, _cfg()), 0, 10 * DAY)
    assert (f["promoted"], f["demoted"]) == (1, 3)
    assert gr.cols["decay_class"][:6].tolist() == [gm.TACTICAL, gm.TACTICAL, gm.EPHEMERAL, gm.REGIME, gm.REGIME,
                                                    gm.TACTICAL]
    s32 = sal.astype(np.float32).astype(np.float64)
    want_days = [7 * (1 + s32[0]), 7 * (1 + s32[1]), 14 * (1 + s32[2]), 14 * (1 + s32[3]), win[4] / DAY, win[5] / DAY]
    # the window is stored as float32 ms: the float64 formula, rounded once
    assert gr.cols["window_ms"][:6].tolist() == [float(np.float32(w * DAY)) for w in want_days]
    assert gr.cols["window_ms"][0] / DAY == pytest.approx(9.45, rel=1e-6)      # was 18.9


# ----------------------------------------------------------------------------- the pass's kernels
def _floats(rng, n, dtype):
    """Values whose sums depend on the order of the additions: mixed signs and magnitudes, zeros."""
    x = rng.standard_normal(n) * 10.0 ** rng.integers(-6, 7, n)
    x[rng.random(n) < 0.1] = 0.0
    return x.astype(dtype)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**31), st.integers(0, 700), st.integers(0, 5), st.sampled_from([np.float32, np.float64]))
def test_np_sum_adds_as_numpy_does(seed, n, lo, dtype):
    from golem.kernels import np_sum
    a = _floats(np.random.default_rng(seed), n + lo + 3, dtype)
    got, want = np_sum(a, lo, n, dtype(0)), a[lo:lo + n].sum()
    assert got == want and np.signbit(got) == np.signbit(want) and dtype(got) == got   # summed in dtype


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**31), st.lists(st.integers(1, 200), min_size=1, max_size=8))
def test_group_means_are_numpys_float32_means(seed, sizes):
    from golem.curator import group_means
    rng = np.random.default_rng(seed)
    values = _floats(rng, 2000, np.float32)
    members = rng.integers(0, values.size, sum(sizes))
    starts = np.concatenate([[0], np.cumsum(sizes)])
    want = [float(values[members[a:b]].mean()) for a, b in zip(starts[:-1], starts[1:])]
    assert group_means(values, members, starts).tolist() == want


def _slabs(rng, n_golems, cap):
    """Random slab columns for the pass's kernels: dead slots, ties, zeros and boundary values."""
    n = n_golems * cap
    f32 = np.float32
    c = dict(id=np.where(rng.random(n) < 0.1, -1, np.arange(n)),
             created_ms=rng.integers(0, 60, n) * DAY, has_tag=rng.random(n) < 0.7,
             p=rng.choice([-0.9, -0.5, 0.0, 0.3, 0.8], n).astype(f32) + (rng.random(n) * 0.1).astype(f32),
             a=rng.choice([0.1, 0.5, 0.50000001, 0.9], n).astype(f32), curator_weight=np.ones(n, f32),
             arousal_bias=rng.random(n) < 0.4, category=rng.integers(0, 3, n).astype(np.int8),
             outcome=rng.choice([-0.4, 0.0, 0.2], n).astype(f32), raw_outcome=rng.choice([-0.3, 0.0, 0.5, 0.3], n).astype(f32),
             has_outcome=rng.random(n) < 0.8,
             confidence=rng.choice([0.0, 0.05, 0.3, 0.299999, 0.5, 0.7, 0.95, 1.0], n).astype(f32),
             scope=rng.integers(-1, 2, n).astype(np.int32), topic=rng.integers(0, 3, n).astype(np.int32),
             consolidated=rng.random(n) < 0.2, salience=rng.choice([0.1, 0.3, 0.5], n).astype(f32),
             access_count=rng.choice([0, 0, 1, 3, 17, 250], n).astype(np.int32))
    c["p"][rng.random(n) < 0.15] = 0.0
    for k in "pa":   # tiny values: sums of float32s that a float64 no longer holds exactly (order matters)
        tiny = rng.random(n) < 0.2
        c[k][tiny] = (rng.standard_normal(int(tiny.sum())) * 10.0 ** rng.integers(-30, -8, int(tiny.sum()))).astype(f32)
    c["topic"][rng.random(n) < 0.1] = rng.choice(np.array([-2**31, -1, 2**31 - 1], np.int32), 1)
    count = rng.integers(0, cap + 1, n_golems)
    golems = np.sort(rng.permutation(n_golems)[:int(rng.integers(1, n_golems + 1))]).astype(np.int64)
    return c, count, golems


def _balance_reference(golems, cap, live, last_ms, c, calm, cu, high, validation, contradiction, tolerance=0.1):
    """Curator steps 1 and 2 from the spec's formulas: `emotional_balance` and `curator_weights`
    (SPEC §7.1, checked by hand in test_balance_reference_by_hand) over each Golem's entries since
    its last pass, then, when calm, each arousal-biased insight with a counterfactual: agreed when
    |biased - unbiased| <= tolerance, confidence +validation / -contradiction (SPEC §3.4), clamped
    to [0, 1]."""
    from golem.curator import curator_weights, emotional_balance
    n = golems.size
    slots = golems[:, None] * cap + np.arange(cap)

    def rows(k):
        return c[k].reshape(-1, cap)[golems]
    recent = live & (rows("created_ms") > last_ms[golems][:, None])
    n_recent = recent.sum(axis=1)
    ri = np.nonzero(recent)[0]
    tag = rows("has_tag")[recent]
    p, a = rows("p")[recent].astype(np.float64), rows("a")[recent].astype(np.float64)
    pt, at = p[tag], a[tag]
    bounds = np.concatenate([[0], np.cumsum(np.bincount(ri[tag], minlength=n))]).tolist()
    vc, ac, mean_v, mean_a = np.array([
        (*emotional_balance(pt[lo:hi].tolist(), at[lo:hi].tolist(), k, cu["valence_gain"], cu["arousal_floor"],
                            cu["arousal_gain"]),
         float(pt[lo:hi].sum()) / max(k, 1), float(at[lo:hi].sum()) / max(k, 1))
        for lo, hi, k in zip(bounds[:-1], bounds[1:], n_recent.tolist())]).reshape(n, 4).T
    n_rew = np.zeros(n, dtype=np.int64)
    if cu["balance"]:
        w = curator_weights(p, a, tag, mean_v[ri], vc[ri], ac[ri], cu["minority_threshold"], high)
        c["curator_weight"][slots[recent]] = w
        n_rew = np.bincount(ri[w != 1.0], minlength=n)
    biased = live & calm[:, None] & rows("arousal_bias") & (rows("category") == gm.CATEGORIES.index("insight"))
    c["arousal_bias"][slots[biased]] = False
    rerun = biased & rows("has_outcome")
    b = slots[rerun]
    agree = np.abs(c["outcome"][b].astype(np.float64) - c["raw_outcome"][b].astype(np.float64)) <= tolerance
    conf = c["confidence"][b].astype(np.float64)
    c["confidence"][b] = np.minimum(1.0, np.maximum(0.0, np.where(agree, conf + validation, conf - contradiction)))
    n_contra = np.bincount(np.nonzero(rerun)[0][~agree], minlength=n)
    c["outcome"][b] = c["raw_outcome"][b]
    return (np.stack([vc, ac, mean_v, mean_a], axis=1),
            np.stack([n_recent, np.bincount(ri[tag], minlength=n), n_rew, rerun.sum(axis=1), n_contra], axis=1))


def test_balance_reference_by_hand():
    """The reference above against numbers worked out from SPEC §7.1-2 (one Golem, five entries
    since the last pass, one untagged): mean valence (-0.8 - 0.6 - 0.7 + 0.4) / 5 = -0.34 (|.| < 0.5:
    no minority weights), mean arousal (0.9 + 0.8 + 0.6 + 0.2) / 5 = 0.5, valence correction
    0.136, arousal correction -(0.5 - 0.3) * 0.3 = -0.06: the three entries with A > 0.5 weigh
    0.94. Calm: insight 0 (biased -0.8, unbiased -0.6: 0.2 off) loses 0.2, insight 1 (0.05 off)
    gains 0.1; the episode keeps its flag."""
    insight = gm.CATEGORIES.index("insight")
    c = dict(created_ms=np.full(6, 5 * DAY), has_tag=np.array([1, 1, 1, 1, 0, 1], bool),
             p=np.array([-0.8, -0.6, -0.7, 0.4, 0.9, 0.3], np.float32), a=np.array([0.9, 0.8, 0.6, 0.2, 0.9, 0.1], np.float32),
             curator_weight=np.ones(6, np.float32), arousal_bias=np.array([1, 1, 1, 0, 0, 0], bool),
             category=np.array([insight, insight, 0, 0, 0, 0], np.int8), has_outcome=np.ones(6, bool),
             outcome=np.array([-0.8, 0.35, -0.5, 0, 0, 0], np.float32), raw_outcome=np.array([-0.6, 0.3, 0.5, 0, 0, 0], np.float32),
             confidence=np.full(6, 0.5, np.float32))
    c["created_ms"][5] = 0                                # before the last pass: not in the balance
    live = np.ones((1, 6), bool)
    cu = dict(balance=True, valence_gain=0.4, arousal_floor=0.3, arousal_gain=0.3, minority_threshold=0.5)
    fig, cnt = _balance_reference(np.array([0]), 6, live, np.array([DAY]), c, np.array([True]), cu, 0.5, 0.1, 0.2)
    assert fig[0].tolist() == pytest.approx([0.136, -0.06, -0.34, 0.5])
    assert cnt[0].tolist() == [5, 4, 3, 2, 1]
    assert c["curator_weight"].tolist() == pytest.approx([0.94, 0.94, 0.94, 1.0, 1.0, 1.0])
    assert c["confidence"].tolist() == pytest.approx([0.3, 0.6, 0.5, 0.5, 0.5, 0.5])
    assert c["outcome"][:3].tolist() == pytest.approx([-0.6, 0.3, -0.5]) and c["arousal_bias"].tolist() == [0, 0, 1, 0, 0, 0]


def test_tiers_reference_by_hand():
    """`_tiers_reference` on the hand-worked slab of test_promotion_and_demotion_windows_by_hand."""
    class_days = np.array([1.0, 7.0, 14.0, np.inf])
    c = dict(salience=np.array([0.35, 0.2, 0.75], np.float32), decay_class=np.array([gm.REGIME, gm.REGIME, gm.TACTICAL], np.int8),
             flashbulb=np.zeros(3, bool), curator_weight=np.ones(3, np.float32),
             importance=np.array([0.1, 1.0, 0.1], np.float32), confidence=np.array([0.5, 0.9, 0.5], np.float32),
             window_ms=np.array([18.9, 16.8, 52.5]) * DAY, ttl_days=np.array([7, 0, 30], np.float32),
             last_access_ms=np.array([0, 0, 0]), status=np.zeros(3, np.int8))
    up, down, arch = _tiers_reference(np.array([0]), 3, np.ones((1, 3), bool), c, 19 * DAY, 0.6, 0.2, class_days)
    assert (up.tolist(), down.tolist(), arch.tolist()) == ([0], [1], [1])   # the second is regime already
    assert c["window_ms"][0] / DAY == pytest.approx(7 * 1.35, rel=1e-6)      # 9.45 d; 19 d >= twice it: archived
    assert c["status"].tolist() == [gm.ARCHIVED, 0, 0] and c["decay_class"].tolist() == [gm.TACTICAL, gm.REGIME, gm.TACTICAL]


def test_tiers_reference_windows_hold_the_tier_ttl_by_hand():
    """The reference's (and the kernel's) window after a change of class, worked by hand from SPEC
    §3.2: max(new class days, tier TTL) x (1 + s). Score 0.1 x 0.5 x 1.5 = 0.075 <= 0.2: regime ->
    tactical, TTL 30, s 0.5: 30 x 1.5 = 45 days (the class alone would give 7 x 1.5 = 10.5); score
    1.0 x 0.9 x 1.4 = 1.26 >= 0.6: ephemeral -> tactical, TTL 14, s 0.4: 14 x 1.4 = 19.6 days (not 9.8).
    Neither is archived at 19 days."""
    class_days = np.array([1.0, 7.0, 14.0, np.inf])

    def slab():
        return dict(salience=np.array([0.5, 0.4], np.float32), decay_class=np.array([gm.REGIME, gm.EPHEMERAL], np.int8),
                    flashbulb=np.zeros(2, bool), curator_weight=np.ones(2, np.float32),
                    importance=np.array([0.1, 1.0], np.float32), confidence=np.array([0.5, 0.9], np.float32),
                    window_ms=np.array([2.0, 2.0]) * DAY, ttl_days=np.array([30, 14], np.float32),
                    last_access_ms=np.array([0, 0], np.int64), status=np.zeros(2, np.int8))
    live = np.ones((1, 2), bool)
    ref = slab()
    counts = _tiers_reference(np.array([0]), 2, live, ref, 19 * DAY, 0.6, 0.2, class_days)
    k = slab()
    got = _pass_tiers(np.array([0]), 2, live, k, 19 * DAY, 0.6, 0.2, class_days)
    for c, (up, down, arch) in ((ref, counts), (k, got)):
        assert (up.tolist(), down.tolist(), arch.tolist()) == ([1], [1], [0])
        assert c["decay_class"].tolist() == [gm.TACTICAL, gm.TACTICAL] and c["status"].tolist() == [0, 0]
        assert (c["window_ms"] / DAY).tolist() == pytest.approx([45.0, 19.6], rel=1e-6)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**31), st.integers(1, 5), st.integers(1, 160), st.booleans(), st.sampled_from([0.0, 0.2, 0.5]))
def test_balance_kernel_matches_the_spec_reference(seed, n_golems, cap, balance, minority):
    from golem.grimoire import _live_rows
    rng = np.random.default_rng(seed)
    c, count, golems = _slabs(rng, n_golems, cap)
    live = _live_rows(golems, cap, count, c["id"])
    assert live.tolist() == ((np.arange(cap) < count[golems][:, None]) & (c["id"].reshape(-1, cap)[golems] >= 0)).tolist()
    last_ms = rng.integers(-1, 40, n_golems) * DAY
    calm = rng.random(golems.size) < 0.6
    cu = dict(balance=balance, valence_gain=0.4, arousal_floor=0.3, arousal_gain=0.3, minority_threshold=minority)
    want = {k: v.copy() for k, v in c.items()}
    fig, cnt = _pass_balance(golems, cap, live, last_ms, c, calm, balance, minority)
    ref_fig, ref_cnt = _balance_reference(golems, cap, live, last_ms, want, calm, cu, 0.5, 0.1, 0.2)
    assert np.array_equal(fig, ref_fig) and np.array_equal(np.signbit(fig), np.signbit(ref_fig))
    assert cnt.tolist() == ref_cnt.tolist()
    for k in c:
        assert np.array_equal(c[k], want[k]), k


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**31), st.integers(1, 5), st.integers(1, 120), st.sampled_from([0.3, 0.6]))
def test_one_pass_is_the_balance_then_the_tiers(seed, n_golems, cap, promote):
    """Steps 1 to 3 a slab at a time give what the balance's reference over all slabs and then the
    tiers' reference give: the tiers score with the weights and confidences the balance wrote
    (weights of 0.5 to 1.5 and confidences moved by 0.1 / 0.2 cross the thresholds here)."""
    from golem.grimoire import _live_rows
    rng = np.random.default_rng(seed)
    c, count, golems = _slabs(rng, n_golems, cap)
    n = n_golems * cap
    c.update(decay_class=rng.integers(0, 4, n).astype(np.int8), flashbulb=rng.random(n) < 0.1,
             importance=rng.choice([0.4, 0.8, 1.0], n).astype(np.float32),
             window_ms=rng.choice([3.0, 7.0, 14.0], n) * DAY * (1 + rng.random(n)),
             ttl_days=rng.choice([0.0, 7.0, 30.0], n).astype(np.float32),
             last_access_ms=rng.integers(0, 60, n) * DAY, status=rng.integers(0, 4, n).astype(np.int8))
    live = _live_rows(golems, cap, count, c["id"])
    last_ms = rng.integers(-1, 40, n_golems) * DAY
    calm = rng.random(golems.size) < 0.6
    class_days = np.array([3.0, 7.0, 14.0, np.inf])
    want = {k: v.copy() for k, v in c.items()}
    fig, cnt = curate_slabs(golems, cap, live, last_ms, c["created_ms"], c["has_tag"], c["p"], c["a"],
                            c["curator_weight"], c["arousal_bias"], c["category"], c["outcome"], c["raw_outcome"],
                            c["has_outcome"], c["confidence"], calm, True, 0.4, 0.3, 0.3, 0.2, 0.5,
                            gm.CATEGORIES.index("insight"), 0.1, 0.2, 0.1, c["salience"], c["decay_class"],
                            c["flashbulb"], c["importance"], c["window_ms"], c["ttl_days"], c["last_access_ms"],
                            c["status"], 40 * DAY, promote, 0.1, class_days, 0.7)
    ref_fig, ref_cnt = _balance_reference(golems, cap, live, last_ms, want,
                                          calm, dict(balance=True, valence_gain=0.4, arousal_floor=0.3,
                                                     arousal_gain=0.3, minority_threshold=0.2), 0.5, 0.1, 0.2)
    ref_tiers = _tiers_reference(golems, cap, live, want, 40 * DAY, promote, 0.1, class_days)
    assert np.array_equal(fig, ref_fig) and cnt[:, :5].tolist() == ref_cnt.tolist()
    assert cnt[:, 5:].T.tolist() == [t.tolist() for t in ref_tiers]
    for k in c:
        assert np.array_equal(c[k], want[k]), k


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**31), st.integers(1, 5), st.integers(1, 120), st.integers(1, 4))
def test_lesson_groups_are_the_consolidation_groups_with_their_anchors(seed, n_golems, cap, min_entries):
    from golem.curator import lesson_groups
    from golem.grimoire import _live_rows as live_slots
    rng = np.random.default_rng(seed)
    c, count, golems = _slabs(rng, n_golems, cap)
    c["category"][rng.random(c["category"].size) < 0.5] = gm.CATEGORIES.index("episode")
    live = live_slots(golems, cap, count, c["id"])
    now, age = 60 * DAY, 30.0
    rows = {k: c[k].reshape(-1, cap)[golems] for k in c}
    slots = golems[:, None] * cap + np.arange(cap)
    owner = np.repeat(np.arange(golems.size), cap)
    groups = consolidation_groups(rows["scope"].ravel(), rows["topic"].ravel(), rows["created_ms"].ravel(),
                                  rows["consolidated"].ravel(), np.where(live, rows["category"], -1).ravel(), now,
                                  min_entries, age, owner)
    want_members = [slots.ravel()[g] for g in groups]
    want_anchor = [m[np.lexsort((m, -c["salience"][m]))[0]] for m in want_members]
    consolidated = c["consolidated"].copy()
    for m in want_members:
        consolidated[m] = True
    grp_row, anchors, starts, members = lesson_groups(
        golems, cap, live, c["scope"], c["topic"], c["created_ms"], c["consolidated"], c["category"], c["salience"],
        now, min_entries, age * DAY, gm.CATEGORIES.index("episode"))
    assert grp_row.tolist() == [int(owner[g[0]]) for g in groups]
    assert anchors.tolist() == [int(a) for a in want_anchor]
    assert [members[a:b].tolist() for a, b in zip(starts[:-1], starts[1:])] == [m.tolist() for m in want_members]
    assert np.array_equal(c["consolidated"], consolidated)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**31), st.integers(1, 5), st.integers(1, 120), st.sampled_from([0.3, 0.7]))
def test_heat_and_flags_match_the_numpy_expressions(seed, n_golems, cap, low):
    """Also with slabs accessed past the log1p table (one of four entries, then the table grown
    from log1p(0..3)): the same heat as numpy's."""
    from golem import curator
    from golem.grimoire import _live_rows as live_slots
    rng = np.random.default_rng(seed)
    c, count, golems = _slabs(rng, n_golems, cap)
    live = live_slots(golems, cap, count, c["id"])
    n = c["id"].size
    many = rng.random(n) < 0.05
    c["access_count"][many] = rng.choice([4, 5, 300, 70_000], n)[many]
    heat_col, low_conf = rng.random(n).astype(np.float32), rng.random(n) < 0.5
    want_heat, want_low = heat_col.copy(), low_conf.copy()
    acc = c["access_count"].reshape(-1, cap)[golems]
    h, v = want_heat.reshape(-1, cap), want_low.reshape(-1, cap)
    h[golems] = np.where(live, heat(np.where(live, acc, 0).astype(np.float64)), h[golems])
    flag = live & (c["confidence"].reshape(-1, cap)[golems] < low) & (acc >= 3)
    v[golems] = np.where(live, flag, v[golems])
    with mock.patch.object(curator, "_LOG1P", [np.log1p(np.arange(4.0))]):
        n_low = curator.heat_and_flags(golems, cap, live, c["access_count"], c["confidence"], heat_col, low_conf, low,
                                       3, int(count[golems].sum()))
    assert n_low.tolist() == flag.sum(axis=1).tolist()
    assert np.array_equal(heat_col, want_heat) and np.array_equal(low_conf, want_low)


def test_lessons_of_several_golems_and_a_refused_write():
    """Three Golems due at once: 0 has room for its two lessons, 1's slab is full of protected
    episodes (its lesson is refused: no ids, no links, its episodes still consolidated), 2 has one
    group. Ids come in Golem order, each lesson linked to its own group's members."""
    from golem.curator import passes
    gr = gm.Grimoire(3, 8, 4)
    old = dict(topic=np.int32(7), scope=np.int32(0), window_ms=np.inf, decay_class=gm.REGIME, created_ms=0)
    gr.insert(np.zeros(3, np.int64), np.ones((3, 4)), dict(old, salience=np.float32(0.3)))
    gr.insert(np.zeros(3, np.int64), np.ones((3, 4)), dict(old, salience=np.float32(0.3), topic=np.int32(8)))
    gr.insert(np.ones(8, np.int64), np.ones((8, 4)), dict(old, salience=np.float32(0.75)))   # full, all protected
    gr.insert(np.full(3, 2), np.ones((3, 4)), dict(old, salience=np.array([0.2, 0.5, 0.5], np.float32),
                                                   p=np.array([0.1, 0.2, 0.3], np.float32), has_tag=True))
    m = _Mind(gr, _cfg())
    out = passes(m, np.array([0, 1, 2]), 40 * DAY)
    ids = [row["lessons"] for row in out]
    assert [len(x) for x in ids] == [2, 0, 1] and ids[0][0] < ids[0][1] < ids[2][0]
    assert gr.links[ids[0][0]] == (0, 1, 2) and gr.links[ids[0][1]] == (3, 4, 5)
    assert gr.links[ids[2][0]] == tuple(gr.cols["id"][16:19].tolist())
    assert gr.cols["consolidated"][8:16].all()                     # refused, yet consolidated
    assert gr.cols["p"][gr.slot_of(ids[2][0])] == np.float32(0.2)   # framed on the first of the most salient


def _reference_select_replay(gr, golems, now_ms, budget, half_life_days, boost, score_of=None):
    """NREM selection from the scalar formula (the reference of `dreams.select_replay`): the
    charge at now (`pad.emotional_intensity_at`, 0 untagged) x importance, or `score_of[slot]`,
    over the live slots, the first `budget` by (-score, slot), -1 after the live ones."""
    c = gr.cols
    slots = golems[:, None] * gr.capacity + np.arange(gr.capacity)
    live = gr.live_rows(golems) & (c["status"][slots] != gm.ARCHIVED)
    scores = np.zeros(slots.shape)
    for (i, j), s in np.ndenumerate(slots):
        lr = int(c["last_react_ms"][s])
        charge = emotional_intensity_at(float(c["i0"][s]), int(c["created_ms"][s]), now_ms, bool(c["reactivated"][s]),
                                        lr if lr >= 0 else None, half_life_days, boost) if c["has_tag"][s] else 0.0
        scores[i, j] = charge * float(c["importance"][s]) if score_of is None else score_of[s]
    key = np.where(live, -scores, np.inf)
    order = np.lexsort((np.broadcast_to(np.arange(gr.capacity), key.shape), key), axis=1)[:, :min(budget, gr.capacity)]
    return np.where(np.take_along_axis(live, order, axis=1), np.take_along_axis(slots, order, axis=1), -1)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 5), st.integers(1, 40), st.integers(0, 50))
def test_replay_selection_is_the_numpy_ranking(seed, golems, cap, budget):
    """NREM's one-pass selection = the scalar formula's ranking: the same slots in the same order, ties
    (equal scores, the untagged entries' zeros) in slot order, archived, removed and empty slots
    never chosen, charges faded over days and lifted by reactivations, budgets past the slab; and
    the same ranking by a given score (somatic_hdc's)."""
    rng = np.random.default_rng(seed)
    gr = gm.Grimoire(golems + 1, cap, 4)
    c = gr.cols
    n = gr.n_golems * cap
    gr.count[:] = rng.integers(0, cap + 1, gr.n_golems)
    c["id"][:] = np.where(rng.uniform(size=n) < 0.1, -1, np.arange(n))
    c["status"][:] = np.where(rng.uniform(size=n) < 0.1, gm.ARCHIVED, 0)
    c["has_tag"][:] = rng.uniform(size=n) < 0.6
    c["i0"][:] = rng.choice([0.2, 0.5, 0.9, 1.0], n).astype(np.float32)
    now = 40 * DAY
    c["created_ms"][:] = now - rng.choice([0, DAY, 7 * DAY // 3, int(rng.integers(0, 30 * DAY))], n)
    c["reactivated"][:] = rng.uniform(size=n) < 0.3
    c["last_react_ms"][:] = np.where(rng.uniform(size=n) < 0.2, -1, now - rng.integers(0, 5 * DAY, n))
    c["importance"][:] = rng.choice([0.0, 0.25, 0.5, 1.0], n).astype(np.float32)
    picked = rng.permutation(gr.n_golems)[:golems].astype(np.int64)
    got = dreams.select_replay(gr, picked, now, budget, 3.0, 0.3)
    want = _reference_select_replay(gr, picked, now, budget, 3.0, 0.3)
    np.testing.assert_array_equal(got, want)
    # by another score (somatic_hdc's similarity to a prototype), ties included
    score_of = rng.choice([0.0, 0.25, 0.5, 0.75], n)
    got = dreams.select_replay(gr, picked, now, budget, score_fn=lambda slots: score_of[slots])
    np.testing.assert_array_equal(got, _reference_select_replay(gr, picked, now, budget, 3.0, 0.3, score_of))


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_the_replay_charge_is_the_scalar_formulas_bits(seed):
    """The charge NREM ranks by and a served entry's emotional factor fades with (`kernels.charge_at`)
    = `pad.emotional_intensity_at` byte for byte (libm's pow, which numpy's SIMD pow is not), on
    ages and reactivations of up to 60 days, with and without one."""
    rng = np.random.default_rng(seed)
    now = 61 * DAY
    for _ in range(200):
        i0 = float(np.float32(rng.uniform(0, 1)))
        created = now - int(rng.integers(0, 60 * DAY))
        lr = int(rng.choice([-1, now - int(rng.integers(0, 60 * DAY))]))
        react = bool(rng.integers(0, 2))
        hl, boost = float(rng.choice([3.0, 0.5, 7.25])), float(rng.choice([0.3, 0.0, 1.0]))
        got = charge_at(np.float32(i0), np.int64(created), react, np.int64(lr), np.int64(now), hl * DAY, boost, 2.0)
        want = emotional_intensity_at(i0, created, now, react, lr if lr >= 0 else None, hl, boost)
        assert np.float64(got).tobytes() == np.float64(want).tobytes()


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31), st.integers(2, 9), st.integers(1, 160))
def test_curator_kernels_give_the_same_bits_on_one_thread_and_all(seed, n_golems, cap):
    """Balance, heat and flags run a Golem per thread; the figures and columns they leave are the
    same bytes with numba on one thread as on all of them."""
    import numba
    from golem.curator import heat_and_flags
    from golem.grimoire import _live_rows
    results = []
    for threads in (1, numba.config.NUMBA_NUM_THREADS):
        rng = np.random.default_rng(seed)
        c, count, golems = _slabs(rng, n_golems, cap)
        live = _live_rows(golems, cap, count, c["id"])
        calm = rng.random(golems.size) < 0.6
        last_ms = rng.integers(-1, 40, n_golems) * DAY
        heat_col, low_conf = np.zeros(c["id"].size, np.float32), np.zeros(c["id"].size, bool)
        before = numba.get_num_threads()
        numba.set_num_threads(threads)
        try:
            fig, cnt = _pass_balance(golems, cap, live, last_ms, c, calm, True, 0.2)
            # work past the threshold: the compile over numba's threads, at each thread count
            n_low = heat_and_flags(golems, cap, live, c["access_count"], c["confidence"], heat_col, low_conf, 0.3, 3,
                                   kernels.PARALLEL_MIN_WORK)
        finally:
            numba.set_num_threads(before)
        results.append([fig.tobytes(), cnt.tobytes(), n_low.tobytes(), heat_col.tobytes(), low_conf.tobytes()]
                       + [c[k].tobytes() for k in sorted(c)])
    assert results[0] == results[1]


def test_a_ticks_entries_come_in_id_order_with_lessons_numbered_before_its_writes():
    """A dreamer's curator pass writes its lessons before the tick's own writes are numbered, but
    they reach the tick's output last (`pending_entries`): the tick hands its entries on in id
    order, so that the recorder finds each part already sorted."""
    from golem.heartbeat import TickOutput
    from minds import mind

    def rows(ids, name):
        ids = np.asarray(ids, dtype=np.int64)
        return dict(id=ids, topic=np.full(ids.size, 7), topic_name=np.full(ids.size, name, dtype=object))
    m = mind()
    out = TickOutput()
    out.entries = [rows([10, 11, 12], "ETH/trade"), rows([13], "ETH/insight")]
    m.pending_entries = [rows([5, 6], "ETH/lesson"), rows([20], "ETH/lesson")]
    got = m._finish(out)
    assert [c["id"].tolist() for c in got.entries] == [[5, 6], [10, 11, 12], [13], [20]]
    assert m.pending_entries == []
    assert m.topic_name(7) == "ETH/trade"      # the first name a code was seen with in the tick's order
