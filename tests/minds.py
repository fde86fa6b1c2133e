"""A Mind on a hand-built world, for tests that check one rule at a time.

`mind()` gives a Mind over a small Population and Grimoire; `observation()` a market observation
made by hand; `sensed()`, `decided()` and `acted()` the records the FSM states hand each other, with
every field a calm, ordinary tick would have, so a test sets only what its rule is about and calls
`Mind.decide` or `Mind.reflect` directly (no appraisal dynamics in between).
"""
from __future__ import annotations

import numpy as np

from golem import grimoire as gm
from golem.config import build_config, default_table
from golem.heartbeat import Acted, Decided, Mind, Observation, Sensed, TickOutput
from golem.population import Population

DAY = 86_400_000
#: the mood a hand-built tick has unless a test gives one: calm (no reflection load, SPEC §5) and
#: unlike any emotion a test sets, so a rule that reads the wrong level of affect (§2.1) shows
MOOD = (0.12, -0.08, 0.1)


def config(**over):
    """The default config with `section.key` overrides (keyword names use `__` for the dot)."""
    tree = {k: dict(v) for k, v in default_table().items()}
    for key, v in over.items():
        s, k = key.replace("__", ".").split(".")
        tree[s][k] = v
    return build_config(tree)


def mind(n: int = 2, cap: int = 32, dim: int = 16, assets=("ETH",), protocols=("uniswap",),
         regimes=("calm", "crash"), cfg=None, seed: int = 1) -> Mind:
    cfg = cfg or config()
    pop = Population(n=n, clade=np.zeros(n, np.int32), clade_names=("c",), asset=np.zeros(n, np.int16),
                     strategy=np.zeros(n, np.int8), baseline=np.zeros((n, 3)), budget0=np.full(n, 1000.0),
                     value0=np.full(n, 10_000.0))
    pop.cash[:] = 10_000.0
    gr = gm.Grimoire(n, cap, dim)
    m = Mind(cfg, pop, gr, tuple(assets), tuple(regimes), seed, protocols=tuple(protocols))
    m._out = TickOutput()
    rng = np.random.default_rng(seed)
    ctx = rng.standard_normal((n, dim))
    pop.ctx[:] = (ctx / np.linalg.norm(ctx, axis=1, keepdims=True)).astype(np.float32)
    return m


def observation(m: Mind, now_ms: int = DAY, events=(), sees=None, event_assets=None, regime: int = 0,
                close=None, probe=None) -> Observation:
    """`events`: (kind, severity, tokens) tuples; every Golem sees every event unless `sees`."""
    n = m.pop.n
    events = list(events)
    sees = np.ones((n, len(events)), bool) if sees is None else np.asarray(sees, bool).reshape(n, len(events))
    a = len(m.assets)
    return Observation(now_ms=now_ms, step=0, close=np.full(a, 100.0) if close is None else np.asarray(close, float),
                       tvl=np.full(a, 1e8), gas=30.0, gas_ref=30.0, regime=regime,
                       probe_sev=np.zeros(n, np.int8) if probe is None else np.asarray(probe, np.int8),
                       events=events, sees=sees,
                       event_assets=np.zeros(len(events), np.int64) if event_assets is None else np.asarray(event_assets),
                       ref_rate=np.full(a, 0.003 / np.sqrt(300.0)))   # the default normal: 0.003 per 5 min


def sensed(m: Mind, ix, pad=(0.0, 0.0, 0.0), mood=None, **over) -> Sensed:
    """What SENSING hands on, for Golems ix: a calm tick with no move, no event, no marker; the mood
    `MOOD` unless given (what recall and reflection's emotional load read; never the emotion by
    default), the ground truth of the outcome neutral."""
    from golem import appraisal, flashbulb
    ix = np.asarray(ix, dtype=np.int64)
    b = ix.size
    z = np.zeros(b)
    s = dict(asset=m.pop.asset[ix].astype(np.int64), price=np.full(b, 100.0), ret=z.copy(),
             value=np.full(b, 10_000.0), tick_pnl=z.copy(), vol_ratio=np.ones(b), regime=np.zeros(b, np.int64),
             regime_shift=np.zeros(b, bool), new_regime=np.zeros(b, bool), sev=np.zeros(b, np.int64),
             pad=np.broadcast_to(np.asarray(pad, dtype=np.float64), (b, 3)).copy(), label=np.zeros(b, np.int8),
             emotion=np.zeros(b, np.int8), intensity=z.copy(), recent_losses=np.zeros(b, np.int64),
             pattern=np.zeros(b, np.int64), neg_marker=np.zeros(b, bool), pos_marker=np.zeros(b, bool),
             marker_valence=z.copy(), marker_strength=np.zeros(b, np.int32), tier=np.zeros(b, np.int64),
             first=np.zeros(b, bool), triggers=np.zeros((b, 4), bool), reflex={}, truth=z.copy(),
             danger=np.zeros(b, bool))
    s["mood"] = np.broadcast_to(np.asarray(MOOD if mood is None else mood, dtype=np.float64), (b, 3)).copy()
    for k, v in over.items():
        s[k] = np.broadcast_to(np.asarray(v), np.shape(s[k])).copy() if isinstance(s[k], np.ndarray) else v
    p, a, d = s["pad"][:, 0], s["pad"][:, 1], s["pad"][:, 2]
    if "emotion" not in over:
        s["emotion"] = appraisal.classify_batch(p, a, d, m.protos)
    if "intensity" not in over:
        s["intensity"] = appraisal.intensity_batch(p, a, d)
    if "triggers" not in over:     # as SENSING derives them, from this tick and the Golems' runs of high arousal
        s["triggers"] = flashbulb.triggers(m.cfg, a, m.pop.high_a_run[ix], s["tick_pnl"], s["value"], s["new_regime"],
                                           s["sev"])
    return Sensed(**s)


def decided(m: Mind, ix, query=None, **over) -> Decided:
    """What DECIDING hands on: the query the Golems recalled with (their stored context unless
    given), the target they chose, T0 and nothing novel."""
    ix = np.asarray(ix, dtype=np.int64)
    b = ix.size
    dd = dict(query=m.pop.ctx[ix].copy() if query is None else np.asarray(query, np.float32),
              target=np.full(b, 0.5), mem=np.zeros(b), tier=np.zeros(b, np.int64), nserved=np.zeros(b, np.int64),
              novelty=np.zeros(b, bool), recalled=np.zeros((b, 2)))
    dd.update({k: np.asarray(v) for k, v in over.items()})
    return Decided(**dd)


def acted(ix, exposure_before=0.0, dexp=0.0, traded=False) -> Acted:
    """What ACTING hands on: the exposure the Golem came to (before its trade) and its trade."""
    b = np.asarray(ix).size
    e = np.broadcast_to(np.asarray(exposure_before, dtype=np.float64), (b,)).copy()
    d = np.broadcast_to(np.asarray(dexp, dtype=np.float64), (b,)).copy()
    return Acted(exposure_before=e, dexp=d, traded=np.broadcast_to(np.asarray(traded), (b,)).copy(),
                 failed=np.zeros(b, bool), exposure_after=e + d, value_after=np.full(b, 10_000.0))


def written(out: TickOutput) -> dict[str, np.ndarray]:
    """All entry rows of a TickOutput as one table (empty arrays when none)."""
    if not out.entries:
        return {"kind": np.zeros(0, np.int16), "golem": np.zeros(0, np.int64)}
    keys = out.entries[0].keys()
    return {k: np.concatenate([np.atleast_1d(r[k]) for r in out.entries]) for k in keys if k != "refused"}


def events(out: TickOutput, kind: str) -> list[dict]:
    """The events of one kind in a TickOutput, batches expanded: dicts with golem_id, value, payload."""
    from golem.heartbeat import EventBatch
    rows = []
    for ev in out.events:
        if isinstance(ev, EventBatch):
            if ev.kind != kind:
                continue
            for i in range(len(ev)):
                pl = {k: (v[i].item() if isinstance(v, np.ndarray) else v[i]) for k, v in (ev.payload or {}).items()}
                rows.append(dict(golem_id=int(ev.golem_id[i]), value=float(ev.value[i]), payload=pl))
        elif ev["kind"] == kind:
            rows.append(ev)
    return rows
