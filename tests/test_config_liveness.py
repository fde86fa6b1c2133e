"""Every key of configs/default.yaml is live: changed, it changes what the engine does.

The test walks whatever keys the defaults file holds, so a key added tomorrow is covered the day
it lands. Each key is changed by a rule (a number: x 0.8, or + 1 for an integer, 0 -> 0.1; a flag:
flipped; a choice: the next one; a table: each value, or each value of its rows, x 0.8) applied to the value the check's base
config holds, and the check run with the key changed must give another result than with it
unchanged. The check is a short run of tests/scenarios/liveness.yaml (its final state and
everything it emitted, hashed) unless `CHECKS` names another: a longer run, extra settings the
key needs to matter (the HDC seed only counts under `retrieval.mode: somatic_hdc`), a value that
the short run can notice, or a unit (a pure function of the config: faster, for formula sections).
Extend `CHECKS` (one row per key, or per section) when a new key needs more than a run.

Both ways compare as they go and stop at the first difference: a run tick by tick against the base
run's digests, a unit that yields its results one by one (a generator, like `_unit_affect`'s ticks)
item by item against the base config's, which each process computes once.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from types import GeneratorType

import numpy as np
import pytest

from golem.config import CHOICES, default_table

HERE = Path(__file__).resolve().parent
SCENARIO = HERE / "scenarios" / "liveness.yaml"
DAY = 86_400_000


@dataclass(frozen=True)
class Check:
    """How a key's change is seen: `unit` (a function of the config returning something
    comparable) or a run of the liveness scenario with `sets` (extra --set settings, both sides);
    `value` replaces the rule's changed value; `why` says what the key touches when not obvious."""
    unit: object = None
    sets: tuple[str, ...] = ()
    value: object = None
    why: str = ""


# ----------------------------------------------------------------------------- units
def _unit_salience(cfg):
    """Salience, gating, tier TTL, promotion and the window (SPEC §3.2-3.3) of a fixed batch of
    would-be entries spanning every branch (memory_writer.score_and_gate)."""
    from golem.memory_writer import score_and_gate
    rng = np.random.default_rng(0)
    n = 400
    c = dict(p=rng.uniform(-1, 1, n), a=rng.uniform(-1, 1, n), d=rng.uniform(-1, 1, n), has_tag=rng.random(n) < 0.9,
             value=np.full(n, 1e4), pnl=rng.normal(0, 300, n), role=rng.integers(0, 3, n), signals=rng.integers(0, 3, n),
             first_sighting=rng.random(n) < 0.2, flashbulb=rng.random(n) < 0.05, decay_class=rng.integers(0, 4, n))
    return {k: np.asarray(v).tobytes() for k, v in score_and_gate(cfg, c).items()}


def _unit_retrieval(cfg):
    """The three retrieval profiles (SPEC §4.1, §4.2, §11) on a fixed random arena, with the
    parameters the engine builds from the config (RetrievalParams.from_config, six_factor_weights)."""
    from golem import grimoire as gm
    from golem import hdc
    from golem import retrieval as rt
    rng = np.random.default_rng(1)
    n, dim = 60, 8
    gr = gm.Grimoire(1, n, dim)
    gr.fp = np.zeros((n, hdc.N_WORDS), np.uint64)
    now = 10 * DAY
    gr.insert(np.zeros(n, np.int64), rng.standard_normal((n, dim)), dict(
        created_ms=now - rng.integers(0, 9 * DAY, n), last_access_ms=now - rng.integers(0, 5 * DAY, n),
        window_ms=rng.uniform(1, 6, n) * DAY, importance=rng.random(n).astype(np.float32),
        confidence=rng.random(n).astype(np.float32), salience=rng.random(n).astype(np.float32),
        has_tag=rng.random(n) < 0.8, p=rng.uniform(-1, 1, n), a=rng.uniform(-1, 1, n), d=rng.uniform(-1, 1, n),
        i0=rng.random(n).astype(np.float32), reactivated=rng.random(n) < 0.5,
        last_react_ms=now - rng.integers(0, 3 * DAY, n), scope=rng.integers(0, 2, n).astype(np.int32),
        regime=rng.integers(0, 2, n).astype(np.int16), decay_class=rng.integers(0, 4, n).astype(np.int8)))
    gr.links.update({int(i): (int(i) + 1,) for i in range(0, n - 1, 3)})
    im = hdc.ItemMemory(3)
    gr.fp[:] = hdc.encode_batch(rng.uniform(-1, 1, n), rng.uniform(-1, 1, n), rng.uniform(-1, 1, n),
                                ["fear"] * n, rng.random(n), ["calm"] * n, im)
    q = rng.standard_normal((1, dim)).astype(np.float32)
    pad = np.array([[-0.4, 0.6, -0.2]])
    prm = rt.RetrievalParams.from_config(cfg)
    every = replace(prm, top_k=n)               # every eligible entry ranked: each one's score counts
    out = []
    for res in (rt.retrieve(gr, np.array([0]), q, pad, now, prm), rt.retrieve(gr, np.array([0]), q, pad, now, every),
                rt.retrieve_six(gr, np.array([0]), q, pad, now, every, rt.six_factor_weights(cfg), np.array([0]), 1,
                                [set()]),
                rt.retrieve_somatic_hdc(gr, np.array([0]), q, pad, now, every, gr.fp[:1])):
        out += [res.slots.tobytes(), res.scores.tobytes(), res.shadow.tobytes()]
    return out


def _unit_curator(cfg):
    """A curator pass (SPEC §7) over a hand-built slab with something for every step, each near its
    threshold: a batch since the last pass of mean valence -0.44 (lopsided beyond 0.4, not 0.5)
    and mean arousal above the floor; arousal-biased insights whose calm re-runs differ by 0.05,
    0.09 and 0.3; entries around the promotion and demotion scores, some expired; three episodes
    30.5 days old sharing scope and topic; the Golem calm at A 0.25."""
    from golem import curator
    from golem import grimoire as gm
    from golem.population import Population
    rng = np.random.default_rng(2)
    insight = gm.CATEGORIES.index("insight")
    now = 40 * DAY
    gr = gm.Grimoire(1, 64, 4)

    def add(n, **vals):
        base = dict(created_ms=now - DAY, last_access_ms=now - DAY, window_ms=np.full(n, 10.0 * DAY), has_tag=True,
                    importance=np.float32(0.5), confidence=np.float32(0.5), salience=np.float32(0.3),
                    decay_class=gm.TACTICAL, category=0, topic=np.int32(7), scope=np.int32(0))
        base.update(vals)
        gr.insert(np.zeros(n, np.int64), rng.standard_normal((n, 4)), base)
    add(10, p=np.array([-0.8] * 7 + [0.4] * 3, np.float32), a=np.array([0.9, 0.2] * 5, np.float32),
        importance=rng.uniform(0, 1, 10).astype(np.float32), topic=np.arange(10, dtype=np.int32))
    add(3, category=insight, arousal_bias=True, has_outcome=True, outcome=np.array([0.35, 0.39, 0.6], np.float32),
        raw_outcome=np.float32(0.3), topic=np.int32(8), created_ms=0, p=np.float32(-0.5), a=np.float32(0.8))
    add(6, created_ms=0, last_access_ms=np.array([0, 0, 0, now - DAY, now - DAY, now - DAY]),
        importance=np.array([0.1, 0.9, 0.35, 0.14, 0.45, 0.3], np.float32), confidence=np.float32(0.9),
        ttl_days=np.array([0, 7, 14, 0, 7, 14], np.float32), topic=np.arange(20, 26, dtype=np.int32))
    add(3, created_ms=now - int(30.5 * DAY), topic=np.int32(9), p=np.float32(-0.2))

    class _Mind:
        pending_entries: list = []

        def topic_name(self, code):
            return str(code)
    m = _Mind()
    m.gr, m.cfg = gr, cfg
    m.pop = Population(n=1, clade=np.zeros(1, np.int32), clade_names=("c",), asset=np.zeros(1, np.int16),
                       strategy=np.zeros(1, np.int8), baseline=np.zeros((1, 3)), budget0=np.ones(1), value0=np.ones(1))
    m.pop.mood[:] = (0.0, 0.25, 0.0)
    m.pop.curator_last_ms[:] = 30 * DAY
    figures = curator.curate(m, 0, now)
    return json.dumps(figures, sort_keys=True), [c.tobytes() for c in gr.cols.values()]


def _unit_risk(cfg):
    """One DECIDING of a tiny Mind (tests/minds.py) for Golems whose moods span the Plutchik labels and the
    three intensity bands, each with a calm emotion: the built-in strategies' targets (the risk channel, SPEC §5)."""
    import minds
    from golem import pad as padm
    from golem.heartbeat import TickOutput
    moods = [tuple(np.asarray(v) / np.linalg.norm(v) * i * np.sqrt(3)) for v in padm.load_prototypes().values()
             for i in (0.2, 0.5, 0.9)]
    n = len(moods)
    m = minds.mind(n=n, cfg=cfg)
    ix = np.arange(n)
    return m.decide(ix, minds.observation(m), minds.sensed(m, ix, mood=np.array(moods)), TickOutput()).target.tobytes()


def _unit_reflect(cfg):
    """One REFLECTING of a tiny Mind (tests/minds.py) for Golems across the affect space (the
    arousal bands, loads of D and P, warnings at many confidences), each with a move, a trade, a
    held position and a high-severity event: what is written, pushed and emitted."""
    import minds
    from golem.heartbeat import TickOutput
    n = 72
    m = minds.mind(n=n, cfg=cfg)
    ix = np.arange(n)
    grid = np.array([(p, a, d) for p in (-0.8, -0.6, 0.0, 0.6) for a in (-0.27, 0.4, 0.8) for d in (-0.5, -0.27, -0.18, 0.0, 0.18, 0.4)])
    s = minds.sensed(m, ix, pad=grid, mood=grid, ret=np.linspace(-0.02, 0.02, n), tick_pnl=np.linspace(-300, 300, n),
                     sev=3)
    obs = minds.observation(m, events=[("exploit", 3, "exploit drained-pool")])
    out = TickOutput()
    m.reflect(ix, obs, s, minds.decided(m, ix), minds.acted(ix, exposure_before=np.linspace(0, 1, n), dexp=0.3,
                                                              traded=True), out)
    rows = minds.written(out)
    # and a quiet tick without trades for holders of every size: the regrets of the opposite action
    quiet = TickOutput()
    m.reflect(ix, minds.observation(m), minds.sensed(m, ix, pad=grid, mood=grid, ret=np.linspace(-0.02, 0.02, n),
                                                     tick_pnl=np.linspace(-300, 300, n)),
              minds.decided(m, ix), minds.acted(ix, exposure_before=np.linspace(1, 0, n)), quiet)
    regrets = minds.written(quiet)
    return ([np.asarray(rows[k]).tobytes() for k in ("golem", "kind", "salience", "confidence", "decay_class", "window_ms",
                                                     "outcome", "arousal_bias", "attribution")],
            [np.asarray(regrets[k]).tobytes() for k in ("golem", "kind", "outcome", "raw_outcome", "arousal_bias")],
            repr([sorted(p.items()) for p in out.pushes]), m.pop.pad.tobytes(), m.pop.mood.tobytes())


def _unit_affect(cfg):
    """Three days of heartbeats every 30 min of a tiny Mind (tests/minds.py) on a hand-made market:
    calm, a crash on day 1 with a high-severity probe, a recovery, then a day and a half of a wild,
    falling market (long enough to move the mood); Golems holding, trading with and against the
    trend, of several temperaments. What each tick felt (emotion, mood, label), decided, did and wrote."""
    import minds
    n, step = 6, 1800
    m = minds.mind(n=n, cfg=cfg)
    pop = m.pop
    pop.baseline[:] = np.array([[0.2, -0.1, 0.1], [-0.2, 0.1, -0.1], [0, 0, 0], [0.1, 0.1, 0.1], [0, 0, 0], [-0.1, 0, 0.1]])
    pop.mood[:] = pop.baseline
    pop.strategy[:] = [2, 2, 2, 0, 1, 2]
    pop.units[:] = 60.0
    pop.cash[:] = 4_000.0
    pop.interval_s[:] = step
    rng = np.random.default_rng(7)
    ticks = 3 * 86_400 // step
    lr = rng.normal(0, 0.006, ticks)
    lr[36:40] -= 0.06                                    # the crash, day 1 06:00-08:00
    lr[40:60] += 0.004
    lr[76:] = rng.normal(-0.008, 0.03, ticks - 76)       # wild and falling from day 1 14:00
    price = 100.0 * np.exp(np.cumsum(lr))
    ix = np.arange(n)
    for k in range(ticks):
        crash = 36 <= k < 42
        obs = minds.observation(m, now_ms=k * step * 1000, close=[price[k]], regime=int(k >= 36),
                                probe=np.full(n, 3 if crash else 0),
                                events=[("flash_crash", 3, "flash-crash cascade")] if crash else ())
        out = m.tick(ix[pop.alive[ix]], obs)
        hb = out.heartbeats
        yield np.concatenate([hb[c].astype(np.float64) for c in ("p", "a", "d", "mood_p", "mood_a", "mood_d",
                              "emotion", "label", "target_exposure", "exposure")]).tobytes()
        for rows in out.entries:
            yield np.concatenate([np.asarray(rows[c], np.float64) for c in ("golem", "kind", "outcome", "salience")]).tobytes()
        yield repr(sorted(e["kind"] for e in out.events if isinstance(e, dict)))


def _unit_load(cfg):
    """The reflection's emotional load at hand-set moods (`_unit_reflect`) and as it comes (`_unit_affect`)."""
    yield _unit_reflect(cfg)
    yield from _unit_affect(cfg)


def _unit_markers(cfg):
    """SENSING's somatic markers (SPEC §5) for Golems whose tick pattern has markers of strengths
    2-5 and valences around +/-0.5."""
    import minds
    n = 8
    obs = minds.observation(minds.mind(n=n, cfg=cfg))
    pattern = minds.mind(n=n, cfg=cfg).sense(np.arange(n), obs).pattern
    m = minds.mind(n=n, cfg=cfg)
    m.pop.som_cnt[np.arange(n), pattern] = [3, 4, 5, 3, 4, 5, 4, 2]
    m.pop.som_sum[np.arange(n), pattern] = [-0.45, -0.45, -0.6, 0.45, 0.45, 0.6, -0.55, 0.55]
    m.pop.som_target[np.arange(n), pattern] = 0.2
    s = m.sense(np.arange(n), obs)
    return s.neg_marker.tolist(), s.pos_marker.tolist(), s.tier.tolist()


def _unit_flashbulb_triggers(cfg):
    from golem import flashbulb
    pnl = np.linspace(-800, 800, 33)
    return flashbulb.triggers(cfg, np.linspace(-1, 1, 33), np.arange(33) % 4, pnl, np.full(33, 1e4),
                              np.zeros(33, bool), np.zeros(33, np.int64)).tobytes()


def _unit_phases(cfg):
    from golem import mortality
    return mortality.phase_of(np.linspace(0, 1, 201), cfg).tolist()


def _unit_reflex_lane(cfg):
    """The reflex lane (SPEC §4.5) of a Golem with four reflexes on the same phrase, ticked at 0,
    1, 3.5 and 4.5 hours: which fire."""
    import minds
    from golem import reflex
    from golem.heartbeat import TickOutput
    m = minds.mind(n=1, cfg=cfg)
    m.gr.insert(np.zeros(4, np.int64), np.eye(4, m.gr.dim), dict(created_ms=0, last_access_ms=0, reflex=True))
    for e in range(4):
        m.gr.recall_when[e] = ("gas-spike mempool-congestion",)
    fired = []
    for h in (0, 1, 3.5, 4.5):
        obs = minds.observation(m, now_ms=int(h * 3_600_000), events=[("gas_spike", 2, "gas-spike mempool-congestion")])
        fired.append(reflex.lane(m, np.array([0]), obs, TickOutput()))
    return repr(fired)


def _unit_reflex_window(cfg):
    """Reflex proposals (SPEC §4.5) of an entry acted on at days 1, 12 and 35, on day 40."""
    from golem import grimoire as gm
    from golem import reflex
    from golem import retrieval as rt
    gr = gm.Grimoire(1, 2, 4, act_ring=max(1, cfg.reflex.promotion_min))
    gr.insert(np.array([0]), np.ones((1, 4)), dict(created_ms=0, last_access_ms=0))
    gr.phrases[0] = "gas-spike"
    for t in (1, 12, 35):       # a decision serving the entry: its recall counts the act, keeps its time
        rt.recall(gr, np.array([[0]]), np.array([[0]]), t * DAY)
    return reflex.proposals(gr, np.array([0]), 40 * DAY, cfg.reflex.promotion_min,
                            cfg.reflex.promotion_window_days)[0].tolist()


def _unit_recording(cfg):
    """recording.flush_every_s changes only when rows are flushed: the number of part files of a
    recorded run (the tables' contents are the same)."""
    import tempfile

    from sim.run import execute_prepared
    with tempfile.TemporaryDirectory() as d:
        scenario, _, _, seed = _prepared(())
        run = execute_prepared(scenario, cfg, seed, Path(d) / "run", checkpoint=False)
        return sorted(p.name for p in (run.run_dir / "heartbeats").iterdir())


def _unit_plugin_time_limit(cfg):
    """plugins.call_timeout_s bites only on a plug-in call that long: one of 0.2 s passes under the
    default limit and fails under 0.05 s (sim.plugins.time_limit)."""
    import time
    from types import SimpleNamespace

    from golem.plugins import CohortView, Plugin, PluginError, call
    from sim.plugins import time_limit

    def slow(view):
        time.sleep(0.2)
        return np.zeros(view.n)
    view = CohortView(SimpleNamespace(cfg=cfg), np.array([0]), SimpleNamespace(now_ms=0))
    try:
        call(Plugin("slow", slow, guard=time_limit), view)
        return "in time"
    except PluginError as exc:
        return str(exc)


_SALIENCE = Check(unit=_unit_salience)
_RETRIEVAL = Check(unit=_unit_retrieval)
_CURATOR = Check(unit=_unit_curator)

#: how each key (or every key of a section) is checked, where a short run is not the way
_AFFECT = Check(unit=_unit_affect)
CHECKS: dict[str, Check] = {
    "appraisal": _AFFECT,
    "appraisal.outlook_window_s": Check(unit=_unit_affect, value=86_400, why="three days lie inside any longer window"),
    "appraisal.reference_vol": Check(value=0.004, why="the world resolves it for each asset"),
    "appraisal.vol_window_s": Check(unit=_unit_affect, value=14_400, why="at 30 min the last 4 returns span 2 h"),
    "appraisal.failed_transaction": Check(), "appraisal.liquidation": Check(), "appraisal.stop_breach": Check(),
    "appraisal.exploit_held": Check(), "appraisal.stop_loss": Check(),
    "emotion.neutral_norm": Check(unit=_unit_affect, value=0.3),
    "decision.risk_by_emotion": Check(unit=_unit_risk),
    "decision.risk_max_boost": Check(unit=_unit_risk, value=0.05, why="the default table's largest boost is 0.15"), "decision.danger_cooloff_s": _AFFECT,
    "retrieval.anti_rumination": Check(),
    "curator.calm_arousal": _CURATOR,
    "confidence.low_flag_accesses": Check(value=1, why="few entries of the short run are recalled three times at low confidence"),
    "arousal.attribution_dominance": Check(unit=_unit_reflect), "confidence.speculative": Check(unit=_unit_reflect),
    "reflection": Check(unit=_unit_load, why="the mood (the emotional load) moves too slowly in a 10 h run"),
    "salience": _SALIENCE,
    "grimoire.ephemeral_days": _SALIENCE, "grimoire.tactical_days": _SALIENCE,
    "grimoire.regime_conditional_days": _SALIENCE,
    "retrieval": _RETRIEVAL,
    "retrieval.profile": Check(), "retrieval.mode": Check(),
    "retrieval.rumination_window": Check(), "retrieval.rumination_negative_share": Check(),
    "curator": _CURATOR,
    "curator.enabled": Check(), "curator.every_ticks": Check(),
    "reflex.promotion_window_days": Check(unit=_unit_reflex_window, value=20),
    "reflex.cooldown_s": Check(unit=_unit_reflex_lane, value=10800), "reflex.max_per_turn": Check(unit=_unit_reflex_lane),
    "arousal.low_band": Check(unit=_unit_reflect, why="the short run never calms below A -0.3"),
    "clade.warning_push_confidence": Check(unit=_unit_reflect),
    "reflection.backcheck_weight": Check(unit=_unit_reflect, why="no P below -0.7 in the short run"),
    "somatic.negative_valence": Check(unit=_unit_markers), "somatic.positive_valence": Check(unit=_unit_markers),
    "somatic.min_strength": Check(unit=_unit_markers),
    "flashbulb.pnl_fraction": Check(unit=_unit_flashbulb_triggers),
    "mortality.thriving": Check(unit=_unit_phases), "mortality.stable": Check(unit=_unit_phases),
    "mortality.conservation": Check(unit=_unit_phases), "mortality.declining": Check(unit=_unit_phases),
    "decay.reactivation_boost": _RETRIEVAL,
    "hdc.seed": Check(sets=("retrieval.mode=somatic_hdc",), why="item memory of the HDC fingerprints"),
    "recording.flush_every_s": Check(unit=_unit_recording, value=1800.0, why="only when rows are flushed"),
    "dream": Check(sets=("duration=25h",), why="a dream comes once a day"),
    "flashbulb.regime_lookback_ticks": Check(value=30, why="the crash regime comes back after 60 ticks"),
    "trading.fail_prob": Check(value=0.5, why="at 0.8 % no trade of the short run would fail"),
    "plugins.call_timeout_s": Check(unit=_unit_plugin_time_limit, value=0.05, why="only a call that long notices it"),
}


def _check(key: str) -> Check:
    return CHECKS.get(key) or CHECKS.get(key.split(".")[0]) or Check()


# ----------------------------------------------------------------------------- runs
@lru_cache(maxsize=None)
def _prepared(sets: tuple[str, ...]):
    from sim.run import prepare
    return prepare(SCENARIO, sets=list(sets))


def _state_digest(world) -> str:
    """Hash of a finished world's state: Population, Grimoire and Mind arrays and side tables."""
    h = hashlib.blake2b(digest_size=16)
    for obj in (world.pop, world.gr, world.mind):
        for k, v in sorted(vars(obj).items()):
            if isinstance(v, np.ndarray):
                h.update(k.encode() + np.ascontiguousarray(v).tobytes())
            elif isinstance(v, dict) and k != "cols":
                h.update(k.encode() + repr(sorted(v.items())).encode())
    for k, v in world.gr.cols.items():
        h.update(k.encode() + v.tobytes())
    return h.hexdigest()


def _emitted(out) -> str:
    """Hash of what one heartbeat emitted: heartbeat rows, events, written entries, pushes."""
    from golem.heartbeat import EventBatch
    h = hashlib.blake2b(digest_size=16)
    for k, v in sorted(out.heartbeats.items()):
        h.update(k.encode() + np.asarray(v).tobytes())
    for ev in out.events:
        if isinstance(ev, EventBatch):
            h.update(repr(ev.kind).encode() + ev.golem_id.tobytes() + np.asarray(ev.value).tobytes())
        else:
            h.update(json.dumps(ev, sort_keys=True, default=str).encode())
    for rows in out.entries:
        for k in ("id", "golem", "slot", "confidence", "salience", "window_ms", "p", "a", "d", "outcome"):
            h.update(np.asarray(rows[k]).tobytes())
    h.update(repr([sorted(p.items()) for p in out.pushes]).encode())
    return h.hexdigest()


class _Diverged(Exception):
    """A run's emissions left the base run's: the key changed something (stop there)."""


def _run(sets: tuple[str, ...], base: list[str] | None = None) -> list[str] | None:
    """Run the liveness scenario with `sets`: the digest of each heartbeat's emissions, then of
    the final state. Against `base` (another run's list) it stops at the first emission that
    differs and returns None."""
    from sim.run import build_tape
    from sim.world import World
    scenario, cfg, _, seed = _prepared(sets)
    world = World(scenario, cfg, build_tape(scenario, seed, cfg), seed)
    digests: list[str] = []
    emit = world.emit

    def watched_emit(out):
        digests.append(_emitted(out))
        if base is not None and (len(digests) > len(base) - 1 or digests[-1] != base[len(digests) - 1]):
            raise _Diverged
        emit(out)
    world.emit = watched_emit
    try:
        world.run(scenario.duration_s)
    except _Diverged:
        return None
    digests.append(_state_digest(world))
    if base is not None and digests != base:
        return None
    return digests


@lru_cache(maxsize=None)
def _base_run(sets: tuple[str, ...]) -> list[str]:
    return _run(sets)


def _unit_items(unit, cfg):
    """A unit's results one by one: a generator's items, or the one value it returns."""
    out = unit(cfg)
    return out if isinstance(out, GeneratorType) else iter([out])


@lru_cache(maxsize=None)
def _base_unit(unit, sets: tuple[str, ...]) -> list:
    return list(_unit_items(unit, _prepared(sets)[1]))


def _unit_same(unit, cfg, base: list) -> bool:
    """Whether `unit` gives `base` under `cfg`, stopping at the first item that differs."""
    n = 0
    for n, item in enumerate(_unit_items(unit, cfg), 1):
        if n > len(base) or item != base[n - 1]:
            return False
    return n == len(base)


# ----------------------------------------------------------------------------- the changes
def changed(key: str, value):
    """The rule's change of a value (see the module docstring)."""
    if key in CHOICES:
        options = CHOICES[key]
        return options[(options.index(value) + 1) % len(options)]
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return round(value * 0.8, 12) if value != 0 else 0.1
    if isinstance(value, dict):    # a table of numbers, or of rows of numbers
        def scaled(v):
            return type(v)(scaled(x) for x in v) if isinstance(v, (list, tuple)) else (round(v * 0.8, 12) if v else 0.1)
        return {k: scaled(v) for k, v in value.items()}
    raise TypeError(f"{key}: no rule changes a {type(value).__name__}; give CHECKS a value")


def _set(key: str, value) -> str:
    return f"{key}={json.dumps(value)}"


KEYS = [f"{s}.{k}" for s, keys in default_table().items() for k in keys]


@pytest.mark.parametrize("key", KEYS)
def test_changing_the_key_changes_what_the_engine_does(key):
    check = _check(key)
    _, base_cfg, _, _ = _prepared(check.sets)
    value = check.value if check.value is not None else changed(key, base_cfg.get(key))
    assert value != base_cfg.get(key)
    sets = check.sets + (_set(key, value),)
    if check.unit is not None:
        _, cfg, _, _ = _prepared(sets)
        assert cfg.get(key) == value
        assert not _unit_same(check.unit, cfg, _base_unit(check.unit, check.sets)), \
            f"{key}: {base_cfg.get(key)!r} -> {value!r} changed nothing"
    else:
        assert _run(sets, _base_run(check.sets)) is None, f"{key}: {base_cfg.get(key)!r} -> {value!r} changed nothing"


def test_the_base_run_is_repeatable():
    """The comparison means something only if the same settings give the same digests."""
    assert _run((), _base_run(())) == _base_run(())
