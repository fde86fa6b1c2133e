"""The market (SPEC §12): a regime-switching price process with jumps, gas, TVL and scheduled
events, generated once per run into a `Tape`; probes read the events with per-Golem lags.

Generating the whole tape up front means a run, its replay and every counterfactual read the very
same market; a real recorded tape (sim.tapes) plugs in at the same place.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from golem.rng import uniform as hash_uniform_array

SEVERITIES = ("none", "low", "medium", "high")
EVENT_KINDS = ("exploit", "rug_pull", "depeg", "gas_spike", "oracle_failure", "flash_crash", "liquidation",
               "crash_bar", "pump_bar", "funding_extreme", "volatility_spike")
#: default token descriptions per event kind (the reflex lane matches these)
EVENT_TOKENS = {
    "exploit": "exploit drained-pool anonymous-deployer",
    "rug_pull": "rug-pull liquidity-removed anonymous-deployer",
    "depeg": "depeg stablecoin peg-break",
    "gas_spike": "gas-spike mempool-congestion",
    "oracle_failure": "oracle-failure stale-price",
    "flash_crash": "flash-crash cascade liquidations",
    "liquidation": "liquidation cascade",
}


@dataclass(frozen=True)
class MarketEvent:
    """A scheduled (or detected) market event and how the probes see it."""

    time_ms: int
    kind: str
    asset: int            # index into Tape.assets; -1 = market-wide
    severity: int         # 0..3 (none..high)
    impact: float         # total log-return applied to the asset over the duration
    duration_ms: int
    tokens: str
    detect_lag_ms: int = 0
    detect_jitter_ms: int = 0
    early_detectors: tuple[int, ...] = ()

    def lags_for(self, seed: int, golem_ids: np.ndarray, event_index: int) -> np.ndarray:
        """Each Golem's probe lag (ms) for this event: 0 for early detectors, else lag + U(0, jitter)."""
        u = hash_uniform_array(seed, golem_ids, event_index, 7)
        lag = self.detect_lag_ms + (u * self.detect_jitter_ms).astype(np.int64)
        return np.where(np.isin(golem_ids, self.early_detectors), 0, lag)


@dataclass
class Tape:
    """Recorded market: bars per (step, asset); bar i is known from time_ms[i] + bar_ms on."""

    time_ms: np.ndarray          # (T,) int64 bar open time
    bar_ms: int
    assets: tuple[str, ...]
    protocols: tuple[str, ...]   # protocol (pool) of each asset
    open: np.ndarray             # (T, A)
    high: np.ndarray
    low: np.ndarray
    close: np.ndarray
    volume: np.ndarray
    tvl: np.ndarray              # (T, A)
    gas: np.ndarray              # (T,) gwei
    funding: np.ndarray          # (T,) nan where absent
    regime: np.ndarray           # (T,) int16
    regime_names: tuple[str, ...]
    events: list[MarketEvent] = field(default_factory=list)
    #: (A,) each asset's normal log-return volatility per `normal_interval_ms` (arousal's reference
    #: under `appraisal.reference_vol: auto`): declared by a generated market, measured on a real tape
    normal_vol: np.ndarray | None = None
    normal_interval_ms: int = 300_000
    normal_source: str = "declared"     #: how normal_vol was found (the manifest says it)

    def reference_rate(self, reference_vol, reference_interval_s: float) -> np.ndarray:
        """(A,) the reference volatility per sqrt(second): the tape's normal under 'auto', else the
        configured number (per reference_interval_s) for every asset. Scaled once, from its own interval."""
        if reference_vol == "auto":
            bad = [a for a, v in zip(self.assets, self.normal_vol if self.normal_vol is not None else [np.nan] * len(self.assets))
                   if not (np.isfinite(v) and v > 0)]
            if bad:
                raise ValueError(f"appraisal.reference_vol: auto: the tape gives no normal volatility for {bad} "
                                 f"({self.normal_source}); expected a number instead")
            return np.asarray(self.normal_vol, dtype=np.float64) / np.sqrt(self.normal_interval_ms / 1000.0)
        return np.full(len(self.assets), float(reference_vol) / np.sqrt(reference_interval_s))

    @property
    def n_steps(self) -> int:
        return self.time_ms.size

    def index_at(self, now_ms: int) -> int:
        """Last bar closed at or before now (no look-ahead); -1 before the first bar closes."""
        return int(np.searchsorted(self.time_ms + self.bar_ms, now_ms, side="right")) - 1

    def asset_index(self, name: str) -> int:
        return self.assets.index(name)


def generate(mcfg, duration_s: float, seed: int) -> Tape:
    """Draw a tape from the scenario's market section with the run's market generator stream."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(0,)))
    step_ms = int(mcfg.step_s * 1000)
    T = int(duration_s * 1000 // step_ms) + 2
    A = len(mcfg.assets)
    names = tuple(mcfg.regimes)
    drift = np.array([mcfg.regimes[n].drift for n in names])
    vol = np.array([mcfg.regimes[n].vol for n in names])
    jump_rate = np.array([mcfg.regimes[n].jump_rate for n in names])
    jump_size = np.array([mcfg.regimes[n].jump_size for n in names])

    # draws in bulk, in a fixed order, so the tape depends on (seed, scenario) alone
    z_common = rng.standard_normal(T)
    z_own = rng.standard_normal((T, A))
    u_leave = rng.random(T)
    u_next = rng.random(T)
    u_jump = rng.random((T, A))
    z_gas = rng.standard_normal(T)

    regime = _regime_path(mcfg, names, step_ms, u_leave, u_next)
    beta = np.array([a.beta for a in mcfg.assets])
    stable = np.array([a.stable for a in mcfg.assets])
    rho = mcfg.correlation
    shock = np.sqrt(rho) * z_common[:, None] + np.sqrt(1 - rho) * z_own
    logret = drift[regime][:, None] * beta + vol[regime][:, None] * np.where(stable, 0.02, beta) * shock
    jumps = (u_jump < jump_rate[regime][:, None]) * jump_size[regime][:, None] * beta
    logret += np.where(stable, 0.0, jumps)
    logret[0] = 0.0

    gas = mcfg.gas.base_gwei * np.exp(mcfg.gas.vol * z_gas)
    tvl_scale = np.ones((T, A))
    events = _scheduled_events(mcfg, step_ms, logret, gas, tvl_scale, beta, stable)

    p0 = np.array([a.price for a in mcfg.assets])
    close = p0 * np.exp(np.cumsum(logret, axis=0))
    opn = np.vstack([p0[None, :], close[:-1]])
    intra = np.abs(vol[regime])[:, None] * 0.5 * np.abs(z_own)
    high = np.maximum(opn, close) * np.exp(intra)
    low = np.minimum(opn, close) * np.exp(-intra)
    volume = np.abs(logret) * 1e6 + 1e4
    tvl = np.array([a.tvl for a in mcfg.assets])[None, :] * tvl_scale
    return Tape(time_ms=np.arange(T, dtype=np.int64) * step_ms, bar_ms=0,
                assets=tuple(a.name for a in mcfg.assets), protocols=tuple(a.protocol for a in mcfg.assets),
                open=opn, high=high, low=low, close=close, volume=volume, tvl=tvl, gas=gas,
                funding=np.full(T, np.nan), regime=regime, regime_names=names, events=events,
                normal_vol=mcfg.normal_vol * np.where(stable, 0.02, np.abs(beta)), normal_interval_ms=step_ms)


def _regime_path(mcfg, names: tuple[str, ...], step_ms: int, u_leave: np.ndarray, u_next: np.ndarray) -> np.ndarray:
    """The regime of each step: a Markov chain that leaves a regime with probability step /
    mean_duration (to its `next` weights, or any other regime alike), except where the schedule
    forces one."""
    T = u_leave.size
    ridx = {n: i for i, n in enumerate(names)}
    leave = np.array([min(1.0, mcfg.step_s / mcfg.regimes[n].mean_duration_s) for n in names])
    trans = np.zeros((len(names), len(names)))
    for i, n in enumerate(names):
        row = mcfg.regimes[n].next or {m: 1.0 for m in names if m != n}
        for m, w in row.items():
            trans[i, ridx[m]] = w
        trans[i] /= max(trans[i].sum(), 1e-12)
    forced = {int(f.at_s * 1000 // step_ms): ridx[f.regime] for f in mcfg.regime_schedule}
    regime = np.empty(T, dtype=np.int16)
    r = ridx[mcfg.initial_regime]
    for t in range(T):
        if t in forced:
            r = forced[t]
        elif t > 0 and u_leave[t] < leave[r]:
            r = int(np.searchsorted(np.cumsum(trans[r]), u_next[t], side="right"))
            r = min(r, len(names) - 1)
        regime[t] = r
    return regime


def _scheduled_events(mcfg, step_ms: int, logret: np.ndarray, gas: np.ndarray, tvl_scale: np.ndarray,
                      beta: np.ndarray, stable: np.ndarray) -> list[MarketEvent]:
    """The scenario's events, each written into the tape (in place: its impact spread over its
    duration, a gas spike's multiplier, an exploit's or rug pull's lost TVL, a depeg's recovery)
    and returned as the tape's `MarketEvent`s."""
    T = logret.shape[0]
    events: list[MarketEvent] = []
    for ev in mcfg.events:
        a = -1 if ev.asset is None else [x.name for x in mcfg.assets].index(ev.asset)
        t0 = int(ev.at_s * 1000 // step_ms)
        n_steps = max(1, int(ev.duration_s * 1000 // step_ms))
        sl = slice(t0, min(T, t0 + n_steps))
        if ev.impact:
            per = ev.impact / n_steps
            if a >= 0:
                logret[sl, a] += per
            else:
                logret[sl, :] += per * np.where(stable, 0.0, beta)
        if ev.kind == "gas_spike":
            gas[sl] *= ev.gas_multiplier
        if ev.kind in ("exploit", "rug_pull") and a >= 0:
            tvl_scale[t0:, a] *= 1.0 - min(0.95, abs(ev.impact))
        if ev.kind == "depeg" and a >= 0 and ev.recover:
            end = min(T, t0 + 2 * n_steps)
            logret[sl.stop:end, a] -= ev.impact / max(1, end - sl.stop)
        events.append(MarketEvent(
            time_ms=t0 * step_ms, kind=ev.kind, asset=a, severity=SEVERITIES.index(ev.severity),
            impact=ev.impact, duration_ms=n_steps * step_ms, tokens=ev.tokens or EVENT_TOKENS.get(ev.kind, ev.kind),
            detect_lag_ms=int(ev.detect_lag_s * 1000), detect_jitter_ms=int(ev.detect_jitter_s * 1000),
            early_detectors=tuple(ev.early_detectors)))
    return events


def probe_severity(tape: Tape, seed: int, golem_ids: np.ndarray, assets: np.ndarray, now_ms: int, since_ms=None):
    """Per Golem: max severity seen now on its asset or market-wide, and which events it sees.

    An event is visible to a Golem from time + its detect lag for the event's duration. A Golem sees
    the events visible now and those that became visible after its last look (`since_ms`, per Golem;
    default now) even if they are over: an event between two heartbeats, or during a dream, is seen
    at the next awake tick, once. Returns (severity (n,), indices into tape.events of the events some
    Golem sees (E,), sees (n, E) bool) for the reflex lane and segmentation.
    """
    n = golem_ids.size
    since = np.full(n, now_ms, dtype=np.int64) if since_ms is None else np.asarray(since_ms, dtype=np.int64)
    oldest = int(since.min()) if n else now_ms
    sev = np.zeros(n, dtype=np.int8)
    visible, cols = [], []
    for ei, ev in enumerate(tape.events):
        if now_ms < ev.time_ms or oldest > ev.time_ms + ev.duration_ms + ev.detect_lag_ms + ev.detect_jitter_ms:
            continue
        start = ev.time_ms + ev.lags_for(seed, golem_ids, ei)
        sees = (start <= now_ms) & ((now_ms <= start + ev.duration_ms) | (start > since))
        if ev.asset >= 0:
            sees &= assets == ev.asset
        if sees.any():
            visible.append(ei)
            cols.append(sees)
            sev = np.where(sees, np.maximum(sev, ev.severity), sev).astype(np.int8)
    return sev, np.array(visible, dtype=np.int64), np.stack(cols, axis=1) if cols else np.zeros((n, 0), dtype=bool)
