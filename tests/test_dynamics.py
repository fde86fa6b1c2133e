"""Affective memory dynamics: flashbulbs, decay and reactivation, confidence, salience
shadow rank, anti-rumination, six-factor profile, somatic markers, reflection, mortality."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import events, payloads, run_scenario, table
from golem import flashbulb, grimoire as gm, mortality
from golem.config import default_config
from golem.retrieval import RetrievalParams, retrieve

PRM = RetrievalParams.from_config(default_config())   # the engine's parameters, from the config

HERE = Path(__file__).resolve().parent
DAY = 86_400_000


def _triggers(run):
    out = set()
    for p in payloads(events(run.run_dir, "flashbulb")):
        out.update(p["triggers"])
    return out


def test_flashbulb_on_each_trigger_kind(flash_run, exploit_run, rug_run):
    seen = _triggers(flash_run) | _triggers(exploit_run) | _triggers(rug_run)
    assert seen == set(flashbulb.TRIGGERS)
    assert "new_regime" in _triggers(flash_run)        # the crash regime was never seen before
    assert "probe_high" in _triggers(exploit_run)
    assert "pnl" in _triggers(rug_run)                  # a 27 % bar on a 70 % position


def test_flashbulb_effects(exploit_run):
    run = exploit_run.run_dir
    e = table(run, "entries").filter(pl.col("flashbulb") & (pl.col("provenance") == -1))
    assert e.height > 0 and (e["decay_class"] == "structural").all()
    snaps = table(run, "snapshots")
    assert set(snaps["flashbulb_id"].unique()) == set(e["id"])
    assert snaps.group_by("flashbulb_id").len()["len"].unique().to_list() == [2]   # every asset snapshotted
    assert snaps.filter(pl.col("held")).height == e.height                        # the open position marked
    hb = table(run, "heartbeats").filter(pl.col("flashbulb"))
    assert (hb["tier"] == "T2").all()                                             # T2 reflection


def test_flashbulb_budget_and_raised_threshold(flash_run, exploit_run, rug_run, panic_run):
    n_suppressed = 0
    for run in (flash_run, exploit_run, rug_run, panic_run):
        for kind in ("flashbulb", "flashbulb_suppressed"):
            ev = events(run.run_dir, kind)
            for a, p in zip(ev["value"], payloads(ev)):
                req = flashbulb.required_arousal(p["in_window"])
                if kind == "flashbulb":
                    assert p["in_window"] <= 4                                  # a 6th in 24 h is impossible
                if kind == "flashbulb" and p["in_window"] >= 3:
                    assert a > req                                              # 4th needs A > 0.8, 5th A > 0.9
                if kind == "flashbulb_suppressed":
                    assert p["in_window"] >= 3 and a <= req
                    n_suppressed += 1
        # never more than 5 per Golem in any rolling 24 h
        fb = events(run.run_dir, "flashbulb").sort("time_ms")
        for g, grp in fb.group_by("golem_id"):
            t = np.array(grp["time_ms"])
            for i in range(t.size):
                assert ((t > t[i] - DAY) & (t <= t[i])).sum() <= 5
    assert n_suppressed > 0


def test_required_arousal_schedule():
    assert flashbulb.required_arousal(0) == 0.7 and flashbulb.required_arousal(2) == 0.7
    assert flashbulb.required_arousal(3) == pytest.approx(0.8)
    assert flashbulb.required_arousal(4) == pytest.approx(0.9)
    assert flashbulb.required_arousal(5) == pytest.approx(1.0)
    assert not flashbulb.allowed(1.0, 5, "pnl")          # clamped arousal never clears 1.0
    assert flashbulb.allowed(0.0, 2, "probe_high")       # within budget any trigger fires
    assert not flashbulb.allowed(0.8, 3, "probe_high")   # beyond it, the trigger needs A > 0.8
    assert flashbulb.allowed(0.81, 3, "probe_high")


def _one_entry_arena(i0=0.8, created=0, tag=(-0.6, 0.7, -0.4)):
    gr = gm.Grimoire(1, 4, 4)
    gr.insert(np.array([0]), np.array([[1.0, 0, 0, 0]]),
              dict(created_ms=created, last_access_ms=created, window_ms=np.inf, importance=np.float32(0.5),
                   confidence=np.float32(0.7), has_tag=True, p=tag[0], a=tag[1], d=tag[2], i0=np.float32(i0),
                   decay_class=gm.STRUCTURAL))
    return gr


def test_faded_tag_drifts_to_neutral_and_reactivation_restores_its_pull():
    gr = _one_entry_arena()
    prm = PRM
    q = np.array([[1.0, 0, 0, 0]], np.float32)
    mood = np.array([[-0.6, 0.7, -0.4]])
    emo = [retrieve(gr, np.array([0]), q, mood, t * DAY, prm).factors[0, 0, 3] for t in (0, 3, 9, 30)]
    assert emo[0] == pytest.approx(1.0)
    assert emo[0] > emo[1] > emo[2] > emo[3] > 0.5 and emo[3] == pytest.approx(0.5, abs=1e-3)
    conf_before = gr.cols["confidence"].copy()
    gr.cols["reactivated"][0] = True
    gr.cols["last_react_ms"][0] = 30 * DAY
    gr.refresh_scan([0])                              # written directly, not by a recall
    again = retrieve(gr, np.array([0]), q, mood, 30 * DAY, prm).factors[0, 0, 3]
    assert again > emo[3] + 0.15                     # 0.3 boost over i0 0.8: charge back to ~0.375
    assert np.array_equal(gr.cols["confidence"], conf_before)


def test_run_reactivates_tags(flash_run):
    """Reactivation in a run (SPEC §2.6): only served entries with cosine >= 0.8 are re-lived; the
    counts the retrievals record are the counts the entries carry (nothing is evicted here); only
    tagged entries, each at most once per recall; and not only price moves (events and flashbulbs
    are re-lived too when their moment comes; every topic: tests/test_conformance.py)."""
    r = table(flash_run.run_dir, "retrievals").with_columns(
        close=pl.col("semantic").list.eval((pl.element() >= 0.8).cast(pl.Int64)).list.sum())
    assert r["reactivated"].sum() > 0 and (r["reactivated"] <= r["close"]).all()
    gr = flash_run.world.gr
    c = gr.cols
    live = c["id"] >= 0
    assert (gr.count < gr.capacity).all()
    assert int(c["react_count"][live].sum()) == int(r["reactivated"].sum())
    re = live & (c["react_count"] > 0)
    assert c["has_tag"][re].all() and (c["react_count"][re] <= c["access_count"][re]).all()
    assert (c["last_react_ms"][re] >= c["created_ms"][re]).all() and c["reactivated"][re].all()
    from golem.memory_writer import KINDS
    kinds = {KINDS[k] for k in np.unique(c["kind"][re])}
    assert {"price-move", "event", "flashbulb"} <= kinds, kinds


def _random_arena(rng, golems, cap, n, **over):
    """An arena of n random entries (random PAD, importance, confidence, access times) for property tests."""
    gr = gm.Grimoire(golems, cap, 8)
    vals = dict(last_access_ms=rng.integers(0, DAY, n), importance=rng.random(n).astype(np.float32),
                confidence=rng.random(n).astype(np.float32), p=rng.uniform(-1, 1, n), a=rng.uniform(-1, 1, n),
                d=rng.uniform(-1, 1, n))
    vals.update(over)
    gr.insert(rng.integers(0, golems, n), rng.normal(size=(n, 8)), vals)
    return gr


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31), st.integers(1, 60))
def test_emotional_decay_never_changes_confidence_or_content(seed, days):
    rng = np.random.default_rng(seed)
    gr = _random_arena(rng, 2, 20, 30, created_ms=rng.integers(0, DAY, 30), window_ms=np.inf, has_tag=True,
                       i0=rng.random(30).astype(np.float32), decay_class=gm.STRUCTURAL)
    before = {k: gr.cols[k].copy() for k in ("confidence", "importance", "decay_class", "p", "a", "d", "i0", "outcome")}
    emb = gr.emb.copy()
    q = rng.normal(size=(2, 8)).astype(np.float32)
    retrieve(gr, np.arange(2), q, rng.uniform(-1, 1, (2, 3)), days * DAY, PRM)
    for k, v in before.items():
        assert np.array_equal(gr.cols[k], v), k
    assert np.array_equal(gr.emb, emb)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31), st.floats(0.0, 1.0))
def test_shadow_mode_never_changes_served_ids(seed, cap):
    rng = np.random.default_rng(seed)
    gr = _random_arena(rng, 3, 30, 80, created_ms=0, window_ms=30.0 * DAY, salience=rng.random(80).astype(np.float32),
                       has_tag=rng.random(80) < 0.7, i0=np.float32(0.5))
    q = rng.normal(size=(3, 8)).astype(np.float32)
    pad = rng.uniform(-1, 1, (3, 3))
    from dataclasses import replace
    plain = retrieve(gr, np.arange(3), q, pad, DAY, replace(PRM, salience_cap=0.0))
    shadow = retrieve(gr, np.arange(3), q, pad, DAY, replace(PRM, salience_cap=cap))
    assert np.array_equal(plain.slots, shadow.slots)
    live = retrieve(gr, np.arange(3), q, pad, DAY, replace(PRM, salience_cap=cap, live=True))
    assert np.array_equal(live.slots, shadow.shadow)                      # live serves the would-be ranking


def test_salience_rank_modes_on_a_run(tmp_path):
    base = ["duration=12h"]
    runs = {m: run_scenario("calm", tmp_path / m, sets=base, environ={"GOLEM_SALIENCE_RANK": m.upper()})
            for m in ("off", "shadow", "live")}
    assert runs["off"].manifest["hashes"]["heartbeats"] == runs["shadow"].manifest["hashes"]["heartbeats"]
    off, sh = (table(runs[m].run_dir, "retrievals") for m in ("off", "shadow"))
    assert off["ids"].to_list() == sh["ids"].to_list()
    assert off["salience_shadow"].null_count() == off.height and sh["salience_shadow"].null_count() == 0
    assert runs["live"].manifest["config"]["retrieval.salience_rank"] == "live"
    lv = table(runs["live"].run_dir, "retrievals").filter(~pl.col("anti_rumination"))
    assert lv["ids"].to_list() == lv["salience_shadow"].to_list()


def test_anti_rumination_fires_and_serves_a_non_negative_entry(flash_run):
    ev = events(flash_run.run_dir, "anti_rumination")
    assert ev.height > 0
    r = table(flash_run.run_dir, "retrievals").filter(pl.col("anti_rumination"))
    assert r.height == ev.height
    assert all(any(v >= 0 for v in vals) for vals in r["valences"])
    # it fires only after three retrievals each > 80 % negative
    full = table(flash_run.run_dir, "retrievals").sort(["golem_id", "tick"]).with_columns(
        neg=pl.col("valences").list.eval((pl.element() < 0).cast(pl.Float64)).list.mean())
    for g, t in r.select("golem_id", "tick").iter_rows():
        prev = full.filter((pl.col("golem_id") == g) & (pl.col("tick") < t)).tail(3)
        assert prev.height == 3 and (prev["neg"] > 0.8).all()


def test_six_factor_profile_on_the_same_tape(tmp_path):
    a = run_scenario("flash_crash", tmp_path / "four", sets=["duration=1d"])
    b = run_scenario("flash_crash", tmp_path / "six", sets=["duration=1d", "retrieval.profile=six_factor"])
    assert a.manifest["hashes"]["market"] == b.manifest["hashes"]["market"]
    ra, rb = table(a.run_dir, "retrievals"), table(b.run_dir, "retrievals")
    assert set(rb["profile"]) == {"six_factor"} and ra["ids"].to_list() != rb["ids"].to_list()
    row = rb.filter(pl.col("ids").list.len() > 0).row(100, named=True)
    assert row["scores"] == sorted(row["scores"], reverse=True)


def test_six_factor_score_by_hand():
    from golem.retrieval import retrieve_six
    gr = gm.Grimoire(1, 4, 2)
    gr.insert(np.array([0, 0]), np.array([[1.0, 0], [0.0, 1]]),
              dict(created_ms=0, last_access_ms=0, window_ms=np.array([10.0 * DAY, np.inf]),
                   confidence=np.float32(0.5), importance=np.float32(0.5), salience=np.array([0.2, 0.6], np.float32),
                   scope=np.array([0, 1], np.int32), regime=np.array([2, 2], np.int16), has_tag=False,
                   decay_class=np.array([gm.TACTICAL, gm.STRUCTURAL], np.int8)))
    gr.links[0] = (1,)
    w = (0.38, 0.18, 0.08, 0.14, 0.14, 0.08)
    res = retrieve_six(gr, np.array([0]), np.array([[1.0, 0]], np.float32), np.zeros((1, 3)), 5 * DAY,
                       PRM, w, np.array([0]), 2, [set()])
    hours = 5 * 24
    e0 = 0.38 * 1 + 0.18 * 0.5 * 2 ** -0.5 + 0.08 * 0.995**hours + 0 + 0.14 * 1.0 + 0.08 * 0.2
    e1 = 0.38 * 0 + 0.18 * 0.5 * 1.0 + 0.08 * 0.995**hours + 0.14 * 1.0 + 0.14 * 0.5 + 0.08 * 0.6
    assert res.slots[0, :2].tolist() == [0, 1]
    assert res.scores[0, :2] == pytest.approx([e0, e1], abs=1e-6)


def test_strong_negative_marker_escalates_an_all_normal_tick(tmp_path):
    res = run_scenario(HERE / "scenarios" / "two_panics.yaml", tmp_path / "r")
    h = table(res.run_dir, "heartbeats")
    assert (h["probe"] == "none").all()                    # no probe ever fires
    esc = h.filter(pl.col("marker_escalated"))
    assert esc.height > 0
    assert (esc["marker_valence"] < -0.5).all() and (esc["marker_strength"] > 3).all()
    assert (esc["tier"] != "T0").all()
    first_panic = h.filter((pl.col("time_ms") >= 10 * 3_600_000) & (pl.col("time_ms") < 10 * 3_600_000 + 1_800_000))
    assert not first_panic["marker_escalated"].any()      # nothing learned yet at the first panic's start
    assert esc["time_ms"].max() >= 30 * 3_600_000        # the second panic is recognised


def test_positive_markers_serve_the_cached_response(bull_run):
    h = table(bull_run.run_dir, "heartbeats").filter(pl.col("cache_served"))
    assert h.height > 0 and (h["marker_valence"] > 0.5).all() and (h["marker_strength"] > 3).all()
    # no escalation from the marker path (a flashbulb on the same tick still forces T2)
    assert (h.filter(~pl.col("flashbulb") & (pl.col("probe") == "none"))["tier"] == "T0").all()
    r = table(bull_run.run_dir, "retrievals").filter(pl.col("cache_served"))
    j = r.join(h.select("golem_id", "tick", "target_exposure"), on=["golem_id", "tick"])
    assert j.height == h.height


def test_reflection_under_emotional_load(flash_run, exploit_run, bleed_run):
    """SPEC §5 with §2.1: the emotional load of reflection is the mood (a dominance correction when
    the mood's D < -0.3, a backcheck when its P < -0.7); the arousal band that tags insights is the
    emotion's (§2.4)."""
    e = table(flash_run.run_dir, "entries")
    biased = e.filter(pl.col("arousal_bias"))
    assert biased.height > 0 and (biased["a"] > 0.5).all()
    n = 0
    for run in (flash_run, exploit_run, bleed_run):
        hb = table(run.run_dir, "heartbeats").select("golem_id", "time_ms", "mood_d")
        dom = table(run.run_dir, "entries").filter(pl.col("kind") == "dominance-correction").join(
            hb, left_on=["golem_id", "created_ms"], right_on=["golem_id", "time_ms"])
        assert (dom["attribution"] == "internal").all() and (dom["mood_d"] < -0.3).all()
        n += dom.height
    assert n > 0
    att = e.filter(pl.col("kind") == "price-move")
    assert set(att.filter(pl.col("d") > 0.2)["attribution"]) <= {"internal"}
    assert set(att.filter(pl.col("d") < -0.2)["attribution"]) <= {"external"}
    bc = payloads(events(bleed_run.run_dir, "backcheck"))
    assert bc and all(p["self_evaluation"] < -0.7 for p in bc)


def test_confidence_at_encoding_and_low_confidence_flags(flash_run):
    e = table(flash_run.run_dir, "entries").filter(pl.col("provenance") == -1)
    own = e.filter(pl.col("kind") == "price-move")
    want = 0.9 * np.exp(-((own["a"].to_numpy() - 0.3) ** 2) / (2 * 0.36))
    assert np.allclose(own["confidence"].to_numpy(), want, atol=1e-6)
    regret = e.filter(pl.col("kind") == "regret")
    assert np.allclose(regret["confidence"], 0.4 * np.exp(-((regret["a"].to_numpy() - 0.3) ** 2) / 0.72), atol=1e-6)
    r = table(flash_run.run_dir, "retrievals")
    assert r["low_conf_ids"].list.len().sum() > 0


def test_confidence_moves_with_outcomes_on_the_tape(flash_run):
    gr = flash_run.world.gr
    c = gr.cols
    own = (c["id"] >= 0) & (c["kind"] == 0) & (c["provenance"] < 0) & (c["access_count"] > 0)
    base = 0.9 * np.exp(-((c["a"][own].astype(float) - 0.3) ** 2) / 0.72)
    moved = np.abs(c["confidence"][own] - base) > 1e-6
    assert moved.mean() > 0.3                              # validation and contradiction happened
    assert (c["confidence"] >= 0).all() and (c["confidence"] <= 1).all()


def test_mortality_in_slow_bleed(bleed_run):
    run = bleed_run.run_dir
    deaths = events(run, "death")
    assert deaths.height >= 1 and set(deaths["golem_id"]) <= {8, 9, 10, 11}   # the dip buyers, of budget
    assert all(p["cause"] == "budget" for p in payloads(deaths))
    h = table(run, "heartbeats")
    for g, t in deaths.select("golem_id", "time_ms").iter_rows():
        mine = h.filter(pl.col("golem_id") == g)
        assert mine["time_ms"].max() == t                  # DEAD Golems tick no more
        assert mine["state_path"][-1].endswith("TERMINAL>DEAD")
        assert mine["phase"][-1] == "terminal"
    p = payloads(deaths)[0]
    assert set(p["reflection"]) == set(mortality.DEATH_CATEGORIES) and len(p["reflection"]) == 9
    assert p["heaviest"] == ["what I got wrong", "what confused me", "what I suspect but can't prove"]
    refl = table(run, "entries").filter(pl.col("category") == "death_reflection")
    assert set(refl.filter(pl.col("provenance") == -1)["id"]) == set(deaths["entry_id"])
    phases = set(h["phase"])
    assert {"thriving", "terminal"} <= phases and len(phases) >= 3


def test_mortality_phase_bands_by_hand():
    """SPEC bands: thriving > 0.7, stable > 0.4, conservation > 0.2, declining > 0.1, else
    terminal; a vitality exactly at a threshold falls into the band below."""
    cfg = default_config()
    v = np.array([1.0, 0.7000001, 0.7, 0.5, 0.4, 0.3, 0.2, 0.15, 0.1, 0.0, -0.5, np.nan])
    assert mortality.phase_of(v, cfg).tolist() == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 4, 4]



def test_every_escalated_tick_is_an_escalation_event(flash_run):
    """SPEC §13: escalations are events: one per tick above T0, with the tier the heartbeat paid
    and its reasons (a T2 is a flashbulb's forced deep reflection or a high probe)."""
    h = table(flash_run.run_dir, "heartbeats").filter(pl.col("tier") != "T0")
    ev = events(flash_run.run_dir, "escalation")
    assert h.height > 0 and ev.height == h.height
    p = payloads(ev)
    got = sorted((g, t, ("T0", "T1", "T2")[x["tier"]]) for g, t, x in zip(ev["golem_id"], ev["tick"], p))
    assert got == sorted(zip(h["golem_id"], h["tick"], h["tier"]))
    assert all(x["probe"] or x["marker"] or x["novelty"] or x["flashbulb"] for x in p)
    assert all(x["flashbulb"] or x["probe"] for x in p if x["tier"] == 2)
    assert np.allclose(ev["value"], [0.35 if x["tier"] == 2 else 0.001 for x in p])
