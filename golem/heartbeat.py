"""The heartbeat FSM (SPEC §5): one tick for a cohort of Golems, one function per state.

SENSING -> DECIDING -> ACTING -> REFLECTING, each vectorised over the cohort and each handing the
next a frozen record of per-Golem arrays (`Sensed`, `Decided`, `Acted`, `Reflected`); retrieval is
one batched kernel call. The world hands in an `Observation` and gets rows out (`TickOutput`); no
SimPy, no files. Terminal Golems pass through TERMINAL and are DEAD afterwards.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

import numpy as np

from golem import appraisal, contrarian, dreams, flashbulb, kernels, mortality, reflex, trading
from golem import hooks as hookm
from golem import strategies as stratm
from golem import curator as curatorm
from golem import grimoire as gm
from golem import retrieval as rt
from golem.context import Lexicon, normalise, topic_code
from golem.memory_writer import KINDS, Candidates, write
from golem.plugins import CohortView
from golem.pad import EMOTION_CODES as EMOTION_NAMES
from golem.population import MARKER_REGIMES, Population
from golem.rng import mixed_seed, uniform

STATE_TICK = "SENSING>DECIDING>ACTING>REFLECTING"
#: a heartbeat row's `state_path` is a code into these (the recorder writes the names)
STATE_PATHS = (STATE_TICK, STATE_TICK + ">TERMINAL>DEAD", "DREAMING")
PATH_TICK, PATH_DEAD, PATH_DREAM = range(3)
K_PRICE, K_EVENT, K_TRADE, K_REGRET, K_DOMINANCE, K_FLASH, K_DEATH, K_INHERITED, K_LESSON, K_IMPORT, K_BACKCHECK = range(len(KINDS))
CAT = {name: i for i, name in enumerate(gm.CATEGORIES)}
ROLE_OBS, ROLE_ACT, ROLE_INS = range(3)


@dataclass
class Observation:
    """What the world shows a cohort at `now_ms` (market arrays are per asset)."""

    now_ms: int
    step: int
    close: np.ndarray
    tvl: np.ndarray
    gas: float
    gas_ref: float
    regime: int
    probe_sev: np.ndarray                 # per cohort Golem, 0..3
    events: list[tuple[str, int, str]]    # (kind, severity, tokens) of the events some cohort Golem sees now
    sees: np.ndarray                      # (cohort Golems, events) bool: Golem i sees events[e]
    event_assets: np.ndarray | None = None  # asset index of each event (-1 market-wide); None: all market-wide
    bars: dict[str, np.ndarray] | None = None   # the tape's columns, (steps, assets) or (steps,): plug-ins
                                                # read rows <= step (golem.plugins.CohortView.bars)
    ref_rate: np.ndarray | None = None    # (assets,) normal volatility per sqrt(second): arousal's reference

    def rows(self, keep: np.ndarray) -> "Observation":
        """The observation of the cohort Golems `keep` (a mask) only: the per-Golem parts cut to them."""
        return replace(self, probe_sev=self.probe_sev[keep], sees=self.sees[keep])

    def seeing(self, kinds) -> np.ndarray:
        """Per cohort Golem: does it see an event of one of `kinds`? (Most ticks have none of
        them and many one: those skip numpy's reduction over a short axis, ~15 us a cohort.)"""
        cols = [e for e, (k, _, _) in enumerate(self.events) if k in kinds]
        if len(cols) <= 1:
            return self.sees[:, cols[0]].copy() if cols else np.zeros(self.sees.shape[0], dtype=bool)
        return self.sees[:, cols].any(axis=1)


@dataclass
class EventBatch:
    """Events for many Golems at once, as columns (no other Golem): an item of
    `TickOutput.events` beside single-event dicts, recorded in its place in that list.

    `payload`, when given, holds the rows' payload objects as columns: key -> an array of one
    number or bool per row, a list of one list of ints per row, or such lists as a pair (values,
    offsets: row i holds values[offsets[i]:offsets[i + 1]]). Each row is recorded as the JSON a
    dict event's payload of those values would be.

    Rows of several kinds (in the order they happened, e.g. each curator pass followed by its
    reflex proposals): `kind` is a tuple of kinds, `kind_code` each row's index into it, and
    `payload` a tuple of one such dict per kind, its columns spanning all rows and read at that
    kind's rows only."""
    time_ms: int
    kind: str | tuple[str, ...]
    golem_id: np.ndarray
    clade_id: np.ndarray
    tick: np.ndarray
    entry_id: np.ndarray
    value: np.ndarray
    payload: dict | tuple[dict, ...] | None = None
    kind_code: np.ndarray | None = None

    def __len__(self) -> int:
        return self.golem_id.size


@dataclass
class TickOutput:
    heartbeats: dict[str, np.ndarray] = field(default_factory=dict)
    retrievals: dict[str, np.ndarray] = field(default_factory=dict)
    entries: list[dict[str, np.ndarray]] = field(default_factory=list)
    events: list[dict | EventBatch] = field(default_factory=list)
    snapshots: list[dict] = field(default_factory=list)
    pushes: list[dict] = field(default_factory=list)


@dataclass(frozen=True)
class Sensed:
    """What SENSING hands on: the tick's appraisal, one value (or row) per cohort Golem."""
    asset: np.ndarray
    """asset index the Golem trades (int64)"""
    price: np.ndarray
    """its asset's close now"""
    ret: np.ndarray
    """the price's return since the Golem's last awake tick (0 on its first)"""
    value: np.ndarray
    """book value (cash + units x price) before this tick's trade"""
    tick_pnl: np.ndarray
    """the book's change since the last awake tick (0 on the first)"""
    vol_ratio: np.ndarray
    """realised volatility over the window against the asset's normal"""
    regime: np.ndarray
    """the market regime now (int64, one per Golem)"""
    regime_shift: np.ndarray
    """the regime differs from the one the Golem last saw"""
    new_regime: np.ndarray
    """a shift into a regime not seen for flashbulb.regime_lookback_ticks"""
    sev: np.ndarray
    """probe severity 0..3 (int64)"""
    danger: np.ndarray
    """a high probe now or within decision.danger_cooloff_s: stay out"""
    pad: np.ndarray
    """(n, 3) the emotion after this tick's stimulus: the tag of what is written"""
    mood: np.ndarray
    """(n, 3) the mood after this tick: recall's query and reflection's emotional load"""
    truth: np.ndarray
    """the outcome part of P, the ground truth a harsh self-evaluation is checked against"""
    label: np.ndarray
    """discrete emotion label code (golem.grimoire.LABELS)"""
    emotion: np.ndarray
    """emotion code of the PAD octant (golem.pad.EMOTION_CODES)"""
    intensity: np.ndarray
    """the emotion's intensity"""
    recent_losses: np.ndarray
    """losing ticks in the last emotion.recurring_loss_window"""
    pattern: np.ndarray
    """the somatic marker's pattern code (regime, move sign, probe severity)"""
    neg_marker: np.ndarray
    """the pattern's marker is strong and negative (escalates to T1)"""
    pos_marker: np.ndarray
    """the pattern's marker is strong and positive (its cached target is served)"""
    marker_valence: np.ndarray
    """the pattern's marker valence (EW mean pleasure of its episodes)"""
    marker_strength: np.ndarray
    """episodes the pattern's marker has learned from"""
    tier: np.ndarray
    """inference tier from probe and marker (0 T0, 1 T1, 2 T2), before novelty"""
    first: np.ndarray
    """the Golem's first awake tick: no return or episode behind it yet"""
    triggers: np.ndarray
    """(n, 4) which flashbulb triggers hold now (flashbulb.TRIGGERS): the context's topics and the
    flashbulb check read them"""
    reflex: dict
    """cohort row -> slots of the reflexes that fired in this tick's reflex lane"""


@dataclass(frozen=True)
class Decided:
    """What DECIDING hands on (the retrieval row itself goes to `TickOutput.retrievals`)."""
    query: np.ndarray
    """(n, dim) the context embedding recalled with; the next tick files its episode under it"""
    target: np.ndarray
    """target exposure chosen"""
    mem: np.ndarray
    """memory signal: outcome of similar past contexts, weighted by score x confidence"""
    tier: np.ndarray
    """inference tier with novelty included"""
    nserved: np.ndarray
    """entries served by recall"""
    novelty: np.ndarray
    """nothing in memory resembles the situation"""
    recalled: np.ndarray
    """(n, 2) the P and A the entries considered evoke (SPEC §2.1): they enter the next emotion update"""


@dataclass(frozen=True)
class Acted:
    """What ACTING hands on: the trade and the book after it."""
    exposure_before: np.ndarray
    """the exposure the Golem came to (before its trade)"""
    dexp: np.ndarray
    """exposure change asked for (target - exposure_before)"""
    traded: np.ndarray
    """a trade filled"""
    failed: np.ndarray
    """a trade was attempted and failed"""
    value_after: np.ndarray
    """book value after the trade and its costs"""
    exposure_after: np.ndarray
    """exposure after the trade"""


@dataclass(frozen=True)
class Reflected:
    """What REFLECTING hands on to the heartbeat row."""
    n_written: np.ndarray
    """entries the writer stored for the Golem this tick"""
    tier: np.ndarray
    """inference tier paid, a flashbulb's forced T2 included"""
    flashbulb: np.ndarray
    """a flashbulb fired"""


class Mind:
    """The population's cognition: config, state arrays, Grimoire and the per-state functions."""

    def __init__(self, cfg, pop: Population, gr: gm.Grimoire, assets: tuple[str, ...], regime_names: tuple[str, ...],
                 seed: int, protocols: tuple[str, ...] | None = None, strategies: stratm.StrategyTable | None = None,
                 hooks: hookm.HookTable | None = None):
        self.cfg = cfg
        # plug-ins (golem.plugins): pop.strategy codes index the strategies; hooks add to the stimulus
        self.strategies = strategies if strategies is not None else stratm.StrategyTable.builtins()
        self.hooks = hooks if hooks is not None else hookm.HookTable()
        self.pop = pop
        self.gr = gr
        self.assets = assets
        self.regime_names = regime_names
        self.seed = seed
        self.z0 = mixed_seed(seed)         # the seed as the kernels that draw take it (golem.rng.draw)
        self.lex = Lexicon(gr.dim, seed)
        self.prm = rt.RetrievalParams.from_config(cfg)
        self.protos = appraisal.prototype_matrix()
        self.risk_table = appraisal.risk_table(cfg.decision.risk_by_emotion)
        if pop.ctx.shape[1] != gr.dim:
            pop.ctx = np.zeros((pop.n, gr.dim), dtype=np.float32)
            pop.drove = np.full((pop.n, self.prm.top_k), -1, dtype=np.int64)
            pop.drove_sign = np.zeros((pop.n, self.prm.top_k), dtype=np.int8)
        # state sized by the config (Population allocates the spec defaults)
        n = pop.n
        if pop.contrarian_pending.shape[1] != cfg.contrarian.top_k:
            pop.contrarian_pending = np.full((n, cfg.contrarian.top_k), -1, dtype=np.int64)
        if pop.neg_share.shape[1] != cfg.retrieval.rumination_window:
            pop.neg_share = np.zeros((n, cfg.retrieval.rumination_window))
        ring = max(1, cfg.reflex.promotion_min)
        if gr.act_ring != ring:
            gr.keep_acts(ring)
        gr.protect = cfg.grimoire.protected_salience
        #: first sightings (SPEC §3.3): entity name ("protocol:aave", "counterparty:0xdead") -> its
        #: column of pop.protocol_seen, in order of first appearance
        self.entities: dict[str, int] = {}
        self.flashbulbs = np.zeros(n, dtype=np.int64)   # flashbulbs fired per Golem, over its life
        self.protocols = protocols or tuple(a.lower() for a in assets)
        self.gas_level = "normal"
        self.im = None
        if cfg.retrieval.mode == "somatic_hdc":
            from golem import hdc
            self.im = hdc.ItemMemory(cfg.hdc.seed)
            if gr.fp is None:
                gr.fp = np.zeros((gr.n_golems * gr.capacity, hdc.N_WORDS), dtype=np.uint64)
            gr.on_insert = self._fingerprint
        # each Golem's phase of the day for its dreams (counter-based: adding Golems shifts no one)
        pop.next_dream_ms[:] = np.floor(uniform(seed, pop.golem_id, 0, 13) * cfg.dream.every_s * 1000).astype(np.int64)
        self.pending_entries: list = []    # rows written outside the tick batch (curator lessons)
        self.topics: dict[int, str] = {}   # topic code -> name, for lessons and reports

    # ------------------------------------------------------------------ SENSING
    def sense(self, ix: np.ndarray, obs: Observation) -> Sensed:
        """Appraise the tick (SPEC §5 SENSING): the move, its volatility, the events and the Golem's
        own trades make a stimulus; the emotion (PAD) and the mood follow it; then the label, the
        somatic marker of the tick's pattern, the reflex lane and the inference tier."""
        cfg, pop = self.cfg, self.pop
        ap = cfg.appraisal
        # affect lives in simulated time: dt since this Golem's last awake tick (a dream in between included)
        (asset, price, first, ratio, ret, value, tick_pnl, dt_s, regime_shift, new_regime, sev, danger,
         sgn) = appraisal.what_happened(np.ascontiguousarray(ix, dtype=np.int64), obs.close, pop.asset, pop.last_price,
                                        pop.cash, pop.units, pop.last_value, pop.interval_s, pop.last_ms,
                                        pop.last_regime, pop.tick, pop.regime_seen, pop.danger_ms, obs.probe_sev,
                                        obs.now_ms, obs.regime, cfg.flashbulb.regime_lookback_ticks,
                                        cfg.decision.danger_cooloff_s * 1000.0)
        vol_ratio, peak = self._price_history(ix, obs, asset, price, np.log(ratio), dt_s, first)
        regime = np.full(ix.size, obs.regime, dtype=np.int64)
        self.gas_level = "spiking" if obs.gas > 3.0 * obs.gas_ref else "normal"
        stim, truth = self._stimulus(ix, obs, price, value, tick_pnl, dt_s, vol_ratio, peak, sev, regime_shift, sgn,
                                     first)
        stim = self.hooks.add(self, ix, obs, stim)   # appraisal hooks (golem.hooks): + their (n, 3) terms, clipped
        # take: a quarter of fancy indexing's time on rows
        pad = appraisal.emotion_update(pop.pad.take(ix, axis=0), stim, dt_s, ap.emotion_half_life_s)
        pop.pad[ix] = pad
        mood = appraisal.mood_update(pop.mood.take(ix, axis=0), pad, pop.baseline.take(ix, axis=0), dt_s,
                                     ap.mood_half_life_s)
        pop.mood[ix] = mood
        p, a, d = pad[:, 0], pad[:, 1], pad[:, 2]
        em, sm = cfg.emotion, cfg.somatic
        label, recent_losses, pattern, strength, valence, neg_marker, pos_marker, tier = appraisal.label_marker_tier(
            np.ascontiguousarray(ix, dtype=np.int64), p, a, tick_pnl, sev, regime, sgn, em.recurring_loss_window,
            em.recurring_loss_min, em.success_after_failures, em.risk_arousal, cfg.flashbulb.arousal, MARKER_REGIMES,
            sm.min_strength, sm.negative_valence, sm.positive_valence, pop.loss_bits, pop.failed_attempts,
            pop.high_a_run, pop.som_cnt, pop.som_sum, pop.som_target)
        fired = reflex.lane(self, ix, obs, self._out)
        # the emotion's arousal and the run of high arousal as this tick left them (SPEC §2.1, §6)
        trig = flashbulb.triggers(cfg, a, pop.high_a_run[ix], tick_pnl, value, new_regime, sev)
        return Sensed(asset=asset, price=price, ret=ret, value=value, tick_pnl=tick_pnl, vol_ratio=vol_ratio,
                      regime=regime, regime_shift=regime_shift, new_regime=new_regime, sev=sev, danger=danger, pad=pad,
                      mood=mood, truth=truth, label=label,
                      emotion=appraisal.classify_batch(p, a, d, self.protos, cfg.emotion.neutral_norm),
                      intensity=appraisal.intensity_batch(p, a, d), recent_losses=recent_losses, pattern=pattern,
                      neg_marker=neg_marker, pos_marker=pos_marker, marker_valence=valence, marker_strength=strength,
                      tier=tier, first=first, triggers=trig, reflex=fired)

    def _price_history(self, ix: np.ndarray, obs: Observation, asset: np.ndarray, price: np.ndarray,
                       lr: np.ndarray, dt_s: np.ndarray, first: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Record the tick in the Golem's price history; return the realised volatility over the last
        vol_window_s (at least vol_min_returns returns) against the asset's normal, and the peak
        price the stop compares with (`appraisal.price_history`)."""
        pop, ap = self.pop, self.cfg.appraisal
        return appraisal.price_history(ix, pop.tick, price, lr, dt_s, first, obs.now_ms, ap.vol_window_s * 1000.0,
                                       ap.vol_min_returns, obs.ref_rate[asset], ap.stop_window_s * 1000.0,
                                       pop.price_hist, pop.r2_hist, pop.dt_hist, pop.t_hist, pop.trade_ms)

    def _stimulus(self, ix: np.ndarray, obs: Observation, price: np.ndarray, value: np.ndarray, tick_pnl: np.ndarray,
                  dt_s: np.ndarray, vol_ratio: np.ndarray, peak: np.ndarray, sev: np.ndarray,
                  regime_shift: np.ndarray, sgn: np.ndarray, first: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The tick's stimulus (n, 3), before hooks (golem.appraisal.stimulus), and the outcome part
        of P: the ground truth a harsh self-evaluation is checked against (SPEC §5). The last
        decision's prediction is checked here, and the entries that drove it validated."""
        pop, ap = self.pop, self.cfg.appraisal
        es = pop.exp_sign[ix].astype(np.int64)
        prediction = np.where((es == 0) | first | (sgn == 0), 0, np.where(sgn == es, 1, -1))
        self._validate_drivers(ix, sgn)
        # a heuristic is contradicted when memory spoke clearly (|signal| >= 0.5) and the market disagreed
        lm = pop.last_mem[ix]
        contradicted = ((np.abs(lm) >= 0.5) & (sgn != 0) & (np.sign(lm) != sgn)).astype(np.float64)
        shock = self._shock(ix, obs, price, peak)
        control, worked = self._control(ix, obs, price, value, dt_s)
        look = appraisal.outlook(pop, ix, value, obs.now_ms, ap.outlook_window_s)
        pnl_rate = tick_pnl / np.maximum(value, 1e-9) * (ap.reference_interval_s / dt_s)
        # what happened since the last look, fading in simulated time: regime shifts and large own
        # position changes (A), trades that filled or failed (D)
        pos_change = (np.abs(pop.last_dexp[ix]) >= ap.position_change_min).astype(np.float64)
        act = pop.last_action[ix]
        imp_a, pop.imp_a[ix] = appraisal.impulse(pop.imp_a[ix], ap.regime_shift_arousal * regime_shift
                                                 + ap.position_change_arousal * pos_change, dt_s, ap.impulse_half_life_s)
        imp_d, pop.imp_d[ix] = appraisal.impulse(pop.imp_d[ix], ap.action_success * (act > 0)
                                                 - ap.failed_transaction * (act < 0), dt_s, ap.impulse_half_life_s)
        out = appraisal.outcome(ap, pnl_rate, look)
        sp, sa, sd = appraisal.stimulus(ap, outcome=out, prediction=prediction, contradicted=contradicted,
                                        vol_ratio=vol_ratio, probe_sev=sev, impulse_a=imp_a, impulse_d=imp_d,
                                        control=control, worked=worked, shock=shock, recalled=pop.recalled[ix])
        return np.stack([sp, sa, sd], axis=1), np.tanh(out)

    def _shock(self, ix: np.ndarray, obs: Observation, price: np.ndarray, peak: np.ndarray) -> np.ndarray:
        """A held position hit: an exploit or rug pull on its asset, a liquidation, or a stop
        breached (price more than stop_loss below its `peak` over the last stop_window_s, since the
        position was last changed: a fresh position is not stopped out by the prices before it)."""
        pop, ap = self.pop, self.cfg.appraisal
        held = pop.units[ix] > 1e-12
        exploit_held = held & obs.seeing(("exploit", "rug_pull"))
        liquidation = held & obs.seeing(("liquidation",))
        stop = held & (price < (1.0 - ap.stop_loss) * peak)
        return np.maximum.reduce([stop * ap.stop_breach, exploit_held * ap.exploit_held, liquidation * ap.liquidation])

    def _control(self, ix: np.ndarray, obs: Observation, price: np.ndarray, value: np.ndarray,
                 dt_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Control: the held position against its asset's trend (log price minus its EW mean), and
        how the last filled trade has worked since (a sale before a fall, a purchase before a rise)."""
        pop, ap = self.pop, self.cfg.appraisal
        llp = np.log(price)
        rho_c = appraisal.decay(dt_s, ap.control_half_life_s)
        ema = np.where(np.isnan(pop.lp_ema[ix]), llp, rho_c * pop.lp_ema[ix] + (1.0 - rho_c) * llp)
        pop.lp_ema[ix] = ema
        exposure = np.where(value > 0, pop.units[ix] * price / np.maximum(value, 1e-12), 0.0)
        traded = pop.trade_dexp[ix] != 0
        since_trade = np.log(price / np.where(traded, pop.trade_price[ix], price))
        worked = np.tanh(ap.k_worked * pop.trade_dexp[ix] * since_trade) * appraisal.decay(
            (obs.now_ms - pop.trade_ms[ix]) / 1000.0, ap.control_half_life_s)
        return exposure * (llp - ema), np.where(traded, worked, 0.0)

    def _validate_drivers(self, ix: np.ndarray, sgn: np.ndarray) -> None:
        """Confidence propagation (SPEC §3.4) for the entries that drove the last decision:
        +0.10 when the market moved as they said, -0.20 when it moved against them."""
        pop, c, cf = self.pop, self.gr.cols, self.cfg.confidence
        kernels.validate_drivers(np.ascontiguousarray(ix, dtype=np.int64), pop.drove, pop.drove_sign,
                                 np.ascontiguousarray(sgn, dtype=np.int64), c["id"], c["confidence"], cf.validation,
                                 cf.contradiction)

    # ------------------------------------------------------------------ DECIDING
    def decide(self, ix: np.ndarray, obs: Observation, s: Sensed, out: TickOutput) -> Decided:
        """Recall and choose (SPEC §4, §5 DECIDING): the context query, mood-congruent retrieval,
        anti-rumination, reactivation, the memory signal, the strategy's target exposure and the
        tier; the retrieval row goes to `out`."""
        cfg, gr = self.cfg, self.gr
        query = self._query(obs, s)
        topics = self.context_topics(ix, obs, s)
        res = self._recall(ix, obs, s, query)
        fired, safe, nserved = self._anti_rumination(ix, obs, s, query, res, out)
        # touch, acted-on counts and act times of the served entries (they drive this decision),
        # and their columns: sc[name] = c[name][safe] after that; in the same pass reactivation
        # (SPEC §2.6): a served tagged entry whose context matches (cosine >= 0.8, same topic)
        sc = rt.recall(gr, res.slots, res.shadow, obs.now_ms, res.tagged, res.factors, topics,
                       cfg.decay.reactivation_cosine)
        react = sc["reactivated"]
        recalled = self._recalled_feeling(ix, obs, res)
        mem, mem_without, pending = self._memory_signal(ix, s, res, sc)
        target, changed = self._target(ix, obs, s, res, sc, mem, mem_without, pending)
        contra_ids = self._contrarian_weighed(ix, pending)
        # novel: nothing in memory resembles the situation (the pool's best semantic match, SPEC §5)
        novelty = res.pool[:, kernels.POOL_BEST_SEMANTIC] < cfg.escalation.novelty_threshold
        tier = np.maximum(s.tier, np.where(novelty & ~s.pos_marker, 1, 0))
        out.retrievals = self._retrieval_row(ix, obs, s, res, sc, safe, fired, react, mem, changed, contra_ids)
        return Decided(query=query, target=target, mem=mem, tier=tier, nserved=nserved, novelty=novelty,
                       recalled=recalled)

    def _recalled_feeling(self, ix: np.ndarray, obs: Observation, res: rt.RetrievalResult) -> np.ndarray:
        """What the entries this decision considers evoke (SPEC §2.1 recalled feeling): the served top-k, after
        reactivation, and the pending contrarian section (`appraisal.recalled_rows`); it is kept for the next
        emotion update. (n, 2) P, A."""
        c, dc = self.gr.cols, self.cfg.decay
        out = appraisal.recalled_rows(np.ascontiguousarray(ix, dtype=np.int64), res.slots, res.scores,
                                      self.pop.contrarian_pending, c["has_tag"], c["p"], c["a"], c["i0"],
                                      c["created_ms"], c["reactivated"], c["last_react_ms"], c["id"],
                                      np.int64(obs.now_ms), dc.half_life_days * 86_400_000.0,
                                      float(dc.reactivation_boost), np.empty((ix.size, 2)))
        self.pop.recalled[ix] = out
        return out

    def _query(self, obs: Observation, s: Sensed) -> np.ndarray:
        """The context embedding: asset, regime, move and volatility, plus a token for each kind of
        event the Golem sees (in sorted order). Golems of one context key that see the same kinds
        have the same vector: each distinct one is built and normalised once, then gathered (the
        same bits, as every row's arithmetic is its own)."""
        kinds = sorted({k for k, _, _ in obs.events})
        key = self.lex.context_keys(s.asset, s.regime, s.ret, s.vol_ratio)
        seen = np.stack([obs.seeing((kind,)) for kind in kinds], axis=1) if kinds else np.zeros((key.size, 0), bool)
        code = key
        for j in range(len(kinds)):      # (code, seen) pairs renumbered after each kind: no overflow
            code = np.unique(code * 2 + seen[:, j], return_inverse=True)[1]
        _, first, inv = np.unique(code, return_index=True, return_inverse=True)
        base = self.lex.contexts(list(self.assets), s.asset[first], list(self.regime_names), s.regime[first],
                                 s.ret[first], s.vol_ratio[first])
        for j, kind in enumerate(kinds):
            rows = seen[first, j]
            base[rows] = self.lex.with_tokens(base[rows], [f"event:{kind}"], 1.5)
        return normalise(base)[inv.ravel()]

    def _recall(self, ix: np.ndarray, obs: Observation, s: Sensed, query: np.ndarray) -> rt.RetrievalResult:
        """One batched retrieval for the cohort, by retrieval.mode and retrieval.profile: HDC
        fingerprints, the six-factor profile, or mood-congruent recall (SPEC §4.1)."""
        cfg, gr = self.cfg, self.gr
        if cfg.retrieval.mode == "somatic_hdc":
            mood = s.mood
            fps = self.fingerprints(mood[:, 0], mood[:, 1], mood[:, 2], s.emotion, s.intensity, s.regime, s.asset)
            return rt.retrieve_somatic_hdc(gr, ix, query, s.mood, obs.now_ms, self.prm, fps)
        if cfg.retrieval.profile == "six_factor":
            ev_topics = [{topic_code(f"{self.assets[a]}/{k}") for (k, _, _), seen in zip(obs.events, row) if seen}
                         for a, row in zip(s.asset, obs.sees)]
            return rt.retrieve_six(gr, ix, query, s.mood, obs.now_ms, self.prm, rt.six_factor_weights(cfg),
                                   s.asset, obs.regime, ev_topics)
        return rt.retrieve(gr, ix, query, s.mood, obs.now_ms, self.prm)

    def _anti_rumination(self, ix: np.ndarray, obs: Observation, s: Sensed, query: np.ndarray, res: rt.RetrievalResult,
                         out: TickOutput) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Anti-rumination (SPEC §4.3): when the last retrievals were each mostly negative, a served
        entry is replaced by a non-negative one from the pool (in `res`, in place; one event each);
        this retrieval's negative share joins the window. Returns (which Golems it fired for, the
        served slots with 0 where none, entries served per Golem)."""
        cfg, pop, c = self.cfg, self.pop, self.gr.cols
        slots = res.slots
        tagged, val = res.tagged, res.valence   # = served & has_tag[safe], where(tagged, p[safe], 0)
        ix = np.ascontiguousarray(ix, dtype=np.int64)
        guard = kernels.rumination_guard(ix, pop.neg_share, float(cfg.retrieval.rumination_negative_share))
        if not cfg.retrieval.anti_rumination:
            guard[:] = False
        rows, pos = rt.anti_rumination(slots, res.scores, val, res.pool, guard)
        fired = np.zeros(ix.size, dtype=bool)
        fired[rows] = True
        if rows.size:
            new = slots[rows, pos]   # replaces a served entry: only these cells change
            new_tagged, new_val = rt.served_valence(self.gr, new[:, None])
            tagged[rows, pos], val[rows, pos] = new_tagged[:, 0], new_val[:, 0]
            res.factors[rows, pos] = rt.served_factors(self.gr, new, query[rows], s.mood[rows], obs.now_ms, self.prm)
            out.events.append(self._events(obs.now_ms, ix[rows], "anti_rumination", entry_ids=c["id"][new],
                                           values=pop.neg_share[ix[rows]].mean(axis=1)))
        nserved, safe = kernels.rumination_window(ix, slots, val, pop.neg_share)   # this share joins the window
        return fired, safe, nserved

    def _memory_signal(self, ix: np.ndarray, s: Sensed, res: rt.RetrievalResult,
                       sc: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Memory-based reasoning: what similar past contexts led to, weighted by score x
        confidence; the reflexes that fired in SENSING join at full weight, and the overlooked
        section of the last contrarian pass is weighed explicitly. The entries with an outcome are
        remembered as this decision's drivers. Returns (the memory signal, the signal without the
        contrarian section, which Golems had one pending)."""
        pop, c = self.pop, self.gr.cols
        slots, scores = res.slots, res.scores
        # the served entries' own signal; their slots and outcome signs become the drivers
        mem, wsum, pending = kernels.memory_signal(np.ascontiguousarray(ix, dtype=np.int64), slots, scores,
                                                   sc["has_outcome"], sc["confidence"], sc["outcome"], pop.drove,
                                                   pop.drove_sign, pop.contrarian_pending)
        for i, rs in s.reflex.items():
            for slot in rs:
                o = float(c["outcome"][slot]) if c["has_outcome"][slot] else float(np.sign(c["p"][slot]))
                wsum[i] += 1.0
                mem[i] = (mem[i] * (wsum[i] - 1.0) + o) / wsum[i]
        mem_without = mem.copy()
        if pending.any():
            w_x, o_x = contrarian.weigh(self, ix, slots, scores)
            tot = wsum + w_x.sum(axis=1)
            mem = np.where(pending & (tot > 0), (mem * wsum + (w_x * o_x).sum(axis=1)) / np.maximum(tot, 1e-12), mem)
        return mem, mem_without, pending

    def _target(self, ix: np.ndarray, obs: Observation, s: Sensed, res: rt.RetrievalResult, sc: dict, mem: np.ndarray,
                mem_without: np.ndarray, pending: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The target exposure: each Golem's strategy plug-in (golem.strategies) reads a read-only
        view of the cohort and its recall, with the mood's risk multiplier (SPEC §5 risk channel, which the
        built-ins apply and a plug-in may ignore); the mind's own rules follow (a strong positive marker's
        cached target, the danger exit, the life phase). Returns (the target, whether the contrarian
        section changed the trade decision)."""
        pop, dc = self.pop, self.cfg.decision
        served, scores = res.slots >= 0, res.scores
        risk = appraisal.risk_multiplier_batch(s.mood, self.protos, self.risk_table, dc.risk_max_boost,
                                               self.cfg.emotion.neutral_norm)
        view = CohortView(self, ix, obs, memory=dict(
            memory_signal=mem, risk_multiplier=risk, served_ids=lambda: np.where(served, sc["id"], -1),
            served_scores=lambda: np.where(served, scores, np.nan),
            served_factors=lambda: np.where(served[:, :, None], res.factors, np.nan), served_valence=res.valence,
            served_outcome=lambda: np.where(served & sc["has_outcome"], sc["outcome"], np.nan),
            served_confidence=lambda: np.where(served, sc["confidence"], np.nan),
            served_category=lambda: np.where(served, self.gr.cols["category"][np.where(served, res.slots, 0)], -1),
            served_kind=lambda: np.where(served, self.gr.cols["kind"][np.where(served, res.slots, 0)], -1),
            served_topic=lambda: np.where(served, np.vectorize(self.topic_name, otypes=[object])(sc["topic"]), "")))
        strat = pop.strategy[ix]

        def choose(m):
            t = self.strategies.targets(view.with_memory(m), strat, dc.max_exposure)
            t = np.where(s.pos_marker, pop.som_target[ix, s.pattern], t)
            t = np.where(s.danger, 0.0, t)   # a high probe on its asset: get out, and stay out for a while
            return t * mortality.PHASE_EXPOSURE[pop.phase[ix]]
        target = choose(mem)
        exposure_now = np.where(s.value > 0, pop.units[ix] * s.price / np.maximum(s.value, 1e-12), 0.0)
        trade_with = (np.abs(target - exposure_now) >= dc.min_trade) | ((target <= 1e-9) & (exposure_now > 1e-3))
        if not pending.any():
            return target, np.zeros(ix.size, dtype=bool)
        alt = choose(mem_without)
        trade_without = (np.abs(alt - exposure_now) >= dc.min_trade) | ((alt <= 1e-9) & (exposure_now > 1e-3))
        return target, pending & ((trade_with != trade_without) | (trade_with & (np.abs(target - alt) >= dc.min_trade)))

    def _contrarian_weighed(self, ix: np.ndarray, pending: np.ndarray) -> list | None:
        """The ids of each Golem's overlooked section, now weighed and cleared (None when no Golem
        had one: lists only when one did)."""
        pop, c = self.pop, self.gr.cols
        contra_ids = None
        if pending.any():
            contra_ids = [[] for _ in range(ix.size)]
            for i in np.flatnonzero(pending):
                p = pop.contrarian_pending[ix[i]]
                contra_ids[i] = c["id"][p[p >= 0]].tolist()
        pop.contrarian_pending[ix[pending]] = -1
        return contra_ids

    def _retrieval_row(self, ix: np.ndarray, obs: Observation, s: Sensed, res: rt.RetrievalResult, sc: dict,
                       safe: np.ndarray, fired: np.ndarray, react: np.ndarray, mem: np.ndarray,
                       changed: np.ndarray, contra_ids: list | None) -> dict:
        """The cohort's `retrievals` rows: what was served and why, against the pool it came from."""
        cfg, pop = self.cfg, self.pop
        slots = res.slots
        if cfg.retrieval.mode == "somatic_hdc":
            # factor 3 holds the HDC similarity here; mood congruence is measured with PAD cosine everywhere
            cu = s.mood / np.maximum(np.linalg.norm(s.mood, axis=1, keepdims=True), 1e-8)
            u = self.gr.unit_pad(safe)
            emotional = (u[..., 0] * cu[:, :1] + u[..., 1] * cu[:, 1:2] + u[..., 2] * cu[:, 2:3] + 1.0) / 2.0
        else:
            emotional = res.factors[:, :, 3]
        (ids, scores, shadow_ids, low_conf_ids, served_emo, served_val, n_react, pool_n, pool_emo,
         pool_val) = kernels.served_summary(slots, res.scores, sc["id"], res.shadow, sc["shadow_id"], emotional,
                                            res.valence, react, sc["confidence"], sc["access_count"],
                                            float(cfg.confidence.low_flag), int(cfg.confidence.low_flag_accesses), res.pool)
        return dict(
            time_ms=np.full(ix.size, obs.now_ms, dtype=np.int64), golem_id=ix.copy(), tick=pop.tick[ix].copy(),
            query_p=s.mood[:, 0].copy(), query_a=s.mood[:, 1].copy(), query_d=s.mood[:, 2].copy(),
            slots=slots, ids=ids, scores=scores, factors=res.factors, shadow_ids=shadow_ids,
            pool_n=pool_n, pool_mean_emotional=pool_emo, pool_mean_valence=pool_val,
            served_mean_emotional=served_emo, served_mean_valence=served_val,
            valences=res.valence, anti_rumination=fired, low_conf_ids=low_conf_ids,
            reactivated=n_react, memory_signal=mem, cache_served=s.pos_marker.copy(),
            contrarian_ids=contra_ids, contrarian_changed=changed)

    def context_topics(self, ix: np.ndarray, obs: Observation, s: Sensed) -> np.ndarray:
        """The topics of each Golem's current context, (Golems x topics) codes, -1 where none: what
        an entry must be about to be re-lived now (reactivation, SPEC §2.6). Every entry topic has
        its moment: `<asset>/price-move` and `<asset>/trade` always (each tick is a trading
        decision on the asset), `<asset>/<kind>` for each market event seen now,
        `<asset>/flashbulb` when a flashbulb trigger holds now, `<asset>/dominance-correction` when
        the Golem's dominance is below the reflection threshold, `<asset>/death-reflection` when its
        own life is declining or terminal."""
        cfg, pop = self.cfg, self.pop
        asset = s.asset
        load_pad = s.mood    # the reflection's emotional load (SPEC §5)

        def codes(kind):
            return np.array([topic_code(f"{a}/{kind}") for a in self.assets], dtype=np.int64)[asset]
        trig = flashbulb.any_trigger(s.triggers)
        cols = [codes("price-move"), codes("trade"),
                np.where(trig, codes("flashbulb"), -1),
                np.where(load_pad[:, 2] < cfg.reflection.dominance, codes("dominance-correction"), -1),
                np.where(pop.phase[ix] >= 3, codes("death-reflection"), -1)]
        for kind in sorted({k for k, _, _ in obs.events}):
            cols.append(np.where(obs.seeing((kind,)), codes(kind), -1))
        return np.stack(cols, axis=1)

    # ------------------------------------------------------------------ ACTING
    def act(self, ix: np.ndarray, obs: Observation, s: Sensed, dd: Decided) -> Acted:
        """Trade toward the target (SPEC §5 ACTING, `golem.trading.trade`): fills, failures, their
        costs and gas, the tier's inference cost."""
        tr, esc, pop = self.cfg.trading, self.cfg.escalation, self.pop
        fail_p = tr.fail_prob_gas_spike if obs.gas > 3.0 * obs.gas_ref else tr.fail_prob
        got = trading.trade(
            np.ascontiguousarray(ix, dtype=np.int64), dd.target, s.value, s.price, np.log(s.price), dd.tier,
            obs.now_ms, self.z0, self.cfg.decision.min_trade, fail_p, tr.fee_bps, tr.slippage_bps,
            obs.gas * tr.gas_units * tr.gas_usd_per_gwei_unit, esc.t1_cost, esc.t2_cost, pop.units, pop.cash,
            pop.budget, pop.tick, pop.last_action, pop.last_dexp, pop.trade_ms, pop.trade_price, pop.trade_dexp,
            pop.lp_ema)
        return Acted(*got)

    # ------------------------------------------------------------------ REFLECTING
    def reflect(self, ix: np.ndarray, obs: Observation, s: Sensed, dd: Decided, ac: Acted, out: TickOutput) -> Reflected:
        """What the tick taught, as candidate entries in a fixed order (their ids follow it):
        observations, the Golem's own action, insights, flashbulbs; then one write, the pushes to
        the Clade, and the somatic markers' learning (SPEC §5 REFLECTING)."""
        cand = Candidates()
        tags = self._entry_tags(ix, s)
        # the episode is filed under the context that led to it (the last tick's query)
        prev_ctx = self.pop.ctx.take(ix, axis=0)    # take: a quarter of fancy indexing's time on rows
        if s.first.any():
            prev_ctx[s.first] = dd.query[s.first]
        outcome = np.tanh(s.ret / self.cfg.reflection.outcome_scale)
        self._observe(cand, ix, obs, s, dd, tags, prev_ctx, outcome)
        self._own_action(cand, s, dd, ac, tags)
        self._insights(cand, ix, obs.now_ms, s, ac, tags, prev_ctx, out)
        fired = self._flashbulbs(cand, ix, obs.now_ms, s, dd, tags, outcome, out)
        n_written, tier = self._store_and_push(cand, ix, obs, s, dd, ac, out)
        self._learn_markers(ix, s, dd)
        self._escalations(ix, obs.now_ms, s, dd, tier, fired, out)
        return Reflected(n_written=n_written, tier=tier, flashbulb=fired)

    def _entry_tags(self, ix: np.ndarray, s: Sensed) -> dict:
        """The columns every entry written this tick shares: the tick's emotion as its tag, the
        book, the signals that made the tick notable, the Golem and its asset."""
        cfg = self.cfg
        signals = (s.sev >= 3).astype(np.int64) + s.regime_shift + (s.recent_losses >= cfg.emotion.recurring_loss_min)
        return dict(p=s.pad[:, 0], a=s.pad[:, 1], d=s.pad[:, 2], has_tag=True, emotion=s.emotion, label=s.label,
                    value=s.value, pnl=s.tick_pnl, signals=signals, provenance=-1, tick=self.pop.tick[ix],
                    flashbulb=False, first_sighting=False, force_internal=False, arousal_bias=False,
                    golem=ix, scope=s.asset.astype(np.int32), regime=s.regime)

    def _observe(self, cand: Candidates, ix: np.ndarray, obs: Observation, s: Sensed, dd: Decided, tags: dict,
                 prev_ctx: np.ndarray, outcome: np.ndarray) -> None:
        """Observations: (1) the price move just seen, filed under the context that led to it;
        (2) one entry per distinct event seen (multi-event segmentation: never averaged), the j-th
        of a Golem's events in sorted order with seq 1 + j, taken event by event in that order."""
        cfg = self.cfg
        asset = s.asset
        keep = ~s.first
        if keep.any():
            low_band = s.pad[keep, 1] < cfg.arousal.low_band
            cand.add(prev_ctx[keep], self.topic_names(asset[keep], "price-move"),
                     **_sel(tags, keep), seq=0, kind=K_PRICE, role=ROLE_OBS, category=CAT["episode"],
                     decay_class=np.where(low_band, gm.EPHEMERAL, gm.TACTICAL), source_conf=cfg.confidence.own,
                     importance=np.clip(0.3 + 0.7 * np.abs(outcome[keep]), 0, 1), outcome=outcome[keep],
                     has_outcome=True, event_kind="")
        distinct = sorted(set(obs.events))
        sees = np.stack([obs.sees[:, [e == u for e in obs.events]].any(axis=1) for u in distinct], axis=1) \
            if distinct else np.zeros((ix.size, 0), dtype=bool)
        rank = np.cumsum(sees, axis=1) - 1
        for u, (kind, sev, tokens) in enumerate(distinct):
            rows = np.flatnonzero(sees[:, u])
            cols = _sel(tags, rows)
            cols["first_sighting"] = self._first_sightings(ix[rows], obs, rows, (kind, sev, tokens))
            warn = sev >= 3
            cand.add(normalise(self.lex.with_tokens(dd.query[rows].astype(np.float64), [f"event:{kind}"], 2.0)),
                     self.topic_names(asset[rows], kind), **cols, seq=1 + rank[rows, u], kind=K_EVENT, role=ROLE_OBS,
                     category=CAT["warning"] if warn else CAT["episode"],
                     decay_class=gm.REGIME if warn else gm.TACTICAL, source_conf=cfg.confidence.own,
                     importance=0.5 + 0.15 * sev, outcome=0.0, has_outcome=False, event_kind=kind, tokens=tokens)

    def _own_action(self, cand: Candidates, s: Sensed, dd: Decided, ac: Acted, tags: dict) -> None:
        """(3) The Golem's own trade, a buy or a sell added to the context."""
        tr = ac.traded
        if not tr.any():
            return
        base = dd.query[tr].astype(np.float64)
        emb = np.where((ac.dexp[tr] > 0)[:, None], self.lex.with_tokens(base, ["trade:buy"], 1.0),
                       self.lex.with_tokens(base, ["trade:sell"], 1.0))
        cand.add(emb, self.topic_names(s.asset[tr], "trade"), **_sel(tags, tr), seq=20,
                 kind=K_TRADE, role=ROLE_ACT, category=CAT["episode"], decay_class=gm.EPHEMERAL,
                 source_conf=self.cfg.confidence.own, importance=np.clip(np.abs(ac.dexp[tr]), 0, 1),
                 outcome=0.0, has_outcome=False, event_kind="")

    def _insights(self, cand: Candidates, ix: np.ndarray, now_ms: int, s: Sensed, ac: Acted, tags: dict,
                  prev_ctx: np.ndarray, out: TickOutput) -> None:
        """(4) Reflection under the emotional load of the mood (SPEC §5): a regret insight when the
        opposite action on the same tape would have earned more (under high arousal bent toward
        the mood, the unbiased counterfactual kept for the curator, §7.2); a dominance correction
        when control is low; a back-check of a harsh self-evaluation against the ground truth."""
        cfg, pop = self.cfg, self.pop
        rc = cfg.reflection
        load_p, load_a, load_d = s.mood[:, 0], s.mood[:, 1], s.mood[:, 2]
        # an insight written in crisis (the emotion's A > 0.5, SPEC §2.4) or under an aroused mood (the
        # emotional load, §5) is tagged for the curator's re-evaluation; only the mood bends its counterfactual
        loaded = load_a > cfg.arousal.high_band
        aroused = loaded | (s.pad[:, 1] > cfg.arousal.high_band)

        def insight(mask):       # the shared columns of insights: arousal_bias where the load is high
            return {**_sel(tags, mask), "arousal_bias": aroused[mask]}
        dc = cfg.decision
        max_exp = dc.max_exposure * np.minimum(pop.risk[ix], 1.0 / dc.max_exposure)
        held = held_exposure(ac.exposure_before, s.ret)
        _, gain, cf = counterfactual(held, s.ret, max_exp, rc.outcome_scale)
        regret = ~s.first & (gain > rc.regret_min)
        if regret.any():
            biased = np.where(loaded, np.clip(cf + rc.mood_bias * load_p, -1.0, 1.0), cf)
            cand.add(prev_ctx[regret], self.topic_names(s.asset[regret], "price-move"), **insight(regret),
                     seq=30, kind=K_REGRET, role=ROLE_INS, category=CAT["insight"], decay_class=gm.REGIME,
                     source_conf=cfg.confidence.inferred, importance=0.6, outcome=biased[regret],
                     raw_outcome=cf[regret], has_outcome=True, event_kind="")
        # low control: a dominance correction, and a "what could I have done" insight (internal
        # attribution): a guess at alternatives with no evidence, so speculative (SPEC §3.4)
        dom = load_d < rc.dominance
        if dom.any():
            cand.add(prev_ctx[dom], self.topic_names(s.asset[dom], "dominance-correction"),
                     **{**insight(dom), "force_internal": True},
                     seq=31, kind=K_DOMINANCE, role=ROLE_INS, category=CAT["insight"], decay_class=gm.TACTICAL,
                     source_conf=cfg.confidence.speculative, importance=0.5, outcome=0.0, has_outcome=False,
                     event_kind="")
        harsh = load_p < rc.backcheck_pleasure
        for i in np.flatnonzero(harsh):
            truth = float(s.truth[i])
            corrected = load_p[i] + rc.backcheck_weight * max(truth - load_p[i], 0.0)
            out.events.append(self._event(now_ms, int(ix[i]), "backcheck", value=corrected,
                                          payload={"self_evaluation": float(load_p[i]), "ground_truth": truth}))
            pop.mood[ix[i], 0] = corrected

    def _flashbulbs(self, cand: Candidates, ix: np.ndarray, now_ms: int, s: Sensed, dd: Decided, tags: dict,
                    outcome: np.ndarray, out: TickOutput) -> np.ndarray:
        """The flashbulb check (SPEC §6): a trigger fires a flashbulb entry unless the 24 h budget
        suppresses it (each outcome an event). Returns which Golems fired one."""
        pop, fb = self.pop, self.cfg.flashbulb
        a = s.pad[:, 1]
        trig = s.triggers
        rows = np.flatnonzero(flashbulb.any_trigger(trig) & ~s.first)
        nwin = np.zeros(ix.size, dtype=np.int64)
        nwin[rows] = flashbulb.in_window(pop.fb_times[ix[rows]], now_ms)   # most ticks trigger nothing
        fired = np.zeros(ix.size, dtype=bool)
        for i in rows:
            names = [flashbulb.TRIGGERS[j] for j in np.flatnonzero(trig[i])]
            ok = flashbulb.allowed(float(a[i]), int(nwin[i]), names[0], fb.arousal, fb.max_per_24h, fb.extra_step)
            req = flashbulb.required_arousal(int(nwin[i]), fb.arousal, fb.max_per_24h, fb.extra_step)
            payload = {"triggers": names, "in_window": int(nwin[i]), "required_arousal": req}
            if not ok:
                out.events.append(self._event(now_ms, int(ix[i]), "flashbulb_suppressed", value=float(a[i]),
                                              payload=payload))
                continue
            fired[i] = True
            g = int(ix[i])
            pop.fb_times[g, int(np.argmin(pop.fb_times[g]))] = now_ms
            self.flashbulbs[g] += 1
            out.events.append(self._event(now_ms, g, "flashbulb", value=float(a[i]), payload=payload))
        if fired.any():
            cand.add(dd.query[fired], self.topic_names(s.asset[fired], "flashbulb"),
                     **{**_sel(tags, fired), "flashbulb": True},
                     seq=40, kind=K_FLASH, role=ROLE_OBS, category=CAT["episode"], decay_class=gm.STRUCTURAL,
                     source_conf=self.cfg.confidence.own, importance=1.0, outcome=outcome[fired], has_outcome=True,
                     event_kind="")
        return fired

    def _store_and_push(self, cand: Candidates, ix: np.ndarray, obs: Observation, s: Sensed, dd: Decided, ac: Acted,
                        out: TickOutput) -> tuple[np.ndarray, np.ndarray]:
        """Write the candidates (the memory writer gates them); each stored flashbulb costs a forced
        T2 reflection, keeps its market snapshot and links, and is pushed to the Clade with the
        confident warnings. Returns (entries written per Golem, the tier paid)."""
        cfg, pop, gr = self.cfg, self.pop, self.gr
        now = obs.now_ms
        written = write(cfg, gr, cand, now) if cand.emb else None
        self._report_aborted(cand, now, out)
        n_written = np.zeros(ix.size, dtype=np.int64)
        tier = dd.tier.copy()
        if written is None:
            return n_written, tier
        pos = np.searchsorted(ix, written["golem"])
        np.add.at(n_written, pos, 1)
        written["clade"] = pop.clade[written["golem"]]
        out.entries.append(written)
        for r in np.flatnonzero(written["flashbulb"]):
            i = int(pos[r])
            g = int(ix[i])
            tier[i] = 2
            pop.budget[g] -= cfg.escalation.t2_cost  # T2 reflection, forced for flashbulbs
            eid = int(written["id"][r])
            links = tuple(int(x) for x in gr.cols["id"][pop.drove[g][pop.drove[g] >= 0]])
            gr.links[eid] = links
            out.snapshots.append(dict(flashbulb_id=eid, golem_id=g, time_ms=now, step=obs.step, close=obs.close.copy(),
                                      tvl=obs.tvl.copy(), gas=obs.gas, regime=obs.regime,
                                      position_asset=int(s.asset[i]), position_exposure=float(ac.exposure_after[i]),
                                      links=links))
            out.pushes.append(dict(sender=g, entry_id=eid, slot=int(written["slot"][r]), alert_type="flashbulb"))
        out.pushes.extend(warning_pushes(written, cfg.clade.warning_push_confidence))
        return n_written, tier

    def _learn_markers(self, ix: np.ndarray, s: Sensed, dd: Decided) -> None:
        """The somatic marker of the tick's pattern learns from its episode: the emotion's P and A
        (exponentially weighted), the target chosen, the emotion felt."""
        pop = self.pop
        kernels.learn_markers(np.ascontiguousarray(ix, dtype=np.int64), np.ascontiguousarray(s.pattern, dtype=np.int64),
                              np.ascontiguousarray(s.pad[:, 0]), np.ascontiguousarray(s.pad[:, 1]),
                              np.asarray(dd.target, dtype=np.float64), s.emotion.astype(np.int64),
                              float(self.cfg.somatic.learning_rate), pop.som_sum, pop.som_arousal, pop.som_cnt,
                              pop.som_target, pop.som_emotion)

    def _escalations(self, ix: np.ndarray, now_ms: int, s: Sensed, dd: Decided, tier: np.ndarray,
                     flashbulb_fired: np.ndarray, out: TickOutput) -> None:
        """One `escalation` event per Golem whose tick was escalated above T0 (SPEC §5, §13): the
        tier paid and what raised it (probe severity, a negative somatic marker, novelty, a
        flashbulb's forced T2); value = the inference cost."""
        up = tier > 0
        if not up.any():
            return
        esc = self.cfg.escalation
        t = tier[up]
        out.events.append(self._events(now_ms, ix[up], "escalation", -1, np.where(t == 2, esc.t2_cost, esc.t1_cost),
                                       payload={"tier": t.astype(np.int64), "probe": s.sev[up] >= 2,
                                                "marker": s.neg_marker[up], "novelty": dd.novelty[up],
                                                "flashbulb": flashbulb_fired[up]}))

    def _first_sightings(self, golems: np.ndarray, obs: Observation, rows: np.ndarray, event: tuple) -> np.ndarray:
        """For the Golems `golems` (cohort rows `rows`) that see `event`: is it their first sighting
        of a protocol, pool or counterparty (SPEC §3.3: a salience floor of 0.70)? An event's
        entities are the protocol of its asset (none for a market-wide event) and each counterparty
        its description names as `counterparty:<id>`; each is marked seen."""
        pop = self.pop
        first = np.zeros(golems.size, dtype=bool)
        assets = obs.event_assets if obs.event_assets is not None else np.full(len(obs.events), -1)
        marks = []
        for e in np.flatnonzero([ev == event for ev in obs.events]):
            seeing = obs.sees[rows, e]
            for name in event_entities(obs.events[e][2], int(assets[e]), self.protocols):
                col = self._entity(name)
                first |= seeing & ~pop.protocol_seen[golems, col]
                marks.append((seeing, col))
        for seeing, col in marks:
            pop.protocol_seen[golems[seeing], col] = True
        return first

    def _entity(self, name: str) -> int:
        """The column of pop.protocol_seen for an entity (grown as new entities appear)."""
        col = self.entities.get(name)
        if col is None:
            col = self.entities[name] = len(self.entities)
            seen = self.pop.protocol_seen
            if col >= seen.shape[1]:
                grown = np.zeros((seen.shape[0], max(2 * seen.shape[1], col + 1)), dtype=bool)
                grown[:, :seen.shape[1]] = seen
                self.pop.protocol_seen = grown
        return col

    def _report_aborted(self, cand: Candidates, now_ms: int, out: TickOutput) -> None:
        """Empty observations the writer refused (SPEC §3.3: a logged error, no entry): one
        `write_aborted` event each; the world logs them as errors."""
        for g, kind, topic, reason in cand.aborted:
            out.events.append(self._event(now_ms, g, "write_aborted", payload={"kind": KINDS[kind], "topic": topic,
                                                                               "reason": reason}))
        cand.aborted.clear()

    # ------------------------------------------------------------------ the tick
    def tick(self, ix: np.ndarray, obs: Observation) -> TickOutput:
        """One heartbeat for the alive Golems `ix` (sorted ids), all in one batch: those due a
        dream dream; the others go SENSING -> DECIDING -> ACTING -> REFLECTING, then close the tick."""
        out = TickOutput()
        self._out = out
        ix, obs = self._dream_if_due(ix, obs, out)
        if ix.size:
            s = self.sense(ix, obs)
            dd = self.decide(ix, obs, s, out)
            ac = self.act(ix, obs, s, dd)
            rf = self.reflect(ix, obs, s, dd, ac, out)
            self._close_tick(ix, obs, s, dd, ac, rf, out)
        return self._finish(out)

    def _dream_if_due(self, ix: np.ndarray, obs: Observation, out: TickOutput) -> tuple[np.ndarray, Observation]:
        """The Golems due a dream dream this tick (and the curator and contrarian count it);
        returns the others and their observation."""
        pop = self.pop
        dreaming = self._dreaming(ix, obs.now_ms)
        if not dreaming.any():
            return ix, obs
        dreamers = ix[dreaming]
        every_ms = int(round(self.cfg.dream.every_s * 1000))
        due = pop.next_dream_ms[dreamers]
        pop.next_dream_ms[dreamers] = due + every_ms * ((obs.now_ms - due) // every_ms + 1)
        self.dream(dreamers, obs, out)
        # curator and contrarian count dream ticks too: they run on every Nth tick, dreaming or not
        self._maintenance(dreamers, obs, pop.ctx[dreamers], out)
        pop.tick[dreamers] += 1
        return ix[~dreaming], obs.rows(~dreaming)

    def _close_tick(self, ix: np.ndarray, obs: Observation, s: Sensed, dd: Decided, ac: Acted, rf: Reflected,
                    out: TickOutput) -> None:
        """After REFLECTING: what the next tick compares against, the life phase (a Golem whose
        vitality ran out goes TERMINAL and DEAD), the heartbeat row, maintenance."""
        pop, cfg = self.pop, self.cfg
        self._remember(ix, obs, s, dd, ac)
        v = mortality.vitality(pop.budget[ix], pop.budget0[ix], ac.value_after, pop.value0[ix])
        phase = mortality.phase_of(v, cfg) if cfg.mortality.enabled else np.zeros(ix.size, np.int8)
        pop.phase[ix] = phase
        path = np.full(ix.size, PATH_TICK, dtype=np.int8)
        dying = phase == 4
        if dying.any():
            self._die(ix[dying], obs, v[dying], out)
            path[dying] = PATH_DEAD
        self._heartbeat_rows(out, ix, obs, path, s, dd, ac, rf, v, phase)
        self._maintenance(ix[~dying], obs, dd.query[~dying], out)
        pop.tick[ix] += 1

    def _remember(self, ix: np.ndarray, obs: Observation, s: Sensed, dd: Decided, ac: Acted) -> None:
        """What the next tick's SENSING compares against: price, value, time, regime, context,
        memory signal and the bet the position holds."""
        pop = self.pop
        pop.last_price[ix] = s.price
        pop.last_value[ix] = ac.value_after
        pop.last_ms[ix] = obs.now_ms
        pop.last_regime[ix] = obs.regime
        pop.regime_seen[ix, obs.regime] = pop.tick[ix]
        pop.ctx[ix] = dd.query
        pop.last_mem[ix] = dd.mem
        # the decision's expected sign is the bet it holds: long-only Golems holding a position expect
        # the price to rise; a flat Golem has nothing at stake and no prediction to be right about
        pop.exp_sign[ix] = (ac.exposure_after > 0.1).astype(np.int8)

    def _finish(self, out: TickOutput) -> TickOutput:
        if self.pending_entries:
            out.entries.extend(self.pending_entries)
            self.pending_entries = []
        for rows in out.entries:
            first = np.sort(np.unique(rows["topic"], return_index=True)[1])   # each code's first row names it
            for code, name in zip(rows["topic"][first].tolist(), rows["topic_name"][first].tolist()):
                self.topics.setdefault(code, str(name))
        if len(out.entries) > 1:
            # in id order: a dreamer's curator lessons are numbered before the tick's writes but
            # come last (`pending_entries`), and a part out of order costs the recorder a sort
            out.entries.sort(key=lambda rows: int(rows["id"].min()) if len(rows["id"]) else -1)
        if len(out.heartbeats) and out.heartbeats.get("golem_id") is not None and out.heartbeats["golem_id"].size > 1:
            order = np.argsort(out.heartbeats["golem_id"], kind="stable")
            out.heartbeats = {k: v[order] for k, v in out.heartbeats.items()}
        return out

    def topic_name(self, code: int) -> str:
        return self.topics.get(code, str(code))

    def topic_names(self, asset: np.ndarray, kind: str) -> np.ndarray:
        """Topic names "<asset>/<kind>" for an array of asset indices (object array)."""
        return np.array([f"{a}/{kind}" for a in self.assets], dtype=object)[asset]

    # ------------------------------------------------------------------ HDC (SPEC §11)
    def fingerprints(self, p, a, d, emotion_codes, intensity, regimes, assets) -> np.ndarray:
        """Fingerprints of affective states: PAD levels, emotion, intensity, regime, plus the asset,
        its protocol and the gas level as extra roles (so compositional queries can name them)."""
        from golem import hdc
        assets = np.asarray(assets, dtype=np.int64)
        regs = [self.regime_names[r] if 0 <= r < len(self.regime_names) else "none" for r in np.asarray(regimes)]
        return hdc.encode_batch(p, a, d, [EMOTION_NAMES[e] for e in np.asarray(emotion_codes)], intensity, regs, self.im,
                                {"asset": [self.assets[x] for x in assets], "protocol": [self.protocols[x] for x in assets],
                                 "gas": [self.gas_level] * assets.size})

    def _fingerprint(self, slots: np.ndarray) -> None:
        c = self.gr.cols
        self.gr.fp[slots] = self.fingerprints(c["p"][slots], c["a"][slots], c["d"][slots], c["emotion"][slots],
                                              c["i0"][slots], c["regime"][slots], c["scope"][slots])

    def compose_query(self, g: int, k: int = 8, **items: str) -> list[tuple[int, float]]:
        """Compositional query on Golem g's memories, e.g. emotion="fear", protocol="aave", gas="spiking"."""
        from golem import hdc
        return rt.hdc_search(self.gr, g, hdc.query(self.im, **items), k)

    # ------------------------------------------------------------------ DREAMING
    def _dreaming(self, ix: np.ndarray, now_ms: int) -> np.ndarray:
        """Once per simulated day (`dream.every_s`), at each Golem's own phase of it (drawn at birth,
        so a Clade never sleeps all at once), the first heartbeat at or after the due time is a dream."""
        if not self.cfg.dream.enabled:
            return np.zeros(ix.size, dtype=bool)
        return now_ms >= self.pop.next_dream_ms[ix]

    def dream(self, ix: np.ndarray, obs: Observation, out: TickOutput) -> None:
        """Offline: no trading; NREM replay, REM depotentiation, synaptic homeostasis (SPEC §8)."""
        pop = self.pop
        figures = dreams.dream_columns(self.gr, ix, obs.now_ms, self.cfg, self._dream_scores())
        out.events.append(self._events(obs.now_ms, ix, "dream", -1, np.diff(figures["replayed"][1]).astype(np.float64),
                                       payload=figures))
        price = obs.close[pop.asset[ix].astype(np.int64)]
        value = pop.cash[ix] + pop.units[ix] * price
        n = ix.size
        z = np.zeros(n)
        hb = dict(time_ms=np.full(n, obs.now_ms, dtype=np.int64), golem_id=ix.copy(), clade_id=pop.clade[ix].copy(),
                  tick=pop.tick[ix].copy(), state_path=np.full(n, PATH_DREAM, dtype=np.int8), p=pop.pad[ix, 0].copy(),
                  a=pop.pad[ix, 1].copy(), d=pop.pad[ix, 2].copy(), mood_p=pop.mood[ix, 0].copy(),
                  mood_a=pop.mood[ix, 1].copy(), mood_d=pop.mood[ix, 2].copy(),
                  emotion=appraisal.classify_batch(pop.pad[ix, 0], pop.pad[ix, 1], pop.pad[ix, 2], self.protos,
                                                   self.cfg.emotion.neutral_norm),
                  label=np.zeros(n, np.int8), intensity=appraisal.intensity_batch(pop.pad[ix, 0], pop.pad[ix, 1], pop.pad[ix, 2]),
                  tier=np.zeros(n, np.int64), exposure=np.where(value > 0, pop.units[ix] * price / np.maximum(value, 1e-12), 0.0),
                  target_exposure=np.full(n, np.nan), value=value, pnl=np.full(n, np.nan), cash=pop.cash[ix].copy(),
                  budget=pop.budget[ix].copy(), vitality=mortality.vitality(pop.budget[ix], pop.budget0[ix], value, pop.value0[ix]),
                  phase=pop.phase[ix].copy(), price=price, regime=np.full(n, obs.regime, dtype=np.int16),
                  probe=np.zeros(n, np.int8), traded=np.zeros(n, bool), trade_failed=np.zeros(n, bool),
                  entries_written=np.zeros(n, np.int64), flashbulb=np.zeros(n, bool), n_retrieved=np.zeros(n, np.int64),
                  retrieval_mean_valence=np.full(n, np.nan), memory_signal=z, marker_valence=z, marker_strength=np.zeros(n, np.int64),
                  marker_escalated=np.zeros(n, bool), cache_served=np.zeros(n, bool), recalled_p=np.full(n, np.nan),
                  recalled_a=np.full(n, np.nan))
        pop.recalled[ix] = 0.0      # a dream considers no entry: nothing evoked enters the waking update
        out.heartbeats = hb

    def _dream_scores(self):
        """Replay selection: intensity x importance (None), or HDC similarity to a high-arousal
        prototype when retrieval.mode is somatic_hdc (golem.hdc)."""
        if self.im is None:
            return None
        from golem import hdc
        proto = hdc.high_arousal_prototype(self.im)
        return lambda slots: hdc.hamming_similarity_batch(proto, np.ascontiguousarray(self.gr.fp[slots]))

    # ------------------------------------------------------------------ maintenance
    def _maintenance(self, ix: np.ndarray, obs: Observation, query: np.ndarray, out: TickOutput) -> None:
        """Curator every curator.every_ticks-th tick and contrarian every contrarian.every_ticks-th tick."""
        cfg, pop = self.cfg, self.pop
        nth = pop.tick[ix] + 1
        if cfg.curator.enabled:
            due = ix[nth % cfg.curator.every_ticks == 0]
            f = curatorm.pass_columns(self, due, obs.now_ms)
            if f is not None:
                out.events.append(self._curator_events(obs.now_ms, due, f))
        if cfg.contrarian.enabled:
            due = nth % cfg.contrarian.every_ticks == 0
            if due.any():
                figs = contrarian.pass_(self, ix[due], query[due], pop.mood[ix[due]], obs.now_ms)
                out.events.append(self._events(obs.now_ms, ix[due], "contrarian", -1,
                                               [float(len(ids)) for ids in figs["ids"]], payload=figs))

    def _curator_events(self, now_ms: int, due: np.ndarray, f) -> EventBatch:
        """One `curator` event per Golem, each followed by its `reflex_proposal` events (entry id,
        {"applied": ...}), as one batch of both kinds in that order."""
        n, pb = due.size, f.proposal_bounds
        n_props = np.diff(pb)
        first = np.arange(n) + pb[:-1]                   # each Golem's curator row
        rows = n + int(pb[-1])
        code = np.ones(rows, dtype=np.int8)
        code[first] = 0
        owner = np.repeat(np.arange(n), n_props + 1)     # row -> its Golem's position in `due`
        entry = np.full(rows, -1, dtype=np.int64)
        entry[code == 1] = f.proposals
        value = np.full(rows, np.nan)
        value[first] = f.cols["valence_correction"]

        def spread(v):                                    # a Golem's figure on its curator row
            return np.asarray(v)[owner]

        def offsets(sizes):                               # a Golem's list on its curator row, none elsewhere
            per_row = np.zeros(rows, dtype=np.int64)
            per_row[first] = sizes
            return np.concatenate([[0], np.cumsum(per_row)])
        curator = {k: spread(v) for k, v in f.cols.items()}
        curator.update(lessons=(f.lessons, offsets(np.diff(f.lesson_bounds))),
                       reflex_proposals=(f.proposals, offsets(n_props)),
                       reflex_applied=spread(f.applied & (n_props > 0)), balance=np.full(rows, f.balance))
        proposal = {"applied": np.full(rows, f.applied)}
        golems = due.astype(np.int64)[owner]
        return EventBatch(time_ms=now_ms, kind=("curator", "reflex_proposal"), kind_code=code, golem_id=golems,
                          clade_id=self.pop.clade[golems].astype(np.int64), tick=self.pop.tick[golems].astype(np.int64),
                          entry_id=entry, value=value, payload=(curator, proposal))

    def _heartbeat_rows(self, out: TickOutput, ix: np.ndarray, obs: Observation, path: np.ndarray, s: Sensed, dd: Decided,
                        ac: Acted, rf: Reflected, v: np.ndarray, phase: np.ndarray) -> None:
        pop = self.pop
        hb = dict(
            time_ms=np.full(ix.size, obs.now_ms, dtype=np.int64), golem_id=ix.copy(), clade_id=pop.clade[ix].copy(),
            tick=pop.tick[ix].copy(), state_path=path, p=pop.pad[ix, 0].copy(), a=pop.pad[ix, 1].copy(),
            d=pop.pad[ix, 2].copy(), mood_p=pop.mood[ix, 0].copy(), mood_a=pop.mood[ix, 1].copy(),
            mood_d=pop.mood[ix, 2].copy(), emotion=s.emotion, label=s.label, intensity=s.intensity, tier=rf.tier,
            exposure=ac.exposure_after, target_exposure=dd.target, value=ac.value_after, pnl=s.tick_pnl,
            cash=pop.cash[ix].copy(), budget=pop.budget[ix].copy(), vitality=v, phase=phase, price=s.price,
            regime=np.full(ix.size, obs.regime, dtype=np.int16), probe=s.sev.astype(np.int8), traded=ac.traded,
            trade_failed=ac.failed, entries_written=rf.n_written, flashbulb=rf.flashbulb,
            n_retrieved=dd.nserved, retrieval_mean_valence=out.retrievals["served_mean_valence"],
            memory_signal=dd.mem, marker_valence=s.marker_valence, marker_strength=s.marker_strength.astype(np.int64),
            marker_escalated=s.neg_marker & (s.sev < 2), cache_served=s.pos_marker, recalled_p=dd.recalled[:, 0],
            recalled_a=dd.recalled[:, 1])
        if out.heartbeats:
            out.heartbeats = {k: np.concatenate([np.asarray(out.heartbeats[k]), np.asarray(hb[k])]) for k in hb}
        else:
            out.heartbeats = hb

    def _die(self, ix: np.ndarray, obs: Observation, v: np.ndarray, out: TickOutput) -> None:
        """TERMINAL: equanimity, a death reflection from the Golem's own history pushed to the
        Clade, then DEAD."""
        pop, cfg = self.pop, self.cfg
        pop.pad[ix] = mortality.terminal_drift(pop.pad[ix], cfg.mortality.terminal_drift)
        pop.mood[ix] = mortality.terminal_drift(pop.mood[ix], cfg.mortality.terminal_drift)
        pd = pop.pad[ix]
        price = obs.close[pop.asset[ix].astype(np.int64)]
        value = pop.cash[ix] + pop.units[ix] * price
        causes, reflections, embs = [], [], []
        for j, g in enumerate(ix.tolist()):
            cause = "budget" if pop.budget[g] / pop.budget0[g] <= value[j] / pop.value0[g] else "capital"
            texts, emb = self._death_reflection(g, cause, float(value[j] - pop.value0[g]), pd[j])
            causes.append(cause)
            reflections.append(texts)
            embs.append(emb)
        cand = Candidates()
        cand.add(normalise(np.stack(embs)), [f"{self.assets[a]}/death-reflection" for a in pop.asset[ix]],
                 p=pd[:, 0], a=pd[:, 1], d=pd[:, 2], has_tag=True,
                 emotion=appraisal.classify_batch(pd[:, 0], pd[:, 1], pd[:, 2], self.protos, cfg.emotion.neutral_norm),
                 label=0, value=value, pnl=0.0, signals=0, provenance=-1, tick=pop.tick[ix], flashbulb=False,
                 first_sighting=False, force_internal=True, arousal_bias=False, golem=ix,
                 scope=pop.asset[ix].astype(np.int32), seq=90, kind=K_DEATH, role=ROLE_INS,
                 category=CAT["death_reflection"], decay_class=gm.STRUCTURAL, source_conf=self.cfg.confidence.own,
                 importance=1.0, outcome=0.0, has_outcome=False, event_kind="", force=True)
        rows = write(cfg, self.gr, cand, obs.now_ms)
        self._report_aborted(cand, obs.now_ms, out)
        ids = {}
        if rows is not None:
            rows["clade"] = pop.clade[rows["golem"]]
            out.entries.append(rows)
            ids = {int(g): (int(e), int(sl)) for g, e, sl in zip(rows["golem"], rows["id"], rows["slot"])}
        weights = {c: (cfg.mortality.heavy_weight if k in mortality.HEAVY else 1.0)
                   for k, c in enumerate(mortality.DEATH_CATEGORIES)}
        for j, g in enumerate(ix.tolist()):
            eid, slot = ids.get(g, (-1, -1))
            out.events.append(self._event(obs.now_ms, g, "death", entry_id=eid, value=float(v[j]),
                                          payload={"cause": causes[j], "value": float(value[j]), "budget": float(pop.budget[g]),
                                                   "reflection": reflections[j], "weights": weights,
                                                   "heaviest": [mortality.DEATH_CATEGORIES[k] for k in mortality.HEAVY]}))
            if eid >= 0:
                out.pushes.append(dict(sender=g, entry_id=eid, slot=slot, alert_type="death_reflection"))
        pop.alive[ix] = False
        pop.phase[ix] = 5
        pop.dead_ms[ix] = obs.now_ms

    def _death_reflection(self, g: int, cause: str, pnl: float, pad_end: np.ndarray) -> tuple[dict, np.ndarray]:
        """Golem g's nine categories from its own live memories, flashbulbs, markers and emotions
        (mortality.death_reflection), and the direction of the entry that carries them: its base
        tokens plus the memories the categories are about, the heavy ones weighing more."""
        gr, pop, cfg = self.gr, self.pop, self.cfg
        c = gr.cols
        sl = gr.slab(g)
        own = np.flatnonzero((c["id"][sl] >= 0) & (c["provenance"][sl] < 0) & (c["status"][sl] != gm.ARCHIVED)) + sl.start
        entries = {k: c[k][own] for k in ("outcome", "has_outcome", "confidence", "acted_on_count", "access_count",
                                          "flashbulb", "arousal_bias")}
        topics = [self.topic_name(t) for t in c["topic"][own].tolist()]
        emotions = {name: int(cnt) for name, cnt in zip(EMOTION_NAMES, pop.som_emotion[g].sum(axis=0)) if cnt}
        valence = mortality.regime_valences(pop.som_sum[g], pop.som_cnt[g], self.regime_names)
        texts, subjects = mortality.death_reflection(
            entries, gr.emb[own], topics, pnl=pnl, cause=cause, flashbulbs=int(self.flashbulbs[g]), emotions=emotions,
            regime_valence=valence, pad=pad_end, low_flag=cfg.confidence.low_flag,
            low_accesses=cfg.confidence.low_flag_accesses, similar=cfg.decay.reactivation_cosine)
        base = self.lex.token("death-reflection") + self.lex.token(f"asset:{self.assets[int(pop.asset[g])]}")
        return texts, mortality.reflection_embedding(base, gr.emb[own], subjects, cfg.mortality.heavy_weight)

    def _event(self, now_ms: int, golem: int, kind: str, entry_id: int = -1, other: int = -1, value: float = float("nan"),
               payload: dict | None = None) -> dict:
        return dict(time_ms=now_ms, golem_id=golem, clade_id=int(self.pop.clade[golem]) if golem >= 0 else -1, kind=kind,
                    tick=int(self.pop.tick[golem]) if golem >= 0 else -1, entry_id=entry_id, other_golem=other,
                    value=value, payload=payload or {})

    def _events(self, now_ms: int, golems: np.ndarray, kind: str, entry_ids, values, payload: dict | None = None) -> EventBatch:
        """`_event` rows for many Golems at once, as columns (`payload`: see EventBatch)."""
        golems = np.asarray(golems, dtype=np.int64)
        return EventBatch(time_ms=now_ms, kind=kind, golem_id=golems, clade_id=self.pop.clade[golems].astype(np.int64),
                          tick=self.pop.tick[golems].astype(np.int64),
                          entry_id=np.broadcast_to(np.asarray(entry_ids, dtype=np.int64), golems.shape),
                          value=np.asarray(values, dtype=np.float64), payload=payload)


def held_exposure(exposure_now: np.ndarray, ret: np.ndarray) -> np.ndarray:
    """The exposure held over the tick's move, from the exposure it came to (before this tick's
    trade) and the return: x / (1 + r (1 - x)) (the position grew by 1 + r, the rest did not)."""
    return exposure_now / np.maximum(1.0 + ret * (1.0 - exposure_now), 1e-12)


def counterfactual(held: np.ndarray, ret: np.ndarray, max_exposure, scale: float = 0.01):
    """The opposite action on the same tape (SPEC §5 REFLECTING): the mirrored exposure
    (max - held: in becomes out, out becomes in). Returns (that exposure, what it would have earned
    beyond the choice made, as a share of value: (alt - held) * return, and its outcome: the move's
    direction scaled by how far the alternative stood from the choice, tanh(|alt - held| r / scale),
    in the units of an episode's outcome)."""
    alt = np.clip(max_exposure - held, 0.0, max_exposure)
    gain = (alt - held) * ret
    return alt, gain, np.tanh(np.abs(alt - held) * ret / scale)


def warning_pushes(written: dict, min_confidence: float) -> list[dict]:
    """Warnings written with confidence >= `min_confidence` (0.7, SPEC §9) that go to the Clade
    (flashbulbs are pushed with their snapshot)."""
    warn = (written["category"] == CAT["warning"]) & (written["confidence"] >= min_confidence) & ~written["flashbulb"]
    return [dict(sender=int(written["golem"][r]), entry_id=int(written["id"][r]), slot=int(written["slot"][r]),
                 alert_type="warning") for r in np.flatnonzero(warn)]


_COUNTERPARTY = re.compile(r"counterparty:(\S+)")


def event_entities(tokens: str, asset: int, protocols: tuple[str, ...]) -> list[str]:
    """Who and where an event is about (first sightings, SPEC §3.3): "protocol:<name>" of its
    asset's protocol (pool), unless market-wide (asset -1), and "counterparty:<id>" for each
    counterparty its description names."""
    out = [f"protocol:{protocols[asset]}"] if 0 <= asset < len(protocols) else []
    return out + [f"counterparty:{m}" for m in _COUNTERPARTY.findall(tokens)]


def _sel(common: dict, mask) -> dict:
    out = {}
    for k, v in common.items():
        out[k] = v[mask] if isinstance(v, np.ndarray) and v.ndim == 1 else v
    return out


