"""A scenario's comment block is a claim: what it says a user will see about affect, the run shows.

One test per shipped scenario, on the run of its own seed (the session fixtures of conftest where
they exist). The emotion map of SPEC §2.8 across seeds 1-5 is in test_validity.py; here each
scenario's own wording is checked, sentence by sentence.
"""
from __future__ import annotations

import json

import polars as pl
import pytest

from conftest import SCENARIOS, events, run_scenario, shared_run, table
from sim import analysis as A

H = 3_600_000


def _mean(df, col, lo, hi, cond=True):
    return df.filter((pl.col("time_ms") >= lo * H) & (pl.col("time_ms") < hi * H) & cond)[col].mean()


# shared with the validity map's checks (tests/test_validity.py), which ask for the same runs
@pytest.fixture(scope="module")
def calm_run(tmp_path_factory):
    return shared_run(tmp_path_factory, "calm")


@pytest.fixture(scope="module")
def losing_run(tmp_path_factory):
    return shared_run(tmp_path_factory, "losing_streak")


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    return shared_run(tmp_path_factory, "default")


def test_flash_crash(flash_run):
    run = flash_run.run_dir
    h = table(run, "heartbeats").filter(pl.col("state_path") != "DREAMING")
    holders = A.holders(run, "36h", "ETH").collect()["golem_id"].to_list()
    held = pl.col("golem_id").is_in(holders)
    assert len(holders) >= 3
    # the holders feel fear through the crash hours; their dominance falls
    e = A.situation_emotions(run, "36h", "40h", asset="ETH").collect()
    assert e["emotion"][0] == "fear"
    assert _mean(h, "d", 36, 40, held) < _mean(h, "d", 30, 36, held) - 0.3
    # most of them exit, and stay out for the six hours after the probe
    after = h.filter(held & (pl.col("time_ms") >= 38 * H) & (pl.col("time_ms") < 42 * H))
    assert (after["exposure"] < 0.05).mean() > 0.5
    # flashbulbs on the crash, some suppressed by the 24 h budget, pushed to the Clade
    assert h.filter((pl.col("time_ms") >= 36 * H) & (pl.col("time_ms") < 40 * H))["flashbulb"].sum() > 5
    assert events(run, "flashbulb_suppressed").height > 0
    # a sibling's arousal jumps at the first alarm of a wave (within it, a dozen alarms reach the clamp)
    ev = events(run, "contagion").sort("golem_id", "seq")
    gap = pl.col("time_ms") - pl.col("time_ms").shift(1).over("golem_id")
    first = [json.loads(p) for p in ev.filter(gap.is_null() | (gap > H))["payload"]]
    assert any(json.loads(p)["alert_type"] == "flashbulb" for p in ev["payload"])
    first = [p for p in first if p["tag"][1] > 0.1]
    assert first and all(p["pad_after"][1] > p["pad_before"][1] for p in first)
    # the mood's arousal stays raised through the recovery
    assert _mean(h, "mood_a", 40, 72) > _mean(h, "mood_a", 0, 36) + 0.1


def test_exploit(exploit_run):
    run = exploit_run.run_dir
    h = table(run, "heartbeats").filter(pl.col("state_path") != "DREAMING")
    lenders = A.holders(run, "20h", "AAVE").collect()["golem_id"].to_list()
    # the first awake tick of each at or after 20h (one may be dreaming at 20h: it sees it on waking)
    at = h.filter(pl.col("golem_id").is_in(lenders) & (pl.col("time_ms") >= 20 * H)).sort("time_ms").group_by(
        "golem_id").first()
    assert at.height == len(lenders) >= 3 and (at["time_ms"] <= 20 * H + 300_000).all()
    assert (at["probe"] == "high").all() and (at["tier"] == "T2").all() and (at["target_exposure"] == 0).all()
    first = at.select("golem_id", pl.col("time_ms").alias("t"))
    fb = events(run, "flashbulb").join(first, left_on=["golem_id", "time_ms"], right_on=["golem_id", "t"])
    assert fb.height == len(lenders) and all("probe_high" in json.loads(p)["triggers"] for p in fb["payload"])
    snaps = table(run, "snapshots").join(first, left_on=["golem_id", "time_ms"], right_on=["golem_id", "t"])
    assert snaps["golem_id"].n_unique() == len(lenders)
    warn = table(run, "entries").join(first, left_on=["golem_id", "created_ms"], right_on=["golem_id", "t"]).filter(
        pl.col("category") == "warning")
    assert warn.height >= len(lenders) and (warn["p"] < 0).all() and (warn["a"] > 0).all()
    # out for six hours while the danger is fresh
    out = h.filter(pl.col("golem_id").is_in(lenders) & (pl.col("time_ms") > 20 * H) & (pl.col("time_ms") < 26 * H))
    assert (out["exposure"] < 1e-9).all()
    assert A.situation_emotions(run, "20h", "23h", asset="AAVE").collect()["emotion"][0] == "fear"
    # siblings receive the flashbulb seconds later: arousal up by 0.3 x the sender's, dominance unchanged
    w = A.contagion_waves(run).collect().filter(pl.col("alert_type") == "flashbulb")
    assert w.height > 0 and (w["latency_ms"] <= 3_000).all()
    for p in events(run, "contagion")["payload"]:
        p = json.loads(p)
        assert p["pad_after"][2] == p["pad_before"][2]


def test_rug_pull(rug_run):
    run = rug_run.run_dir
    degens = A.holders(run, "30h", "PEPE").collect()["golem_id"].to_list()
    assert len(degens) >= 3
    h = table(run, "heartbeats")
    assert (h.filter(pl.col("golem_id").is_in(degens) & (pl.col("time_ms") == 30 * H))["probe"] == "high").all()
    assert A.situation_emotions(run, "30h", "31h", asset="PEPE").collect()["emotion"][0] == "fear"
    assert A.situation_emotions(run, "31h", "3d", asset="PEPE", situation_start="30h").collect()["emotion"][0] == "disgust"
    assert table(run, "snapshots").height > 0
    pushed = A.contagion_waves(run).collect()
    assert {"flashbulb", "warning"} <= set(pushed["alert_type"])
    # the other Clade is untouched: low arousal, no contagion
    eth = h.filter(pl.col("clade_id") == 1)
    assert eth["a"].mean() < 0.1 and pushed.filter(pl.col("receiver_clade") == 1).height == 0


def test_calm(calm_run):
    run = calm_run.run_dir
    h = table(run, "heartbeats")
    day2 = h.filter(pl.col("time_ms") >= 48 * H)
    assert day2["a"].mean() < 0 and day2["d"].mean() > 0 and day2["p"].mean() > 0
    e = A.situation_emotions(run, "2d", "3d", who="all").collect()
    assert e["emotion"][0] == "trust" and e["share"][0] > 0.5
    assert h["flashbulb"].sum() == 0


def test_bull_run(bull_run):
    run = bull_run.run_dir
    h = table(run, "heartbeats").filter(pl.col("state_path") != "DREAMING")
    assert _mean(h, "p", 12, 72) > 0.1
    assert A.situation_emotions(run, "12h", "3d", asset="ETH").collect()["emotion"][0] in ("joy", "anticipation")
    e = table(run, "entries").filter(pl.col("has_tag") & (pl.col("provenance") == -1))
    assert (e["p"] > 0).mean() > 0.5
    vb = A.retrieval_valence_bias(run).collect()
    assert vb.filter(pl.col("time_ms") >= 12 * H)["valence_bias"].mean() > 0
    shake = A.situation_emotions(run, "3d", "3d1h", who="all").collect()
    assert "surprise" in shake["emotion"].head(2).to_list()
    assert _mean(h, "p", 72, 74) < _mean(h, "p", 60, 72) and _mean(h, "a", 72, 74) > _mean(h, "a", 60, 72)
    assert h.filter((pl.col("time_ms") >= 72 * H) & (pl.col("time_ms") < 74 * H))["flashbulb"].sum() <= h["golem_id"].n_unique()


def test_bull_run_mean_reversion_ends_with_less_on_most_seeds(tmp_path):
    """bull_run's claim across seeds: the mean-reversion Clade ends with less than the momentum Clade on
    at least three of seeds 1-4 and on average (not on every seed)."""
    gaps = []
    for seed in (1, 2, 3, 4):
        h = table(run_scenario("bull_run", tmp_path / f"s{seed}", seed=seed).run_dir, "heartbeats")
        final = h.sort("time_ms").group_by("clade_id").agg(pl.col("value").last().mean()).sort("clade_id")["value"]
        gaps.append(final[0] - final[1])
    assert sum(g > 0 for g in gaps) >= 3 and sum(gaps) > 0, gaps


def test_slow_bleed(bleed_run):
    run = bleed_run.run_dir
    assert A.situation_emotions(run, "5d", "10d", asset="ETH").collect()["emotion"][0] == "sadness"
    h = table(run, "heartbeats")
    final = h.sort("time_ms").group_by("clade_id").agg(pl.col("value").last().mean()).sort("clade_id")["value"]
    assert final[1] > final[0]            # momentum loses less than buy-and-hold
    hodl = h.filter(pl.col("clade_id") == 0)
    assert {"thriving", "stable", "conservation"} <= set(hodl["phase"])
    deaths = events(run, "death")
    assert deaths.height >= 1 and all(json.loads(p)["cause"] == "budget" for p in deaths["payload"])
    wisdom = [json.loads(p) for p in events(run, "contagion")["payload"]]
    assert any(p["alert_type"] == "death_reflection" and p["signal"] == "WISDOM" for p in wisdom)
    vb = A.retrieval_valence_bias(run).collect().filter(pl.col("time_ms") >= 24 * H)
    assert vb["valence_bias"].mean() < 0


def test_losing_streak(losing_run):
    run = losing_run.run_dir
    h = table(run, "heartbeats").filter(pl.col("state_path") != "DREAMING")
    dippers = h.filter(pl.col("clade_id") == 0)
    assert dippers.filter(pl.col("time_ms") >= 48 * H)["p"].mean() < 0
    assert (dippers["label"] == "frustration").mean() > 0.2
    skew = A.grimoire_valence_skew(run, own_only=True).collect()
    assert skew.sort("bucket_ms").group_by("golem_id").agg(pl.col("running_mean_p").last())["running_mean_p"].mean() < 0
    vb = A.retrieval_valence_bias(run).collect()
    assert vb["valence_bias"].mean() < 0
    assert A.lock_in_episodes(run, metric="valence_bias", threshold=0.1, side="below").collect().height > 0


def test_clade_panic(panic_run):
    run = panic_run.run_dir
    h = table(run, "heartbeats")
    sentinel = h.filter((pl.col("golem_id") == 0) & (pl.col("time_ms") == 18 * H))
    assert sentinel["probe"].to_list() == ["high"] and sentinel["flashbulb"].to_list() == [True]
    w = A.contagion_waves(run).collect().filter((pl.col("sender") == 0) & (pl.col("sent_ms") == 18 * H))
    assert set(w["receiver"]) == {1, 2, 3, 4}
    assert w["latency_ms"].is_between(2_000, 3_000).all()
    # their own probes fire hours later; until then they have cut exposure (memory and a fearful mood)
    own = h.filter(pl.col("golem_id").is_in([1, 2, 3, 4]) & (pl.col("probe") == "high"))
    first_own = own.group_by("golem_id").agg(pl.col("time_ms").min())["time_ms"].min()
    assert first_own >= 19.9 * H
    sibs = h.filter(pl.col("golem_id").is_in([1, 2, 3, 4]))
    assert _mean(sibs, "exposure", 18.1, first_own / H) < _mean(sibs, "exposure", 17, 18) - 0.1
    # the watchers' pushes travel the slower network (30 s)
    ww = A.contagion_waves(run).collect().filter(pl.col("receiver_clade") == 1)
    assert ww.height == 0 or (ww["latency_ms"] >= 30_000).all()


def test_default(default_run):
    run = default_run.run_dir
    h = table(run, "heartbeats").filter(pl.col("state_path") != "DREAMING")
    # pleasure follows the book: days it gains are felt better than days it loses; calm is trust
    day = h.with_columns((pl.col("time_ms") // (24 * H)).alias("day")).group_by("golem_id", "day").agg(
        (pl.col("value").last() / pl.col("value").first() - 1).alias("ret"), pl.col("p").mean())
    assert day.filter(pl.col("ret") > 0.01)["p"].mean() > day.filter(pl.col("ret") < -0.01)["p"].mean()
    calm = h.filter(pl.col("regime") == "calm")["emotion"].value_counts().sort("count", descending=True)
    assert calm["emotion"][0] == "trust"
    mc = A.mood_congruence(run).collect()
    assert mc.filter(pl.col("time_ms") >= 72 * H)["mood_congruence"].mean() > 0.05
    # the gas spike on day 3 makes trades fail more often; the oracle failure on day 5 alerts the ETH Golems
    spike = h.filter((pl.col("time_ms") >= 72 * H) & (pl.col("time_ms") < 75 * H) & (pl.col("traded") | pl.col("trade_failed")))
    rest = h.filter(((pl.col("time_ms") < 72 * H) | (pl.col("time_ms") >= 75 * H)) & (pl.col("traded") | pl.col("trade_failed")))
    assert spike["trade_failed"].mean() > rest["trade_failed"].mean()
    oracle = h.filter((pl.col("time_ms") >= 120 * H) & (pl.col("time_ms") < 122 * H) & (pl.col("clade_id") == 0))
    assert (oracle["probe"] == "medium").mean() > 0.5 and (oracle["tier"] != "T0").mean() > 0.5


def test_real_tape(tmp_path):
    """Black Thursday on the recorded BTC tape (skipped when the data is absent)."""
    from pathlib import Path
    csv = Path(__file__).resolve().parents[2] / "shared" / "data" / "btc" / "BTC_USDT_2h.csv"
    if not csv.exists():
        pytest.skip(f"the recorded BTC tape is not here ({csv})")
    from sim.tapes import import_tape, write_tape
    tape = tmp_path / "BTC_USDT_2h.parquet"
    write_tape(import_tape(csv, asset="BTC"), tape)
    r = run_scenario(SCENARIOS / "real_tape.yaml", tmp_path / "run", sets=[f"market.tape.path={tape}"])
    h = table(r.run_dir, "heartbeats")
    crash, low = 3 * 24 + 12, 4 * 24 + 2      # hours since 2020-03-09 02:00 (the first close)
    assert h.filter((pl.col("time_ms") >= (crash - 2) * H) & (pl.col("time_ms") < crash * H + H))["flashbulb"].sum() >= 3
    e = A.situation_emotions(r.run_dir, (crash - 2) * H, (low + 1) * H, who="all").collect()
    assert e["emotion"][0] == "fear"
    assert _mean(h, "mood_p", low, 7 * 24) < _mean(h, "mood_p", 0, crash - 2) - 0.2
