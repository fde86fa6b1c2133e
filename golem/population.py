"""Golem state as arrays, one row per Golem (structure of arrays, DESIGN "Speed by shape").

A per-Golem object exists only as a view (`Population.view`) for notebooks and tests.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from golem.appraisal import OUTLOOK_BUCKETS

PHASES = ("thriving", "stable", "conservation", "declining", "terminal", "dead")
STRATEGIES = ("momentum", "mean_reversion", "hodl")
TIERS = ("T0", "T1", "T2")
SEVERITIES = ("none", "low", "medium", "high")
MARKER_REGIMES = 16         # the somatic markers tell apart at most 16 regimes (later ones share the 16th)
PATTERNS_PER_REGIME = 3 * 4  # return sign x probe severity
FB_RING = 8
HIST = 64


@dataclass
class Population:
    n: int
    clade: np.ndarray                 # int32 clade index
    clade_names: tuple[str, ...]
    asset: np.ndarray                 # int16 asset index
    strategy: np.ndarray              # int8
    baseline: np.ndarray              # (n, 3) temperament
    budget0: np.ndarray
    value0: np.ndarray
    n_regimes: int = 16               # the market's regimes (regime codes are below it)
    trend_scale: np.ndarray | None = None   # per-Golem strategy parameters (individual differences)
    memory_weight: np.ndarray | None = None
    risk: np.ndarray | None = None          # scales the maximum exposure
    interval_s: np.ndarray | None = None    # heartbeat cadence (volatility is judged per tick of it)
    golem_id: np.ndarray = field(init=False)
    pad: np.ndarray = field(init=False)            # (n, 3) emotion (fast PAD, minutes), float64
    mood: np.ndarray = field(init=False)           # (n, 3) mood (slow PAD, hours), rests at baseline
    cash: np.ndarray = field(init=False)
    units: np.ndarray = field(init=False)
    budget: np.ndarray = field(init=False)
    alive: np.ndarray = field(init=False)
    phase: np.ndarray = field(init=False)
    tick: np.ndarray = field(init=False)
    last_price: np.ndarray = field(init=False)
    last_value: np.ndarray = field(init=False)
    last_ms: np.ndarray = field(init=False)        # time of the last awake tick (affect's dt)
    r2_hist: np.ndarray = field(init=False)        # (n, HIST) squared log-return of each recent tick, ring
    dt_hist: np.ndarray = field(init=False)        # (n, HIST) the seconds each of those returns spans
    t_hist: np.ndarray = field(init=False)         # (n, HIST) when each was seen (ms)
    lp_ema: np.ndarray = field(init=False)         # EW mean of the log price (control's trend)
    out_open: np.ndarray = field(init=False)       # (n, OUTLOOK_BUCKETS) first value of each outlook bucket
    out_high: np.ndarray = field(init=False)       # (n, OUTLOOK_BUCKETS) highest value of each bucket
    out_bucket: np.ndarray = field(init=False)     # outlook bucket of the last tick (-1: none yet)
    trade_ms: np.ndarray = field(init=False)       # the last filled trade: when, at what price, how much
    trade_price: np.ndarray = field(init=False)
    trade_dexp: np.ndarray = field(init=False)
    danger_ms: np.ndarray = field(init=False)      # the last time a high-severity probe was seen
    imp_a: np.ndarray = field(init=False)          # fading arousal of regime shifts and own position changes
    imp_d: np.ndarray = field(init=False)          # fading control of trades that filled or failed
    next_dream_ms: np.ndarray = field(init=False)  # the first tick at or after this time is a dream
    price_hist: np.ndarray = field(init=False)     # (n, HIST) recent prices, ring
    exp_sign: np.ndarray = field(init=False)       # expected sign of the last decision
    last_action: np.ndarray = field(init=False)    # +1 filled, -1 failed, 0 none
    last_dexp: np.ndarray = field(init=False)
    last_mem: np.ndarray = field(init=False)       # memory signal of the last decision
    recalled: np.ndarray = field(init=False)       # (n, 2) P, A the last decision's recall evoked (SPEC 2.1)
    loss_bits: np.ndarray = field(init=False)      # last ticks (emotion.recurring_loss_window): losing? (bit mask)
    failed_attempts: np.ndarray = field(init=False)
    high_a_run: np.ndarray = field(init=False)
    fb_times: np.ndarray = field(init=False)       # (n, FB_RING) flashbulb times (ms), ring
    regime_seen: np.ndarray = field(init=False)    # (n, n_regimes) last tick each regime was seen
    last_regime: np.ndarray = field(init=False)
    protocol_seen: np.ndarray = field(init=False)  # (n, entities) sighted protocols/pools/counterparties (Mind.entities)
    neg_share: np.ndarray = field(init=False)      # (n, retrieval.rumination_window) negative share of the last retrievals
    drove: np.ndarray = field(init=False)          # (n, k) slots that drove the last decision
    drove_sign: np.ndarray = field(init=False)     # (n, k) their outcome signs
    ctx: np.ndarray = field(init=False)            # (n, d) context of the previous tick
    ctx_topic: np.ndarray = field(init=False)
    som_sum: np.ndarray = field(init=False)        # (n, P) somatic marker valence (EW mean of episodes)
    som_cnt: np.ndarray = field(init=False)        # (n, P) strength: episodes that formed the marker
    som_arousal: np.ndarray = field(init=False)    # (n, P) urgency: EW mean arousal
    som_target: np.ndarray = field(init=False)     # (n, P) cached response (target exposure)
    som_emotion: np.ndarray = field(init=False)    # (n, P, 9) emotion counts
    dead_ms: np.ndarray = field(init=False)
    contrarian_pending: np.ndarray = field(init=False)   # (n, contrarian.top_k) overlooked slots for the next DECIDING
    curator_last_ms: np.ndarray = field(init=False)  # time of the last curator pass
    contrarian_from: np.ndarray = field(init=False)  # tick the pending overlooked section was found

    def __post_init__(self) -> None:
        n = self.n
        self.trend_scale = np.ones(n) if self.trend_scale is None else self.trend_scale
        self.memory_weight = np.ones(n) if self.memory_weight is None else self.memory_weight
        self.risk = np.ones(n) if self.risk is None else self.risk
        self.interval_s = np.full(n, 300.0) if self.interval_s is None else self.interval_s
        self.golem_id = np.arange(n, dtype=np.int64)
        self.pad = np.zeros((n, 3))
        self.mood = np.array(self.baseline, dtype=np.float64, copy=True)
        self.cash = np.zeros(n)
        self.units = np.zeros(n)
        self.budget = self.budget0.astype(np.float64).copy()
        self.alive = np.ones(n, dtype=bool)
        self.phase = np.zeros(n, dtype=np.int8)
        self.tick = np.zeros(n, dtype=np.int64)
        self.last_price = np.full(n, np.nan)
        self.last_value = self.value0.astype(np.float64).copy()
        self.last_ms = np.zeros(n, dtype=np.int64)
        self.r2_hist = np.zeros((n, HIST))
        self.dt_hist = np.zeros((n, HIST))
        self.t_hist = np.full((n, HIST), np.iinfo(np.int64).min // 2, dtype=np.int64)
        self.lp_ema = np.full(n, np.nan)
        self.out_open = np.zeros((n, OUTLOOK_BUCKETS))
        self.out_high = np.zeros((n, OUTLOOK_BUCKETS))
        self.out_bucket = np.full(n, -1, dtype=np.int64)
        self.trade_ms = np.zeros(n, dtype=np.int64)
        self.trade_price = np.full(n, np.nan)
        self.trade_dexp = np.zeros(n)
        self.danger_ms = np.full(n, np.iinfo(np.int64).min // 2, dtype=np.int64)
        self.imp_a = np.zeros(n)
        self.imp_d = np.zeros(n)
        self.next_dream_ms = np.zeros(n, dtype=np.int64)
        self.price_hist = np.full((n, HIST), np.nan)
        self.exp_sign = np.zeros(n, dtype=np.int8)
        self.last_action = np.zeros(n, dtype=np.int8)
        self.last_dexp = np.zeros(n)
        self.last_mem = np.zeros(n)
        self.recalled = np.zeros((n, 2))
        self.loss_bits = np.zeros(n, dtype=np.int64)
        self.failed_attempts = np.zeros(n, dtype=np.int64)
        self.high_a_run = np.zeros(n, dtype=np.int64)
        self.fb_times = np.full((n, FB_RING), np.iinfo(np.int64).min // 2, dtype=np.int64)
        self.regime_seen = np.full((n, self.n_regimes), -(10**9), dtype=np.int64)
        self.last_regime = np.full(n, -1, dtype=np.int16)
        self.protocol_seen = np.zeros((n, 64), dtype=bool)
        self.neg_share = np.zeros((n, 3))
        self.drove = np.full((n, 8), -1, dtype=np.int64)
        self.drove_sign = np.zeros((n, 8), dtype=np.int8)
        self.ctx = np.zeros((n, 1), dtype=np.float32)
        self.ctx_topic = np.zeros(n, dtype=np.int32)
        # one marker per pattern of the regimes this market has (regime-major), not of all 16: at
        # 64 bytes a pattern, 16 regimes' markers were most of a Golem's state beside its Grimoire
        P = min(self.n_regimes, MARKER_REGIMES) * PATTERNS_PER_REGIME
        self.som_sum = np.zeros((n, P))
        self.som_cnt = np.zeros((n, P), dtype=np.int32)
        self.som_arousal = np.zeros((n, P))
        self.som_target = np.full((n, P), np.nan)
        self.som_emotion = np.zeros((n, P, 9), dtype=np.int32)
        self.dead_ms = np.full(n, -1, dtype=np.int64)
        self.contrarian_pending = np.full((n, 3), -1, dtype=np.int64)
        self.curator_last_ms = np.full(n, np.iinfo(np.int64).min // 2, dtype=np.int64)
        self.contrarian_from = np.full(n, -1, dtype=np.int64)

    def value(self, price: np.ndarray, ix=slice(None)) -> np.ndarray:
        return self.cash[ix] + self.units[ix] * price

    def view(self, g: int) -> dict:
        """One Golem as a plain dict, for notebooks and tests."""
        return {name: (val[g].tolist() if hasattr(val[g], "tolist") else val[g])
                for name, val in vars(self).items() if isinstance(val, np.ndarray) and val.shape[:1] == (self.n,)}
