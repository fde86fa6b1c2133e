"""The Clade: latency, contagion, inherited knowledge, the dead receive nothing."""
from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from conftest import events, payloads, run_scenario, table
from golem import clade
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
