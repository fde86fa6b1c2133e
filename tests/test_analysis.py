"""sim.analysis on tiny hand-made tables (schema of sim.recorder.SCHEMAS) with hand-computed answers."""
from __future__ import annotations

import json
import math
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sim import analysis as A
from sim.recorder import SCHEMAS

H = 3_600_000
NAN = float("nan")


def _default(t: pa.DataType):
    if pa.types.is_list(t):
        return []
    if pa.types.is_boolean(t):
        return False
    if pa.types.is_string(t):
        return ""
    if pa.types.is_floating(t):
        return 0.0
    return 0


def write(run: Path, table: str, part: int = 0, **cols) -> None:
    """Write one part file of `table`; columns not given get a neutral default."""
    n = len(next(iter(cols.values())))
    schema = SCHEMAS[table]
    unknown = set(cols) - set(schema.names)
    assert not unknown, unknown
    arrays = [pa.array(cols.get(f.name, [_default(f.type)] * n), type=f.type) for f in schema]
    (run / table).mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_arrays(arrays, schema=schema), run / table / f"part-{part:05d}.parquet")


def retrievals(run: Path, golem, tick, mc=None, vb=None, **kw) -> None:
    """Retrieval rows whose served-minus-pool biases are mc / vb (pool means 0.5 and 0.0)."""
    n = len(tick)
    mc = mc if mc is not None else [0.0] * n
    vb = vb if vb is not None else [0.0] * n
    cols = dict(golem_id=golem, tick=tick, time_ms=[t * 300_000 for t in tick], pool_n=[5] * n,
                pool_mean_emotional=[0.5] * n, served_mean_emotional=[0.5 + x for x in mc],
                pool_mean_valence=[0.0] * n, served_mean_valence=vb, ids=[[1]] * n, salience_shadow=[[1]] * n)
    cols.update(kw)
    write(run, "retrievals", **cols)


@pytest.fixture
def run(tmp_path) -> Path:
    r = tmp_path / "r1"
    r.mkdir()
    (r / "manifest.json").write_text("{}")
    return r


def test_mood_congruence_and_valence_bias(run):
    write(run, "retrievals", golem_id=[0, 0, 0, 1], clade_id=[0, 0, 0, 1], tick=[0, 1, 2, 1],
          time_ms=[0, 300_000, 600_000, 300_000], pool_n=[0, 5, 5, 4],
          served_mean_emotional=[NAN, 0.7, 0.6, 0.4], pool_mean_emotional=[NAN, 0.5, 0.6, 0.5],
          served_mean_valence=[NAN, -0.2, 0.0, 0.3], pool_mean_valence=[NAN, 0.1, 0.0, 0.1])
    mc = A.mood_congruence(run).collect()
    assert mc.columns == ["run", "golem_id", "clade_id", "tick", "time_ms", "mood_congruence"]
    assert mc["run"].unique().to_list() == ["r1"]
    assert mc.select("golem_id", "tick").rows() == [(0, 1), (0, 2), (1, 1)]   # the empty pool is dropped
    assert mc["mood_congruence"].to_list() == pytest.approx([0.2, 0.0, -0.1])
    vb = A.retrieval_valence_bias(run).collect()
    assert vb["valence_bias"].to_list() == pytest.approx([-0.3, 0.0, 0.2])
    s = A.bias_summary(run).collect().row(0, named=True)
    assert s["retrievals"] == 3 and s["golems"] == 2
    assert s["mean_mood_congruence"] == pytest.approx(0.1 / 3)
    assert s["mean_valence_bias"] == pytest.approx(-0.1 / 3)
    assert s["lock_in_episodes"] == 0 and s["lock_in_share"] == 0


def test_bias_over_time_buckets(run):
    retrievals(run, [0, 1, 0], [0, 0, 13], mc=[0.1, 0.3, 0.5])   # ticks 0 and 13: buckets 0 h and 1 h
    b = A.bias_over_time(run, "1h").collect()
    assert b["bucket_ms"].to_list() == [0, H]
    assert b["n"].to_list() == [2, 1]
    assert b["mood_congruence_mean"].to_list() == pytest.approx([0.2, 0.5])


def test_lock_in_episodes(run):
    # tick 6 has no retrieval: the run of flagged ticks 3-5 and 7-8 must break there
    ticks = [0, 1, 2, 3, 4, 5, 7, 8, 9]
    mc = [0.5, 0.6, 0.1, 0.45, 0.5, 0.7, 0.9, 0.8, 0.2]
    # golem 1 follows golem 0 in sort order: its run must not merge with golem 0's last ticks
    retrievals(run, [0] * 9 + [1] * 3, ticks + [0, 1, 2], mc=mc + [0.5, 0.5, 0.5])
    ep = A.lock_in_episodes(run, threshold=0.4, min_ticks=2).collect()
    assert ep.select("golem_id", "start_tick", "end_tick", "length").rows() == \
        [(0, 0, 1, 2), (0, 3, 5, 3), (0, 7, 8, 2), (1, 0, 2, 3)]
    ep = ep.filter(pl.col("golem_id") == 0)
    assert ep["mean_bias"].to_list() == pytest.approx([0.55, 0.55, 0.85])
    assert ep["peak_bias"].to_list() == pytest.approx([0.6, 0.7, 0.9])
    assert ep["start_ms"].to_list() == [0, 900_000, 2_100_000]
    ep3 = A.lock_in_episodes(run, threshold=0.4, min_ticks=3).collect()
    assert ep3.select("golem_id", "start_tick", "end_tick").rows() == [(0, 3, 5), (1, 0, 2)]
    s = A.bias_summary(run, threshold=0.4, min_ticks=2).collect().row(0, named=True)
    assert (s["lock_in_episodes"], s["lock_in_ticks"], s["longest_lock_in"]) == (4, 10, 3)
    assert s["lock_in_share"] == pytest.approx(10 / 12)


def test_lock_in_below_and_abs(run):
    retrievals(run, [0] * 5, [0, 1, 2, 3, 4], vb=[-0.5, -0.6, 0.7, 0.8, -0.1])
    below = A.lock_in_episodes(run, "valence_bias", threshold=0.4, min_ticks=2, side="below").collect()
    assert below.select("start_tick", "end_tick").rows() == [(0, 1)]
    assert below["peak_bias"][0] == pytest.approx(-0.6)
    absolute = A.lock_in_episodes(run, "valence_bias", threshold=0.4, min_ticks=2, side="abs").collect()
    assert absolute.select("start_tick", "end_tick").rows() == [(0, 3)]


def test_grimoire_valence_skew(run):
    write(run, "entries", id=[1, 2, 3], golem_id=[0, 0, 0], created_ms=[0, 1000, H + 100_000],
          has_tag=[True, False, True], p=[0.4, 0.9, -0.6], provenance=[-1, 3, -1])
    sk = A.grimoire_valence_skew(run, "1h").collect()
    assert sk["bucket_ms"].to_list() == [0, H]
    assert sk["n"].to_list() == [2, 1] and sk["n_tagged"].to_list() == [1, 1]
    assert sk["bucket_mean_p"].to_list() == pytest.approx([0.2, -0.6])        # untagged counts as P = 0
    assert sk["running_mean_p"].to_list() == pytest.approx([0.2, -0.2 / 3])
    assert sk["running_neg_share"].to_list() == pytest.approx([0.0, 1 / 3])
    own = A.grimoire_valence_skew(run, "1h", own_only=True).collect()
    assert own["running_mean_p"].to_list() == pytest.approx([0.4, -0.1])


def test_contrarian_effect(run):
    # golem 1's values must not leak into golem 0's windows (before or after)
    retrievals(run, [0] * 6 + [1] * 3, [0, 1, 2, 3, 4, 5, 0, 1, 2], mc=[0.1, 0.3, 0.5, 0.2, 0.0, 0.4, 0.9, 0.9, 0.9],
               contrarian_ids=[[], [], [7, 8], [], [], [9], [], [], []],
               contrarian_changed=[False, False, True, False, False, False, False, False, False])
    ce = A.contrarian_effect(run, window=2).collect()
    assert ce["tick"].to_list() == [2, 5]
    assert ce["n_contrarian"].to_list() == [2, 1]
    assert ce["changed"].to_list() == [True, False]
    assert ce["mood_congruence_before"].to_list() == pytest.approx([0.2, 0.1])
    assert ce["mood_congruence_after"][0] == pytest.approx(0.1)
    assert ce["mood_congruence_after"][1] is None                   # nothing after the last tick
    s = A.contrarian_summary(run, window=2).collect().row(0, named=True)
    assert (s["passes"], s["changed"]) == (2, 1)
    assert s["changed_share"] == pytest.approx(0.5)
    assert s["mc_before"] == pytest.approx(0.15) and s["mc_after"] == pytest.approx(0.1)


def test_contrarian_absent_is_empty(run):
    retrievals(run, [0, 0], [0, 1])
    assert A.contrarian_effect(run).collect().is_empty()
    s = A.contrarian_summary(run).collect().row(0, named=True)
    assert s["passes"] == 0 and s["changed_share"] is None


def _payload(latency, before, after, tag=(-0.5, 1.0, 0.3), entry=11):
    return json.dumps({"alert_type": "flashbulb", "signal": "THREAT", "latency_ms": latency, "sender_entry": entry,
                       "pad_before": list(before), "pad_after": list(after), "tag": list(tag), "stored": True})


def test_contagion_waves_and_pushes(run):
    write(run, "heartbeats", golem_id=[0, 1, 2, 1, 1], clade_id=[0, 0, 1, 0, 0], tick=[0, 0, 0, 1, 2],
          time_ms=[0, 0, 0, 300_000, 8 * H], a=[0.0, 0.1, 0.0, 0.6, 0.2])
    write(run, "events", time_ms=[5000, 6000, 7000], seq=[0, 1, 2], golem_id=[1, 2, 0], clade_id=[0, 1, 0],
          kind=["contagion", "contagion", "flashbulb"], other_golem=[0, 0, -1], value=[0.3, 0.3, 0.9],
          payload=[_payload(2000, (0.1, 0.2, 0.0), (-0.05, 0.5, 0.0)),
                   _payload(3000, (0.0, 0.0, 0.0), (-0.15, 0.3, 0.0)), "{}"])
    w = A.contagion_waves(run).collect()
    assert w["receiver"].to_list() == [1, 2]
    assert w["sender"].to_list() == [0, 0]
    assert w["sent_ms"].to_list() == [3000, 3000]
    assert w["clade_distance"].to_list() == [0, 1]
    assert w["da"].to_list() == pytest.approx([0.3, 0.3])
    assert w["dp"].to_list() == pytest.approx([-0.15, -0.15])
    assert w["tag_a"].to_list() == pytest.approx([1.0, 1.0])
    assert w["signal"].to_list() == ["THREAT", "THREAT"]
    p = A.contagion_pushes(run).collect()
    assert p.height == 1
    r = p.row(0, named=True)
    assert (r["receivers"], r["clades"], r["min_latency_ms"], r["max_latency_ms"]) == (2, 2, 2000, 3000)
    assert r["mean_da"] == pytest.approx(0.3)
    resp = A.contagion_response(run, before="1h", after="6h").collect()
    # receiver 1: heartbeats at 0 and 300 000 ms fall in the window, the one at 8 h does not
    assert resp.filter(pl.col("receiver") == 1)["rel_ms"].to_list() == [-5000, 295_000]
    assert resp.filter(pl.col("receiver") == 1)["a"].to_list() == pytest.approx([0.1, 0.6])


def test_salience_rank_lift(run):
    write(run, "entries", id=[1, 2, 3], golem_id=[0, 0, 0], salience=[0.2, 0.8, 0.9],
          has_outcome=[True, False, True], outcome=[0.5, 0.0, -0.4])
    write(run, "retrievals", golem_id=[0, 0], tick=[0, 1], time_ms=[0, 300_000], ids=[[1, 2], [1]],
          salience_shadow=[[2, 3], [1]], pool_n=[3, 3])
    write(run, "heartbeats", golem_id=[0, 0], tick=[0, 1], time_ms=[0, 300_000], value=[100.0, 98.0],
          pnl=[0.0, -2.0])
    s = A.salience_rank_lift(run).collect()
    r0, r1 = s.row(0, named=True), s.row(1, named=True)
    assert (r0["k"], r0["overlap"], r0["reordered"]) == (2, 1, True)
    assert r0["served_salience"] == pytest.approx(0.5) and r0["shadow_salience"] == pytest.approx(0.85)
    assert (r0["served_acted"], r0["shadow_acted"]) == (1, 1)
    assert r0["served_outcome"] == pytest.approx(0.5) and r0["shadow_outcome"] == pytest.approx(-0.4)
    assert r0["next_return"] == pytest.approx(-2 / 98)
    assert (r0["served_hit"], r0["shadow_hit"]) == (False, True)
    assert (r1["overlap"], r1["reordered"], r1["next_return"]) == (1, False, None)
    m = A.salience_lift_summary(run).collect().row(0, named=True)
    assert m["reordered_share"] == pytest.approx(0.5) and m["mean_overlap"] == pytest.approx(0.75)
    assert m["served_salience"] == pytest.approx(0.35) and m["shadow_salience"] == pytest.approx(0.525)
    assert m["salience_lift"] == pytest.approx(0.175)
    assert (m["served_hit_rate"], m["shadow_hit_rate"], m["hit_rate_lift"]) == (0.0, 1.0, 1.0)


def test_life_summaries(run):
    # rows deliberately out of time order: first/last must follow time, not file order
    write(run, "heartbeats", golem_id=[0, 0, 0, 1, 1], clade_id=[0, 0, 0, 1, 1], tick=[2, 0, 1, 0, 1],
          time_ms=[600_000, 0, 300_000, 0, 300_000], value=[90.0, 100.0, 110.0, 100.0, 40.0],
          emotion=["joy", "joy", "fear", "trust", "sadness"], a=[0.2, 0.1, 0.5, 0.0, 0.0],
          vitality=[0.9, 1.0, 1.0, 1.0, 0.1], phase=["thriving"] * 3 + ["thriving", "terminal"])
    write(run, "events", time_ms=[0, 300_000, 300_000], seq=[0, 1, 2], golem_id=[0, 0, 1], kind=["flashbulb"] * 2 + ["death"],
          payload=["{}", "{}", json.dumps({"cause": "capital", "value": 40.0, "budget": 900.0})])
    # P&L is against the initial book (capital 120), not the first heartbeat's value (100)
    (run / "manifest.json").write_text(json.dumps({"scenario": {"golems": [{"count": 2, "clade": "c", "capital": 120}]}}))
    life = A.life_summaries(run).collect()
    g0, g1 = life.row(0, named=True), life.row(1, named=True)
    assert (g0["ticks"], g0["value0"], g0["capital"], g0["final_value"], g0["pnl"]) == (3, 100.0, 120.0, 90.0, -30.0)
    assert g0["pnl_pct"] == pytest.approx(-0.25)
    tot = A.run_pnl(run).collect().row(0, named=True)
    assert (tot["capital"], tot["final_value"], tot["pnl"]) == (240.0, 130.0, -110.0)
    assert g0["emotions"] == ["fear", "joy"] and g0["dominant_emotion"] == "joy" and g0["n_emotions"] == 2
    assert (g0["flashbulbs"], g0["alive"], g0["cause"]) == (2, True, None)
    assert g0["final_vitality"] == pytest.approx(0.9) and g0["max_arousal"] == pytest.approx(0.5)
    assert (g1["alive"], g1["cause"], g1["died_ms"], g1["flashbulbs"], g1["final_phase"]) == \
        (False, "capital", 300_000, 0, "terminal")


def test_several_runs_sweep_dir_and_empty_tables(tmp_path):
    sweep = tmp_path / "sweep"
    for name, mc in (("a", 0.1), ("b", 0.3)):
        r = sweep / name
        r.mkdir(parents=True)
        (r / "manifest.json").write_text("{}")
        retrievals(r, [0, 0], [0, 1], mc=[mc, mc])
    (sweep / "notes").mkdir()                      # a folder that is not a run is ignored
    both = A.scan_runs(sweep, "retrievals").collect()
    assert both["run"].to_list() == ["a", "a", "b", "b"]
    assert A.run_names([sweep / "b", sweep / "a"]) == ["b", "a"]
    s = A.bias_summary([sweep / "a", sweep / "b"]).collect()
    assert s["mean_mood_congruence"].to_list() == pytest.approx([0.1, 0.3])
    snaps = A.scan_runs(sweep, "snapshots").collect()             # no part files at all
    assert snaps.is_empty() and snaps.columns == ["run", *SCHEMAS["snapshots"].names]
    assert A.contagion_waves(sweep).collect().is_empty()
    assert A.life_summaries(sweep).collect().is_empty()
    with pytest.raises(FileNotFoundError):
        A.run_dirs(tmp_path / "missing")


def test_grimoire_map_heat(run):
    write(run, "entries", id=[1, 2, 3, 4], golem_id=[0, 0, 0, 1], has_tag=[True, True, False, True],
          p=[0.5, -0.5, 0.9, 0.1], a=[0.2, 0.8, 0.9, 0.1], salience=[0.3, 0.9, 0.5, 0.4],
          importance=[0.1, 0.2, 0.3, 0.7], label=["success", "frustration", "neutral", "risk"])
    write(run, "retrievals", golem_id=[0, 0, 0], tick=[0, 1, 2], ids=[[1, 2], [1], [1]])
    gm = A.grimoire_map(run).collect()
    assert gm["access_count"].to_list() == [3, 1, 0, 0]
    heat = gm["heat"].to_list()
    assert heat[:3] == pytest.approx([1.0, math.log(2) / math.log(4), 0.0])
    assert heat[3] == pytest.approx(0.7)               # a Golem never served: importance stands in
    assert abs(gm["x"][0] - 0.5) <= 0.015 and abs(gm["y"][1] - 0.8) <= 0.015
    assert abs(gm["x"][2]) <= 0.015 and abs(gm["y"][2]) <= 0.015   # untagged sits at the origin
    assert A.grimoire_map(run, golems=[1]).collect()["id"].to_list() == [4]


def test_series_for_plots(run):
    write(run, "market", time_ms=[0, 0, 300_000, 300_000, 600_000, 600_000], asset=["ETH", "BTC"] * 3,
          close=[3000.0, 60000.0, 3010.0, 60010.0, 2900.0, 59000.0],
          regime=["calm", "calm", "calm", "calm", "bear", "bear"])
    write(run, "heartbeats", golem_id=[0, 1, 2], clade_id=[0, 0, 1], time_ms=[0, 0, 0], price=[3000.0, 60000.0, 3000.0],
          emotion=["joy", "joy", "fear"], p=[0.1, 0.3, -0.5], a=[0.0, 0.0, 0.0], d=[0.0, 0.0, 0.0])
    sp = A.regime_spans(run).collect().filter(pl.col("asset") == "ETH")
    assert sp.select("regime", "start_ms", "end_ms").rows() == [("calm", 0, 600_000), ("bear", 600_000, 600_000)]
    es = A.emotion_shares(run, "1h").collect()
    assert dict(zip(es["emotion"], es["share"])) == pytest.approx({"fear": 1 / 3, "joy": 2 / 3})
    pb = A.pad_bands(run, "1h").collect()
    assert pb.filter(pl.col("clade_id") == 0)["p_median"][0] == pytest.approx(0.2)
    ga = A.golem_assets(run).collect()
    assert ga["asset"].to_list() == ["ETH", "BTC", "ETH"]
    write(run, "events", time_ms=[0, 100, 7 * H], seq=[0, 1, 2], kind=["curator", "curator", "dream"], payload=["{}"] * 3)
    ec = A.event_counts(run, every="6h").collect()
    assert ec.select("kind", "bucket_ms", "n").rows() == [("curator", 0, 2), ("dream", 6 * H, 1)]


def test_real_tape_market_on_the_simulated_clock(run):
    # a real tape keeps epoch bar-open times; the other tables count simulated ms from the start
    t0, bar = 1_583_719_200_000, 7_200_000
    (run / "manifest.json").write_text(json.dumps({"tape": {"bar_ms": bar, "t0_ms": t0, "source": "file"}}))
    write(run, "market", time_ms=[t0 - bar, t0, t0 + bar], step=[0, 1, 2], asset=["BTC"] * 3,
          close=[8000.0, 7900.0, 6000.0], regime=["calm", "calm", "crash"])
    write(run, "heartbeats", golem_id=[0, 0], time_ms=[0, bar], tick=[0, 1], price=[8000.0, 7900.0])
    m = A.market(run).collect()
    assert m["sim_ms"].to_list() == [0, bar, 2 * bar]          # bar i is known at its close
    assert A.golem_assets(run).collect()["asset"].to_list() == ["BTC"]
    sp = A.regime_spans(run).collect()
    assert sp.select("regime", "start_ms", "end_ms").rows() == [("calm", 0, 2 * bar), ("crash", 2 * bar, 2 * bar)]


def test_a_retrieval_without_a_choice_counts_nowhere(run):
    """A pool no larger than top-k is served whole: its served-minus-pool is 0 by construction and
    must weigh on no bias metric (congruence, valence bias, lock-in, the summary's means)."""
    # golem 0: ticks 0-1 serve their whole pool (pool_n 2 <= k 2 and 3 <= 3: biases exactly 0);
    # ticks 2-3 choose 2 of 5 with biases 0.6 and 0.4 -> the mean is 0.5, not (0+0+0.6+0.4)/4
    write(run, "retrievals", golem_id=[0, 0, 0, 0], tick=[0, 1, 2, 3], time_ms=[0, 300_000, 600_000, 900_000],
          pool_n=[2, 3, 5, 5], ids=[[1, 2], [1, 2, 3], [1, 2], [3, 4]],
          pool_mean_emotional=[0.3, 0.2, 0.1, 0.1], served_mean_emotional=[0.3, 0.2, 0.7, 0.5],
          pool_mean_valence=[-0.4, 0.1, 0.0, 0.0], served_mean_valence=[-0.4, 0.1, -0.6, -0.5])
    mc = A.mood_congruence(run).collect()
    assert mc["tick"].to_list() == [2, 3]
    assert mc["mood_congruence"].to_list() == pytest.approx([0.6, 0.4])
    assert A.retrieval_valence_bias(run).collect()["valence_bias"].to_list() == pytest.approx([-0.6, -0.5])
    s = A.bias_summary(run, threshold=0.3, min_ticks=2).collect().row(0, named=True)
    assert s["mean_mood_congruence"] == pytest.approx(0.5) and s["mean_valence_bias"] == pytest.approx(-0.55)
    assert (s["retrievals"], s["retrievals_all"], s["retrievals_chose"]) == (2, 4, 2)
    assert s["chose_share"] == pytest.approx(0.5)
    # the two choosing ticks alone make the episode: the whole-pool ticks neither extend nor break it
    assert s["lock_in_episodes"] == 1 and s["lock_in_ticks"] == 2 and s["lock_in_share"] == pytest.approx(1.0)
    assert A.bias_over_time(run, "1h").collect()["n"].to_list() == [2]
