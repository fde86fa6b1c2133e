"""The emotions mean what the seeds say they mean (SPEC §2.8), on the shipped scenarios, seeds 1-10,
and on realistic markets of other assets, sizes and hours.

Each situation of the validity map is run (shortened to what the situation needs) for seeds 1 to 10,
and the modal emotion of the Golems it concerns is asserted, with its sign pattern
(golem.pad.SIGN_PATTERNS) on at least half of their ticks: holders (more than 10 % of value in the
asset when the situation starts) for the market situations, everyone for the calm market, everyone
who sees it for a regime shift. The variants (`VARIANTS`) are markets of this module's own: a bleed
of 2 and 4 % a day, a rally of 2 and 5 % a day at one and two times the asset's normal volatility,
a crash of 12 and 25 % on BTC and SOL in the early hours, with and without a scheduled event.
The runs go through a two-process pool so the suite stays short.
Then the limits that hold on every shipped scenario: no PAD component of emotion or mood at
|x| >= 0.99 on more than 5 % of awake ticks, and a contagion delivery visibly moves its receiver.

A run that is a scenario as shipped (its own seed and length: calm at seed 1, default, losing_streak)
is the session's shared run (conftest.shared_run), the one test_scenario_claims reads too. The
pool's runs skip the scan-term check every other test runs with (GOLEM_CHECK_SCAN, 2.5-2.7 % of a
small run's time, timed around the check in slow_bleed 2 d and flash_crash 3 d): what they test is
affect, and the same scenarios run checked elsewhere in the suite.
"""
from __future__ import annotations

import concurrent.futures as cf
import math
import multiprocessing as mp
from functools import cache
from pathlib import Path

import polars as pl
import pytest
import yaml

from golem.pad import SIGN_PATTERNS
from sim import analysis as A
from sim.scenario import parse_duration
from conftest import SCENARIOS, make_shared, shared_dir

SEEDS = tuple(range(1, 11))
#: situation -> (scenario, run length, window start, window end, asset, who, wanted, holders at)
SITUATIONS = {
    "flash crash, the crash hours: fear": ("flash_crash", "40h", "36h", "40h", "ETH", "holders", {"fear"}, None),
    "exploit on a held protocol, the hours after: fear": ("exploit", "23h", "20h", "23h", "AAVE", "holders", {"fear"}, None),
    "slow bleed, from day 5: sadness": ("slow_bleed", "6d", "5d", "6d", "ETH", "holders", {"sadness"}, None),
    "profitable trades in a volatile rally: joy or anticipation": ("bull_run", "3d1h", "12h", "3d", "ETH", "holders",
                                                                    {"joy", "anticipation"}, None),
    "calm, from day 2: trust or neutral": ("calm", "3d", "2d", "3d", None, "all", {"trust", "neutral"}, None),
    "rug pull, the first hour: fear": ("rug_pull", "36h", "30h", "31h", "PEPE", "holders", {"fear"}, None),
    "rug pull, the hours after: then disgust": ("rug_pull", "36h", "31h", "36h", "PEPE", "holders", {"disgust"}, "30h"),
}
#: a regime shift: surprise among the top two emotions of everyone who sees it (the bull run's shake-out;
#: the same runs as the rally above)
SHIFT = ("bull_run", "3d1h", "3d", "3d1h")
#: a day of 5-minute market steps
DAY = 288


def _golems(assets, kinds):
    return [{"count": n, "clade": f"{a.lower()}-{s}", "asset": a, "strategy": s, **({"exposure": e} if e else {})}
            for a in assets for s, n, e in kinds]


def _bleed() -> dict:
    """A quiet grind (half the normal volatility): ETH -2 % a day, SOL (beta 2) -4 % a day."""
    return {"name": "bleed", "duration": "6d", "seed": 1, "market": {
        "assets": [{"name": "ETH", "price": 3000.0, "protocol": "uniswap", "tvl": 5e8},
                   {"name": "SOL", "price": 150.0, "protocol": "raydium", "tvl": 3e8, "beta": 2.0}],
        "initial_regime": "grind",
        "regimes": {"grind": {"drift": math.log(0.98) / DAY, "vol": 0.0015, "mean_duration_s": 1e9}}},
        "golems": _golems(("ETH", "SOL"), (("hodl", 3, 1.0), ("momentum", 3, 0.5), ("mean_reversion", 2, 0.6)))}


def _rally(x: int) -> dict:
    """ETH +2 % a day, SOL (beta 2.5) +5 % a day, at x times the normal volatility of a large cap
    (0.001 per 5 min, 1.7 % a day: at 0.003 a 2 %-a-day drift is lost in three days' noise)."""
    return {"name": f"rally{x}x", "duration": "3d", "seed": 1, "market": {
        "normal_vol": 0.001,
        "assets": [{"name": "ETH", "price": 3000.0, "protocol": "uniswap", "tvl": 5e8},
                   {"name": "SOL", "price": 150.0, "protocol": "raydium", "tvl": 3e8, "beta": 2.5}],
        "initial_regime": "bull",
        "regimes": {"bull": {"drift": math.log(1.02) / DAY, "vol": 0.001 * x, "mean_duration_s": 1e9}}},
        "golems": _golems(("ETH", "SOL"), (("momentum", 4, None), ("hodl", 3, 0.8)))}


def _crash(event: bool) -> dict:
    """BTC (beta 0.8) falls 12 % and SOL (beta 1.6) 25 % in two hours from 5h, at twice the normal
    volatility; with `event`, a third of each fall is a scheduled flash crash the probes see."""
    share = 2 / 3 if event else 1.0
    total = math.log(0.88) / 0.8
    market = {"assets": [{"name": "BTC", "price": 60000.0, "protocol": "curve", "tvl": 8e8, "beta": 0.8},
                         {"name": "SOL", "price": 150.0, "protocol": "raydium", "tvl": 3e8, "beta": 1.6}],
              "initial_regime": "calm",
              "regimes": {"calm": {"drift": 0.0, "vol": 0.003, "mean_duration_s": 1e9},
                          "crash": {"drift": share * total / 24, "vol": 0.006, "mean_duration_s": 1e9},
                          "after": {"drift": 0.0, "vol": 0.004, "mean_duration_s": 1e9}},
              "regime_schedule": [{"at": "5h", "regime": "crash"}, {"at": "7h", "regime": "after"}]}
    if event:
        market["events"] = [{"kind": "flash_crash", "at": "5h", "asset": a, "duration": "2h", "severity": "high",
                             "impact": (1 - share) * total * beta, "detect_lag": "20m", "detect_jitter": "20m"}
                            for a, beta in (("BTC", 0.8), ("SOL", 1.6))]
    return {"name": "crash_event" if event else "crash", "duration": "9h", "seed": 1, "market": market,
            "golems": _golems(("BTC", "SOL"), (("momentum", 4, 0.8), ("hodl", 2, 0.8)))}


#: variant -> (scenario document, window start, window end, {asset: the move over the window, in its
#: direction, that makes the market the situation on a seed: half the nominal one}, wanted). A generated market is a random walk: on some seeds a
#: 2 %-a-day drift at twice the normal volatility is no rally over the window; such a seed is not the
#: situation and is left out; at least one seed per asset must be it.
VARIANTS = {
    "a bleed of 2 % (ETH) and 4 % (SOL) a day, days 4-6: sadness": (_bleed(), "4d", "6d", {"ETH": -0.02, "SOL": -0.04}, {"sadness"}),
    "a rally of 2 % (ETH) and 5 % (SOL) a day at the normal volatility: joy or anticipation": (
        _rally(1), "12h", "3d", {"ETH": 0.025, "SOL": 0.06}, {"joy", "anticipation"}),
    "a rally of 2 % (ETH) and 5 % (SOL) a day at twice the normal volatility: joy or anticipation": (
        _rally(2), "12h", "3d", {"ETH": 0.025, "SOL": 0.06}, {"joy", "anticipation"}),
    "a crash of 12 % (BTC) and 25 % (SOL) at 5h: fear": (_crash(False), "5h", "9h", {"BTC": -0.06, "SOL": -0.125}, {"fear"}),
    "the same crash with a scheduled flash crash: fear": (_crash(True), "5h", "9h", {"BTC": -0.06, "SOL": -0.125}, {"fear"}),
}
VARIANT_SEEDS = (1, 2, 3)
#: the scenarios whose run as shipped the session shares with test_scenario_claims
AS_SHIPPED = ("calm", "default", "losing_streak")


@cache
def _shipped(name: str) -> tuple[str, str, int]:
    """(scenario, its own length, its own seed)."""
    doc = yaml.safe_load((SCENARIOS / f"{name}.yaml").read_text())
    return name, str(doc["duration"]), int(doc["seed"])


#: every shipped scenario but real_tape (it needs the recorded tape: tests/test_scenario_claims.py) and
#: population (24 GiB): the map's runs stand for the scenarios they cover (seed 1); default and
#: losing_streak as shipped; clade_panic at seed 1; bench an hour at capacity 1,024 (a load, not a
#: story: its comment names that setting)
SHIPPED = {name: (name, duration, 1) for name, duration, *_ in SITUATIONS.values()}
SHIPPED.update(default=_shipped("default"), losing_streak=_shipped("losing_streak"),
               clade_panic=("clade_panic", "2d", 1), bench=("bench", "1h", 1))
#: settings a run of the map adds to its duration, by scenario
SETS = {"bench": ["grimoire.capacity=1024"]}


def _is_shipped(key) -> bool:
    """The run of `key` (scenario, duration, seed) is the scenario as shipped, or its first part."""
    scenario, duration, seed = key
    if scenario not in AS_SHIPPED:
        return False
    _, own, own_seed = _shipped(scenario)
    return seed == own_seed and parse_duration(duration) <= parse_duration(own)


def _run(spec):
    from sim.run import execute
    scenario, duration, seed, out, shared = spec
    if shared:
        return str(make_shared(out, scenario))
    path = Path(scenario) if scenario.endswith(".yaml") else SCENARIOS / f"{scenario}.yaml"
    sets = [f"duration={duration}", *SETS.get(scenario, ())]
    execute(path, out, seed=seed, sets=sets, environ={}, checkpoint=False)
    return str(out)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(scenario, duration, seed) -> run directory, all made once, two at a time; a variant's
    scenario is its document's file (`variant_file`)."""
    from sim.sweep import worker_env
    root = tmp_path_factory.mktemp("validity")
    specs = {(s[0], s[1], seed) for s in SITUATIONS.values() for seed in SEEDS}
    specs |= {(SHIFT[0], SHIFT[1], seed) for seed in SEEDS}
    specs |= set(SHIPPED.values())
    for name, (doc, *_) in VARIANTS.items():
        f = root / f"{doc['name']}.yaml"
        f.write_text(yaml.safe_dump(doc, sort_keys=False))
        specs |= {(str(f), doc["duration"], seed) for seed in VARIANT_SEEDS}

    def job(k):
        if _is_shipped(k):
            return (k[0], _shipped(k[0])[1], k[2], shared_dir(tmp_path_factory, k[0]), True)
        return (k[0], k[1], k[2], root / f"{Path(k[0]).stem}-{k[1]}-{k[2]}", False)
    jobs = {k: job(k) for k in specs}
    # the longest run first, so that neither process is left with a long run at the end
    jobs = dict(sorted(jobs.items(), key=lambda kv: (-parse_duration(kv[1][1]), str(kv[0]))))
    # the pool's processes read GOLEM_CHECK_SCAN at import: they start without it
    with worker_env(), pytest.MonkeyPatch.context() as env:
        env.setenv("GOLEM_CHECK_SCAN", "0")
        with cf.ProcessPoolExecutor(2, mp_context=mp.get_context("spawn")) as pool:
            done = dict(zip(jobs, pool.map(_run, jobs.values())))
    out = {k: Path(v) for k, v in done.items()}
    out["variants"] = root
    return out


def _emotions(run, lo, hi, asset, who, at=None) -> pl.DataFrame:
    return A.situation_emotions(run, lo, hi, asset=asset, who=who, situation_start=at).collect()


def octant_share(run, lo, hi, asset, who, emotion, at=None) -> float:
    """The share of the concerned Golems' awake ticks in [lo, hi) whose emotion has `emotion`'s sign
    pattern (SPEC §2.8: a label sits in its own octant; a 0 in the pattern takes either sign)."""
    hb = A.scan_runs(run, "heartbeats").filter((pl.col("time_ms") >= A._ms(lo)) & (pl.col("time_ms") < A._ms(hi))
                                              & (pl.col("state_path") != "DREAMING"))
    if who == "holders":
        hb = hb.join(A.holders(run, A._ms(lo if at is None else at), asset), on=list(A.KEY), how="semi")
    inside = pl.lit(True)
    for col, sign in zip("pad", SIGN_PATTERNS[emotion]):
        inside = inside & ((pl.col(col) * sign > 0) if sign else pl.lit(True))
    return hb.select(inside.mean()).collect().item()


def _assert_map(run, what, lo, hi, asset, who, wanted, at=None):
    """The modal emotion is wanted and sits in its own octant on at least half of the ticks (neutral,
    no PAD to speak of, has no octant)."""
    e = _emotions(run, lo, hi, asset, who, at)
    assert e.height, f"{what}: nobody concerned"
    top = e.row(0, named=True)
    assert top["emotion"] in wanted, f"{what}: modal {top['emotion']} {top['share']:.0%}: {e.head(3).rows()}"
    if top["emotion"] != "neutral":
        share = octant_share(run, lo, hi, asset, who, top["emotion"], at)
        assert share >= 0.5, f"{what}: modal {top['emotion']} in its octant on {share:.0%} of the ticks"


@pytest.mark.parametrize("situation", list(SITUATIONS))
def test_the_validity_map_holds_for_seeds_1_to_10(runs, situation):
    scenario, duration, lo, hi, asset, who, wanted, at = SITUATIONS[situation]
    for seed in SEEDS:
        _assert_map(runs[(scenario, duration, seed)], f"{situation}: seed {seed}", lo, hi, asset, who, wanted, at)


def _move(run, asset, lo, hi) -> float:
    """The asset's return from the bar at lo to the bar at hi."""
    m = A.market(run).filter(pl.col("asset") == asset).sort("sim_ms").collect()
    at = lambda t: m.filter(pl.col("sim_ms") <= A._ms(t))["close"][-1]   # noqa: E731
    return at(hi) / at(lo) - 1.0


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_validity_map_holds_on_realistic_markets(runs, variant):
    """Each asset of the variant on each of its seeds where the market is the situation (moved at
    least half the nominal move over the window in its direction: a 2 %-a-day drift at twice the
    normal volatility is lost in the noise on some draws); at least one seed per asset is."""
    doc, lo, hi, moves, wanted = VARIANTS[variant]
    f = str(runs["variants"] / f"{doc['name']}.yaml")
    for asset, need in moves.items():
        left_out = []
        for seed in VARIANT_SEEDS:
            run = runs[(f, doc["duration"], seed)]
            move = _move(run, asset, lo, hi)
            if move * math.copysign(1, need) < abs(need):
                left_out.append(f"seed {seed}: {asset} moved {move:+.1%}, not the situation")
                continue
            _assert_map(run, f"{variant}: {asset} seed {seed}", lo, hi, asset, "holders", wanted)
        assert len(left_out) < len(VARIANT_SEEDS), left_out


def test_a_regime_shift_brings_surprise_among_the_top_two(runs):
    scenario, duration, lo, hi = SHIFT
    for seed in SEEDS:
        e = _emotions(runs[(scenario, duration, seed)], lo, hi, None, "all")
        assert "surprise" in e["emotion"].head(2).to_list(), f"seed {seed}: {e.head(3).rows()}"


def test_no_affect_sits_at_its_clamp_on_any_shipped_scenario(runs):
    pinned = A.pinned_share([runs[k] for k in SHIPPED.values()]).collect()
    assert pinned.height == len(SHIPPED)
    worst = pinned.select(pl.max_horizontal("emotion_pinned", "mood_pinned").alias("w"), "run")
    assert (worst["w"] <= 0.05).all(), pinned


def test_a_contagion_delivery_visibly_moves_its_receiver(runs):
    """The first alarm of a wave (a receiver's first delivery after an hour without any) moves its
    arousal by the whole 0.3 x the tag's A: the receiver's own appraisal never holds it at the edge.
    (Within a wave, a dozen siblings' flashbulbs and warnings add up past the clamp: contagion is
    additive, SPEC §2.7.) Every delivery moves A by 0.3 x tag, clamped, and D not at all."""
    import json
    ev = A.scan_runs([runs[k] for k in SHIPPED.values()], "events").filter(
        pl.col("kind") == "contagion").collect().sort("run", "golem_id", "seq")
    assert ev.height > 50
    gap = pl.col("time_ms") - pl.col("time_ms").shift(1).over("run", "golem_id")
    firsts = set(ev.with_row_index("i").filter(gap.is_null() | (gap > 3_600_000))["i"].to_list())
    whole, n_first = 0, 0
    for i, payload in enumerate(ev["payload"]):
        p = json.loads(payload)
        before, after, want = p["pad_before"], p["pad_after"], 0.3 * p["tag"][1]
        assert after[1] == pytest.approx(max(-1.0, min(1.0, before[1] + want))) and after[2] == before[2]
        if i in firsts and abs(want) > 0.01:
            n_first += 1
            whole += abs(after[1] - before[1] - want) <= 0.1 * abs(want)
    assert n_first >= 20 and whole / n_first >= 0.9, (whole, n_first)
