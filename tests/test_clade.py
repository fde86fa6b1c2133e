"""The Clade: latency, contagion, inherited knowledge, the dead receive nothing."""
from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from conftest import events, payloads, run_scenario, table
from golem import clade
from golem import grimoire as gm
from golem.pad import apply_contagion, arousal_encoding_factor
from golem.rng import uniform

H = 3_600_000


def _contagion(run):
    ev = events(run.run_dir, "contagion")
    return ev, payloads(ev)


def test_contagion_moves_p_and_a_by_exactly_0_3_of_the_tag_and_never_d(panic_run):
    ev, ps = _contagion(panic_run)
    assert ev.height > 0
    for p in ps:
        want = apply_contagion(tuple(p["pad_before"]), tuple(p["tag"]), 0.3)
        assert p["pad_after"] == pytest.approx(list(want), abs=1e-12)
        assert p["pad_after"][2] == p["pad_before"][2]
        assert p["pad_after"][1] == pytest.approx(min(1.0, max(-1.0, p["pad_before"][1] + 0.3 * p["tag"][1])), abs=1e-12)


def test_delivery_after_latency_to_siblings_only(panic_run):
    ev, ps = _contagion(panic_run)
    assert (ev["golem_id"] != ev["other_golem"]).all()                 # the sender is never a receiver
    pop = panic_run.world.pop
    assert (pop.clade[ev["golem_id"].to_numpy()] == pop.clade[ev["other_golem"].to_numpy()]).all()
    sent = events(panic_run.run_dir).filter(pl.col("kind").is_in(["flashbulb"]))
    sent_entries = table(panic_run.run_dir, "entries").filter(pl.col("provenance") == -1).select("id", "created_ms", "golem_id")
    created = dict(zip(sent_entries["id"], sent_entries["created_ms"]))
    lat = {0: (2000, 1000), 1: (30000, 5000)}
    for t, g, p in zip(ev["time_ms"], ev["clade_id"], ps):
        base, jit = lat[g]
        assert base <= p["latency_ms"] <= base + jit                  # never instant, within the jitter
        assert t == created[p["sender_entry"]] + p["latency_ms"]      # delivered at send time + latency
    assert sent.height > 0
    # each (receiver, entry) pair's own counter-based jitter draw, however the pushes were batched
    world = panic_run.world
    u = uniform(world.seed, ev["golem_id"].to_numpy(), np.array([p["sender_entry"] for p in ps]), 11)
    base_s, jit_s = np.array([world.latency[g] for g in ev["clade_id"]]).T
    assert [p["latency_ms"] for p in ps] == np.rint(np.maximum(base_s + jit_s * u, 0.001) * 1000).astype(int).tolist()
    assert len(set(u.tolist())) > 10


def test_siblings_feel_the_exploit_before_their_probes_fire(panic_run):
    h = table(panic_run.run_dir, "heartbeats").filter((pl.col("clade_id") == 0) & (pl.col("golem_id") > 0))
    ev, ps = _contagion(panic_run)
    for g in range(1, 5):
        mine = h.filter(pl.col("golem_id") == g)
        probe_t = mine.filter(pl.col("probe") != "none")["time_ms"].min()
        warn = ev.filter((pl.col("golem_id") == g) & (pl.col("other_golem") == 0) & (pl.col("time_ms") >= 18 * H))
        assert warn.height > 0 and warn["time_ms"].min() < probe_t
        before = mine.filter(pl.col("time_ms") < 18 * H)["a"].tail(6).mean()
        between = mine.filter((pl.col("time_ms") > warn["time_ms"].min()) & (pl.col("time_ms") < probe_t))["a"].mean()
        assert between > before + 0.2


def test_inherited_copies_carry_provenance_and_inherited_confidence(panic_run):
    ev, ps = _contagion(panic_run)
    e = table(panic_run.run_dir, "entries")
    inh = e.filter(pl.col("provenance") >= 0)
    assert inh.height == sum(p["stored"] for p in ps)
    by_id = {p_ev: p for p_ev, p in zip(ev["entry_id"], ps)}
    for row in inh.iter_rows(named=True):
        p = by_id[row["id"]]
        assert row["confidence"] == pytest.approx(0.6 * arousal_encoding_factor(p["pad_before"][1]), abs=1e-6)
        src = e.filter(pl.col("id") == p["sender_entry"]).row(0, named=True)
        assert row["provenance"] == src["golem_id"]
        assert (row["p"], row["a"], row["d"]) == pytest.approx((src["p"], src["a"], src["d"]))


def test_signal_types():
    assert clade.signal_type("flashbulb", "episode", -0.5) == "THREAT"
    assert clade.signal_type("flashbulb", "episode", 0.5) == "OPPORTUNITY"
    assert clade.signal_type("warning", "warning", 0.2) == "THREAT"
    assert clade.signal_type("death_reflection", "death_reflection", -0.9) == "WISDOM"


def test_pushes_are_flashbulbs_warnings_and_death_reflections(panic_run, bleed_run):
    kinds = {p["alert_type"] for p in _contagion(panic_run)[1]} | {p["alert_type"] for p in _contagion(bleed_run)[1]}
    assert {"flashbulb", "death_reflection"} <= kinds <= {"flashbulb", "warning", "death_reflection"}
    wisdom = [p for p in _contagion(bleed_run)[1] if p["alert_type"] == "death_reflection"]
    assert wisdom and all(p["signal"] == "WISDOM" for p in wisdom)


def test_the_dead_receive_nothing(bleed_run):
    deaths = events(bleed_run.run_dir, "death")
    ev, _ = _contagion(bleed_run)
    for g, t in deaths.select("golem_id", "time_ms").iter_rows():
        assert ev.filter((pl.col("golem_id") == g) & (pl.col("time_ms") > t)).height == 0


def test_no_contagion_without_the_clade(tmp_path):
    r = run_scenario("clade_panic", tmp_path / "off", sets=["clade.enabled=false", "duration=1d"])
    assert events(r.run_dir, "contagion").height == 0
    assert table(r.run_dir, "entries").filter(pl.col("provenance") >= 0).height == 0


def test_clades_of_different_sizes_and_networks(panic_run):
    pop = panic_run.world.pop
    assert pop.clade_names == ("sentinels", "watchers")
    assert np.bincount(pop.clade).tolist() == [5, 3]
    assert panic_run.world.latency == {0: (2.0, 1.0), 1: (30.0, 5.0)}


def test_contagion_payloads_are_the_json_of_their_fields(panic_run):
    """The payload text is assembled column-wise; it must be exactly what json writes for the
    same dict (sorted keys, Python float repr), and agree with the row's own columns."""
    import json
    encode = json.JSONEncoder(sort_keys=True, default=float).encode
    ev, ps = _contagion(panic_run)
    assert ev.height > 100
    for text, p, value, other in zip(ev["payload"], ps, ev["value"], ev["other_golem"]):
        assert encode(p) == text
        assert set(p) == {"alert_type", "signal", "latency_ms", "sender_entry", "pad_before", "pad_after", "tag",
                          "inherited_confidence", "stored"}
        assert value == p["pad_after"][1] - p["pad_before"][1]
        assert p["signal"] in clade.SIGNALS and isinstance(p["stored"], bool) and p["latency_ms"] > 0


WAVE = """
name: wave
duration: 20h
seed: 4
overrides:
  grimoire.capacity: 12
market:
  events:
    - {kind: exploit, at: 14h, asset: BTC, duration: 1h, severity: high, impact: -0.05}
clades:
  - {name: a}
  - {name: b}
  - {name: c, jitter: 1.5s}
golems:
  - {count: 9, clade: a, asset: BTC, strategy: momentum, prefill: 12}
  - {count: 7, clade: b, asset: BTC, strategy: mean_reversion, prefill: 6}
  - {count: 8, clade: c, asset: BTC, strategy: momentum, prefill: 12}
"""


def test_a_run_not_recorded_stores_and_numbers_the_copies_as_a_recorded_one(tmp_path):
    """Unrecorded, a push wave's copies are numbered in place (their slots are not kept, the two
    jitter-free Clades share one receiver array each): the Grimoires end as the recorded run's,
    column by column, ids included, with copies refused, more copies than slots in an instant
    and two Clades in one instant (a copy evicting one of its instant: the test after this)."""
    from sim.run import execute
    (tmp_path / "wave.yaml").write_text(WAVE)
    worlds = [execute(tmp_path / "wave.yaml", tmp_path / f"r{int(r)}", environ={}, record=r).world for r in (True, False)]
    a, b = (w.gr for w in worlds)
    assert worlds[0].stats.deliveries == worlds[1].stats.deliveries > 100
    ev = events(tmp_path / "r1", "contagion")
    per_instant = ev.group_by("time_ms").agg(pl.col("clade_id").n_unique().alias("clades"), pl.len().alias("n"))
    assert per_instant["clades"].max() >= 2 and per_instant["n"].max() > 12          # Clades meet; more copies than slots
    stored = pl.Series([x["stored"] for x in payloads(ev)])
    assert stored.sum() > 100 and (~stored).sum() > 10                                  # copies kept and refused
    assert a.next_id == b.next_id and np.array_equal(a.count, b.count) and np.array_equal(a.codes, b.codes)
    for k in a.cols:
        assert np.array_equal(a.cols[k], b.cols[k], equal_nan=a.cols[k].dtype.kind == "f"), k
    assert (a.cols["id"] >= -1).all()
    assert np.array_equal(worlds[0].pop.pad, worlds[1].pop.pad)


def test_numbering_in_place_gives_the_ids_numbering_the_kept_slots_gives():
    """`_number_in_place` against `_number` by hand: parcels of two Clades interleaved, a refused
    copy (-1) and a slot stored twice in one instant (a copy evicting an earlier one: the later
    copy's id stays, and the evicted one still took its number)."""
    n_golems, cap = 3, 4
    slots_of = [np.array([0, 4]), np.array([8, -1]), np.array([1, 4]), np.array([9])]   # parcels 0, 2: Clade 0 (Golems 0, 1)
    groups = {0: [0, 2], 1: [1, 3]}                                                      # parcels 1, 3: Clade 1 (Golem 2)
    by_hand = {0: 100, 4: 104, 8: 102, 1: 103, 9: 105}   # delivery order: 0 4 | 8 | 1 4 | 9 from id 100; slot 4 keeps 104
    grs = [gm.Grimoire(n_golems, cap, 8) for _ in range(2)]
    for gr in grs:
        gr.next_id = 100
        gr.count[:] = 2
    clade._number(grs[0], slots_of)
    for members in groups.values():
        clade._mark_in_place(grs[1], [slots_of[i] for i in members])
    stored = np.array([(s >= 0).sum() for s in slots_of])
    clade._number_in_place(grs[1], groups, stored, [np.array([0, 1]), np.array([2])])
    for gr in grs:
        assert {k: gr.cols["id"][k] for k in by_hand} == by_hand and gr.next_id == 106
    assert np.array_equal(grs[0].cols["id"], grs[1].cols["id"])
