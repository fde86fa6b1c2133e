"""Lock-in measures (SPEC §2.9, sim.analysis.mood_recovery, paired_difference) on hand-built tables
whose answers are worked out by hand in the comments."""
from __future__ import annotations

import math

import pytest

from sim import analysis as A
from test_analysis import write

H = 3_600_000
HOURS = list(range(13))
# ETH: flat at 100, falls to 80 at 5h, back at 100 at 8h; BTC dips 5 % (so ETH is the crash)
ETH = [100, 100, 100, 100, 90, 80, 85, 95, 100, 105, 104, 103, 102]
BTC = [1000, 1000, 1000, 1000, 950, 960, 1000, 1000, 1000, 1000, 1000, 1000, 1000]


def market(run, eth=ETH):
    write(run, "market", time_ms=[h * H for h in HOURS for _ in (0, 1)], asset=["BTC", "ETH"] * len(HOURS),
          close=[x for pair in zip(BTC, eth) for x in pair])


def heartbeats(run, mood0, mood1, *, dream_at=None):
    """Golems 0 and 1 hold ETH (exposure 0.5 at 100: 5 and 10 units); golem 2 trades ETH with 5 %
    of its value in it (not a holder) and a mood of -1 that would spoil every mean it entered.
    Golem 0 dreams at `dream_at` with mood +0.9 (a dream is not an awake heartbeat)."""
    value0 = [1000] * 5 + [900, 950, 990, 1000, 1050, 1080, 1090, 1100]      # 900 at the trough, 1000 at 8h
    value1 = [2000] * 5 + [1500, 1500, 1520, 1550, 1580, 1590, 1600, 1600]   # 1500 at the trough, 1550 at 8h
    rows = dict(time_ms=[], golem_id=[], mood_p=[], exposure=[], value=[], price=[], state_path=[])
    for h in HOURS:
        for g, mood, value, exp in ((0, mood0, value0, 0.5), (1, mood1, value1, 0.5), (2, [-1.0] * 13, [500] * 13, 0.05)):
            dream = g == 0 and h == dream_at
            rows["time_ms"].append(h * H)
            rows["golem_id"].append(g)
            rows["mood_p"].append(0.9 if dream else mood[h])
            rows["exposure"].append(exp)
            rows["value"].append(value[h])
            rows["price"].append(float(ETH[h]))
            rows["state_path"].append("DREAMING" if dream else "SENSING>DECIDING")
    write(run, "heartbeats", **rows)


# holders' moods: before 3h golem 0 at 0.2 and golem 1 at 0.0 (pre_mood_p = 0.1, so recovered means
# a mean mood P >= 0.0); after the price's recovery at 8h the mean is -0.3, -0.1, -0.05, then 0.02 at 11h
MOOD0 = [0.2, 0.2, 0.2, 0.1, -0.2, -0.4, -0.4, -0.35, -0.3, -0.1, -0.05, 0.02, 0.05]
MOOD1 = [0.0, 0.0, 0.0, 0.1, -0.2, -0.4, -0.4, -0.35, -0.3, -0.1, -0.05, 0.02, 0.05]


@pytest.fixture
def run(tmp_path):
    r = tmp_path / "r1"
    r.mkdir()
    (r / "manifest.json").write_text("{}")
    market(r)
    return r


def test_crash_episode_detected_from_the_market(run):
    # deepest fall within 3h: 80 at 5h against the 100 of (2h, 5h]; it starts at the first 100 there
    # (3h); the trough is the lowest close in [3h, 6h]; the first close >= 100 after it is at 8h
    e = A.crash_episode(run).collect().row(0, named=True)
    assert e["asset"] == "ETH"
    assert (e["crash_ms"], e["pre_price"], e["trough_ms"], e["trough_price"]) == (3 * H, 100, 5 * H, 80)
    assert e["depth"] == pytest.approx(-0.2)
    assert e["price_recovered_ms"] == 8 * H and e["price_recovery_s"] == 5 * 3600
    assert e["end_ms"] == 12 * H
    # BTC alone: 950 at 4h against the 1000 of (1h, 4h], first at 2h; back at 1000 at 6h
    b = A.crash_episode(run, asset="BTC").collect().row(0, named=True)
    assert (b["crash_ms"], b["trough_ms"], b["price_recovered_ms"]) == (2 * H, 4 * H, 6 * H)
    # an explicit start: the last bar before it is the pre-crash level
    s = A.crash_episode(run, start="3h").collect().row(0, named=True)
    assert (s["crash_ms"], s["pre_price"], s["trough_ms"], s["price_recovery_s"]) == (2 * H, 100, 5 * H, 6 * 3600)


def test_mood_recovery_time_by_hand(run):
    heartbeats(run, MOOD0, MOOD1, dream_at=10)
    r = A.mood_recovery(run, pre="3h", every="1h").collect().row(0, named=True)
    assert r["holders"] == 2
    assert r["pre_mood_p"] == pytest.approx(0.1)          # (0.2 x 3 + 0.0 x 3) / 6
    # buckets after 8h: -0.3, -0.1, -0.05 (the dream's +0.9 left out), 0.02 >= 0.1 - 0.1 at 11h
    assert r["mood_recovered_ms"] == 11 * H and r["mood_recovery_s"] == 3 * 3600 and r["capped"] is False
    # units before the crash: 0.5 x 1000 / 100 + 0.5 x 2000 / 100 = 15; holding them from the trough
    # (80) to the recovery (100) gains 300; the holders gained (1000 + 1550) - (900 + 1500) = 150
    assert r["captured_share"] == pytest.approx(0.5)
    assert r["final_value"] == pytest.approx(1350) and r["final_value_ratio"] == pytest.approx(2700 / 3000)
    # the series the lock-in panel plots: the holders' mean per bucket beside the close
    s = A.holder_mood(run, every="1h").collect()
    assert s.filter(s["bucket_ms"] == 9 * H).select("mood_p", "holders", "close").row(0) == (pytest.approx(-0.1), 2, 105)


def test_mood_recovery_tolerance_and_bucket(run):
    heartbeats(run, MOOD0, MOOD1)
    # a tolerance of 0.25 takes the first bucket >= -0.15 after 8h: 9h (-0.1)
    assert A.mood_recovery(run, pre="3h", every="1h", tolerance=0.25).collect()["mood_recovery_s"][0] == 3600
    # a mood back before the price: 0 (tolerance 0.5: -0.3 at 8h is >= -0.4)
    assert A.mood_recovery(run, pre="3h", every="1h", tolerance=0.5).collect()["mood_recovery_s"][0] == 0
    # 2h buckets: [8h, 10h) averages -0.2, [10h, 12h) -0.015, [12h, 14h) 0.05 -> 12h, 4 h after
    assert A.mood_recovery(run, pre="3h", every="2h").collect()["mood_recovery_s"][0] == 4 * 3600


def test_mood_recovery_capped_at_the_end(run):
    never = MOOD0[:8] + [-0.3] * 5
    heartbeats(run, never, never)
    r = A.mood_recovery(run, pre="3h", every="1h").collect().row(0, named=True)
    # pre_mood_p = (0.2 x 3 + 0.2 x 3) / 6 = 0.2: never back above 0.1; capped at the last heartbeat (12h)
    assert r["capped"] is True and r["mood_recovered_ms"] == 12 * H and r["mood_recovery_s"] == 4 * 3600


def test_no_price_recovery_gives_no_mood_recovery(tmp_path):
    r = tmp_path / "r2"
    r.mkdir()
    market(r, eth=ETH[:5] + [80] * 8)
    heartbeats(r, MOOD0, MOOD1)
    out = A.mood_recovery(r, pre="3h", every="1h").collect().row(0, named=True)
    assert out["price_recovered_ms"] is None and out["holders"] == 2
    assert out["mood_recovery_s"] is None and out["capped"] is None and out["captured_share"] is None
    assert out["final_value_ratio"] == pytest.approx(2700 / 3000)


def test_t_quantile_matches_the_tables():
    # two-sided 95 % (upper 2.5 %) points of Student's t, and 99 % at 5 df
    for df, t in ((1, 12.706205), (2, 4.302653), (3, 3.182446), (4, 2.776445), (5, 2.570582), (19, 2.093024),
                  (30, 2.042272)):
        assert A.t_quantile(0.95, df) == pytest.approx(t, abs=1e-6)
    assert A.t_quantile(0.99, 5) == pytest.approx(4.032143, abs=1e-6)
    with pytest.raises(ValueError, match="level"):
        A.t_quantile(1.5, 3)


def test_paired_difference_by_hand():
    a = {1: 3.0, 2: 5.0, 3: 4.0, 4: 8.0}
    b = {1: 1.0, 2: 2.0, 3: 3.0, 4: 2.0, 5: 9.0}          # seed 5 has no pair
    # d = 2, 3, 1, 6: mean 3, sd = sqrt(14 / 3), half-width = 3.182446 x sd / 2 = 3.43743
    r = A.paired_difference(a, b)
    assert r["n"] == 4 and r["mean"] == pytest.approx(3.0) and r["sd"] == pytest.approx(math.sqrt(14 / 3))
    assert (r["low"], r["high"]) == (pytest.approx(3 - 3.437430, abs=1e-5), pytest.approx(3 + 3.437430, abs=1e-5))
    assert r["sign"] == "0"
    # d = 2, 3, 2, 3: mean 2.5, sd = sqrt(1 / 3), half-width = 3.182446 x 0.288675 = 0.918693
    up = A.paired_difference([3.0, 4.0, 5.0, 6.0], [1.0, 1.0, 3.0, 3.0])
    assert (up["low"], up["high"], up["sign"]) == (pytest.approx(1.581307, abs=1e-5), pytest.approx(3.418693, abs=1e-5), "+")
    down = A.paired_difference([1.0, 1.0, 3.0, 3.0], [3.0, 4.0, 5.0, 6.0])
    assert down["sign"] == "-" and down["high"] == pytest.approx(-1.581307, abs=1e-5)
    # a null or NaN on either side drops the pair; one pair gives a mean and no interval
    one = A.paired_difference({1: 2.0, 2: float("nan"), 3: None}, {1: 1.0, 2: 0.0, 3: 0.0})
    assert one["n"] == 1 and one["mean"] == 1.0 and one["low"] is None and one["sign"] is None
