"""The world (SPEC §12): a SimPy environment with the market, heartbeat cohorts and the Clade
network.

Golems that share a cadence and phase form one cohort and tick in one SimPy event, so their work
is one batched call into the mind; only messages between siblings are individual events. The
world emits what happened (the mind's `TickOutput`, Clade deliveries, market bars) to
`sim.recording.Tables`, which turns it into table rows; no table is built here.
"""
from __future__ import annotations

import heapq
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import simpy
import structlog

from golem import clade as cladem
from golem import grimoire as gm
from golem.context import normalise
from golem.heartbeat import Mind, Observation, TickOutput
from golem.population import Population
from golem.memory_writer import KINDS
from sim.market import Tape, probe_severity
from sim.recording import Tables
from golem.rng import uniform as hash_uniform_array
from sim.scenario import BAR, TAPE_ASSET, Scenario, parse_duration
from sim import compile_lock

compile_lock.install()        # a world's processes (a sweep's workers, a pool) compile each kernel once


@dataclass
class Cohort:
    interval_s: float
    start_s: float
    members: np.ndarray


#: prefill entries drawn and inserted at a time (`World._prefill`)
PREFILL_CHUNK = 1 << 16
#: receivers whose jitter `World.push` draws in one call
PUSH_DRAWS = 1 << 16

#: SimPy priority below NORMAL (1): the flusher runs after every other event of its instant, so a
#: flush (and the checkpoint taken with it) always sees whole time steps, in a run and in its resume.
LOW = 2


class RunInterrupted(Exception):
    """SIGINT/SIGTERM arrived; the world stopped between two events (state is consistent)."""

    def __init__(self, signum: int):
        super().__init__(f"signal {signum}")
        self.signum = signum


def _latency_ms(delays_s: np.ndarray) -> np.ndarray:
    """Push latencies in whole ms, int32 unless one is longer than int32 holds (~24.8 days)."""
    ms = np.rint(delays_s * 1000)
    return ms.astype(np.int32 if ms.size == 0 or ms.max() <= np.iinfo(np.int32).max else np.int64)


class Delivery:
    """Clade pushes arriving at one instant: the callback of one SimPy event.

    `parcels` holds (sender, entry, alert_type, receivers, latency_ms) in the order the pushes were
    made, so one event per instant gives the same order as one event per receiver would (SimPy
    runs equal times in creation order). Receivers are int32 and latencies int32 where they fit
    (`_latency_ms`), 8 bytes a copy: a push wave of a 100,000-Golem population is ~10^8 copies in
    flight. Plain data, so a
    checkpoint can save it (sim.checkpoint).
    """

    __slots__ = ("world", "parcels")

    def __init__(self, world, parcels: list[tuple]):
        self.world, self.parcels = world, parcels

    def __call__(self, _event) -> None:
        self.world.deliver(self.parcels)


@dataclass
class Stats:
    ticks: int = 0
    events: int = 0
    pushes: int = 0
    deliveries: int = 0
    phase_seconds: dict[str, float] = field(default_factory=dict)
    wall_s: float = 0.0      # wall time spent running (summed over the Python API's steps)


class World:
    """Build the population from a scenario and run it on a tape under SimPy."""

    def __init__(self, scenario: Scenario, cfg, tape: Tape, seed: int, recorder=None, progress=None, plugins=None):
        """`plugins` (sim.plugins.Plugins) are the scenario's strategies and hooks, already loaded;
        by default they are resolved here (relative plug-in files from the working directory)."""
        from sim import plugins as pluginm
        self.scenario, self.cfg, self.tape, self.seed = scenario, cfg, tape, seed
        self.progress = progress
        self.plugins = plugins if plugins is not None else pluginm.resolve(scenario)
        self.env = simpy.Environment()
        self.stats = Stats()
        self.clade_names = self._clade_names()
        self.pop = self._population()
        self.gr = gm.Grimoire(self.pop.n, cfg.grimoire.capacity, cfg.grimoire.embedding_dim,
                              temporal_base=cfg.retrieval.temporal_base, half_life_ms=cfg.decay.half_life_days * gm.DAY_MS,
                              react_boost=cfg.decay.reactivation_boost)   # the scan terms' constants
        group = np.repeat(np.arange(len(scenario.golems)), [g.count for g in scenario.golems])
        self.mind = Mind(cfg, self.pop, self.gr, tape.assets, tape.regime_names, seed, protocols=tape.protocols,
                         strategies=self.plugins.strategy_table(), hooks=self.plugins.hook_table(group))
        try:   # arousal's reference per asset, scaled once from the interval it is quoted for
            self.ref_rate = tape.reference_rate(cfg.appraisal.reference_vol, cfg.appraisal.reference_interval_s)
        except ValueError as exc:
            from sim.scenario import InputError
            raise InputError(str(exc)) from None
        # the tape's columns as plug-ins read them (CohortView.bars): whole arrays, cut at the current bar
        self.bars = {"open": tape.open, "high": tape.high, "low": tape.low, "close": tape.close,
                     "volume": tape.volume, "tvl": tape.tvl, "gas": tape.gas, "funding_rate": tape.funding}
        self.cohorts = self._cohorts()
        self.latency = self._latencies()
        self.tables = Tables(tape, cfg, self.pop)   # what happens, as table rows (sim.recording)
        self.rec = recorder
        self.market_step = -1
        # sim time 0 is the close of the first bar, so the first heartbeat sees a CLOSED bar
        # (generated tapes have bar_ms = 0: a bar is known at its own time)
        self.t0_ms = int(tape.time_ms[0]) + int(tape.bar_ms)
        # the gas reference is the median over the bars this run can reach, so a replay from the
        # recorded market table (which holds exactly those bars) gets the same value
        last = tape.index_at(self.t0_ms + int(round(scenario.duration_s * 1000)))
        gas = tape.gas[:max(last, 0) + 1]
        self.gas_ref = float(np.nanmedian(gas)) if np.isfinite(gas).any() else 30.0
        self.stop_signal: int | None = None   # set by a signal handler; checked between events
        self.checkpoint_dir = None            # set by the run driver with `checkpointer`: save state at every
        self.checkpointer = None              # flush, checkpointer(world, checkpoint_dir) (sim.checkpoint.maybe_save)
        self.roles: dict = {}                 # SimPy process -> role, for checkpoints
        self.begun = False                    # processes started (World.begin)
        self._prefill()

    # ---------------------------------------------------------------- construction
    def _clade_names(self) -> tuple[str, ...]:
        names = [c.name for c in self.scenario.clades]
        for g in self.scenario.golems:
            if g.clade not in names:
                names.append(g.clade)
        return tuple(names)

    def _population(self) -> Population:
        sc = self.scenario
        rows = []
        gid = 0
        for gi, grp in enumerate(sc.golems):
            a = self.tape.asset_index(grp.asset) if grp.asset and grp.asset != TAPE_ASSET else 0
            for _ in range(grp.count):
                # individual differences, drawn from the Golem's own stream (seed, golem id)
                rng = np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=(1, gid)))
                z = rng.standard_normal(5) * grp.spread
                temperament = np.clip(np.asarray(grp.temperament) + 0.3 * z[:3], -1, 1)
                rows.append((self.clade_names.index(grp.clade), a, self.plugins.strategy_of_group[gi], temperament,
                             grp.budget, grp.capital, grp.exposure, np.exp(z[3]), np.exp(z[4]),
                             float(np.exp(-abs(z[3] - z[4]) / 2))))
                gid += 1
        n = len(rows)
        pop = Population(n=n, clade=np.array([r[0] for r in rows], np.int32), clade_names=self.clade_names,
                         asset=np.array([r[1] for r in rows], np.int16), strategy=np.array([r[2] for r in rows], np.int8),
                         baseline=np.array([r[3] for r in rows], np.float64), budget0=np.array([r[4] for r in rows]),
                         value0=np.array([r[5] for r in rows], np.float64), n_regimes=len(self.tape.regime_names),
                         trend_scale=np.array([r[7] for r in rows]), memory_weight=np.array([r[8] for r in rows]),
                         risk=np.array([r[9] for r in rows]))
        price0 = self.tape.close[0, pop.asset.astype(np.int64)]
        expo = np.array([r[6] for r in rows])
        pop.units[:] = expo * pop.value0 / price0
        pop.cash[:] = pop.value0 * (1 - expo)
        return pop

    def _cohorts(self) -> list[Cohort]:
        keys: dict[tuple[float, float], list[int]] = {}
        g = 0
        for grp in self.scenario.golems:
            iv = self._interval_s(grp)
            st = parse_duration(grp.start)
            keys.setdefault((float(iv), float(st)), []).extend(range(g, g + grp.count))
            g += grp.count
        cohorts = [Cohort(iv, st, np.array(sorted(m), dtype=np.int64)) for (iv, st), m in sorted(keys.items())]
        for c in cohorts:
            self.pop.interval_s[c.members] = c.interval_s
        return cohorts

    def _interval_s(self, grp) -> float:
        """A group's heartbeat in seconds; `bar` is the tape's bar length (the generator's step)."""
        if grp.interval == BAR:
            return self.tape.bar_ms / 1000 if self.tape.bar_ms else float(self.scenario.market.step_s)
        return parse_duration(grp.interval) if grp.interval is not None else self.cfg.heartbeat.interval_s

    def _latencies(self) -> dict[int, tuple[float, float]]:
        out = {}
        spec = {c.name: c for c in self.scenario.clades}
        for i, name in enumerate(self.clade_names):
            c = spec.get(name)
            lat = parse_duration(c.latency) if c and c.latency is not None else self.cfg.clade.latency_s
            jit = parse_duration(c.jitter) if c and c.jitter is not None else self.cfg.clade.jitter_s
            out[i] = (float(lat), float(jit))
        return out

    def _prefill(self) -> None:
        """Imported memories (untagged, pre-affect) so retrieval scans a full Grimoire from tick 0.

        Imports bypassed gating: tier TTL 0, so the window is the class's days x (1 + salience)
        (SPEC §3.2); their confidence is their source's (`grimoire.import_source`, SPEC §3.4:
        untagged, so no arousal factor). In chunks of `PREFILL_CHUNK` entries (a 100,000-Golem world
        imports ~10^8): the embeddings are drawn and inserted chunk by chunk, then each random field
        is drawn chunk by chunk into its column; consecutive draws of one distribution give what one
        call would, so the values do not depend on the chunk size."""
        counts = np.zeros(self.pop.n, dtype=np.int64)
        g = 0
        for grp in self.scenario.golems:
            counts[g:g + grp.count] = min(grp.prefill, self.cfg.grimoire.capacity)
            g += grp.count
        total = int(counts.sum())
        if total == 0:
            return
        rng = np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=(3,)))
        ends = np.cumsum(counts)
        gr, cap = self.gr, self.gr.capacity

        def rows(lo, hi):
            """(Golem, slot) of prefill rows lo .. hi - 1 (one Golem's rows are consecutive)."""
            golem = np.searchsorted(ends, np.arange(lo, hi), side="right")
            return golem, golem * cap + np.arange(lo, hi) - (ends[golem] - counts[golem])

        chunks = [(lo, min(lo + PREFILL_CHUNK, total)) for lo in range(0, total, PREFILL_CHUNK)]
        day = 86_400_000
        g = self.cfg.grimoire
        base_days = gm.effective_window_days(gm.REGIME, 0.0, 0.0, (g.ephemeral_days, g.tactical_days,
                                                                    g.regime_conditional_days))
        # the next chunk's normals are drawn on a thread of their own while this chunk is normalised
        # and inserted (numpy's generator leaves the GIL while it fills an array): the same draws in
        # the same order, and the draws, about half of this loop's time, overlap the rest
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="golem-prefill") as drawer:
            def draw(lo, hi):
                return drawer.submit(rng.standard_normal, (hi - lo, gr.dim))
            pending = draw(*chunks[0])
            for i, (lo, hi) in enumerate(chunks):
                normals = pending.result()
                if i + 1 < len(chunks):
                    pending = draw(*chunks[i + 1])
                golem, _ = rows(lo, hi)
                gr.insert(golem, normalise(normals), dict(
                    ttl_days=np.float32(0.0), category=0, topic=0, scope=self.pop.asset[golem].astype(np.int32),
                    kind=KINDS.index("import"), confidence=np.float32(getattr(self.cfg.confidence, g.import_source)),
                    decay_class=gm.REGIME, has_tag=False, has_outcome=False, curator_weight=1.0), unit=True)
        c = gr.cols

        def salience(k):
            s = rng.uniform(0, 0.6, k)
            return s.astype(np.float32), base_days * (1.0 + s) * day   # the window follows the draw

        for name, draw in (("created_ms", lambda k: -rng.integers(0, 30 * day, k)),
                           ("last_access_ms", lambda k: -rng.integers(0, 5 * day, k)),
                           ("importance", lambda k: rng.uniform(0, 1, k).astype(np.float32)),
                           ("salience", salience),
                           ("outcome", lambda k: rng.uniform(-1, 1, k).astype(np.float32))):
            for lo, hi in chunks:
                slots = rows(lo, hi)[1]
                v = draw(hi - lo)
                if name == "salience":
                    c["salience"][slots], c["window_ms"][slots] = v
                else:
                    c[name][slots] = v
        gr.refresh_scan()           # the times were written after the inserts

    # ---------------------------------------------------------------- processes
    def market(self, first=None):
        """Advance the tape: record each bar as it becomes known (no look-ahead).

        `first` (resume only) is the already scheduled event of the next wake-up.
        """
        tape = self.tape
        if tape.bar_ms:
            step_s = tape.bar_ms / 1000
        else:
            step_s = (tape.time_ms[1] - tape.time_ms[0]) / 1000 if tape.n_steps > 1 else 300
        if first is not None:
            yield first
        while True:
            idx = tape.index_at(self.now_ms + self.t0_ms)
            if idx > self.market_step and self.rec is not None:
                self.tables.market(self.market_step + 1, idx + 1)
            self.market_step = max(self.market_step, idx)
            yield self.env.timeout(step_s)

    def heartbeat(self, cohort: Cohort, first=None):
        yield first if first is not None else self.env.timeout(cohort.start_s)
        while True:
            alive = cohort.members[self.pop.alive[cohort.members]]
            if alive.size == 0:
                return
            obs = self.observe(alive)
            out = self.mind.tick(alive, obs)
            self.stats.ticks += out.heartbeats["golem_id"].size if out.heartbeats else 0
            self.emit(out)
            yield self.env.timeout(cohort.interval_s)

    def flusher(self, first=None):
        """Flush at low priority every `recording.flush_every_s`, then checkpoint (`checkpointer`)."""
        every = self.cfg.recording.flush_every_s
        ev = first if first is not None else self.at(self.env.now + every, LOW)
        while True:
            yield ev
            self.flush(background=True)
            if self.checkpoint_dir is not None:
                self.checkpointer(self, self.checkpoint_dir)
            ev = self.at(self.env.now + every, LOW)

    def reporter(self, every_s: float):
        while True:
            if self.progress is not None:
                self.progress(self.env.now, self.stats.ticks, int(self.pop.alive.sum()))
            yield self.env.timeout(every_s)

    # ---------------------------------------------------------------- plumbing
    def at(self, time_s: float, priority: int = 1) -> simpy.Event:
        """An event scheduled at an exact absolute time (resume needs the recorded float, not
        now + (t - now), which may round differently); SimPy orders equal (time, priority) by
        creation, which is how a resume reproduces the order of a run."""
        ev = simpy.Event(self.env)
        ev._ok, ev._value = True, None
        heapq.heappush(self.env._queue, (time_s, priority, next(self.env._eid), ev))
        return ev

    def start(self, role, gen) -> simpy.Process:
        proc = self.env.process(gen)
        self.roles[proc] = role
        return proc

    @property
    def now_ms(self) -> int:
        return int(round(self.env.now * 1000))

    @property
    def rec(self):
        """The run's Recorder (sim.recorder), None when nothing is recorded; set by the run driver."""
        return self.tables.rec

    @rec.setter
    def rec(self, recorder) -> None:
        self.tables.rec = recorder

    @property
    def event_seq(self) -> int:
        """The next event row's `seq` (a checkpoint saves and restores it)."""
        return self.tables.event_seq

    @event_seq.setter
    def event_seq(self, seq: int) -> None:
        self.tables.event_seq = seq

    def observe(self, ix: np.ndarray) -> Observation:
        tape = self.tape
        now = self.now_ms
        i = max(0, tape.index_at(now + self.t0_ms))
        # each Golem looks at what happened since its last awake tick (nothing is lost to a dream)
        pop = self.pop
        since = np.where(np.isnan(pop.last_price[ix]), now, pop.last_ms[ix]) + self.t0_ms
        sev, visible, sees = probe_severity(tape, self.seed, ix, pop.asset[ix], now + self.t0_ms, since)
        events = [(tape.events[e].kind, tape.events[e].severity, tape.events[e].tokens) for e in visible]
        return Observation(now_ms=now, step=i, close=tape.close[i], tvl=tape.tvl[i], gas=float(tape.gas[i]),
                           gas_ref=self.gas_ref, regime=int(tape.regime[i]), probe_sev=sev, events=events, sees=sees,
                           event_assets=np.array([tape.events[e].asset for e in visible], dtype=np.int64),
                           bars=self.bars, ref_rate=self.ref_rate)

    def emit(self, out: TickOutput) -> None:
        for ev in out.events:
            if isinstance(ev, dict) and ev["kind"] == "write_aborted":   # SPEC §3.3: loudly
                structlog.get_logger().error("write_aborted", golem=ev["golem_id"], time_ms=ev["time_ms"], **ev["payload"])
        if out.pushes:
            self.push(out.pushes)
        if self.rec is not None:
            self.stats.events += self.tables.tick(out)

    def push(self, pushes: list[dict]) -> None:
        """Schedule delivery of each pushed entry to every living sibling after the Clade's latency:
        one SimPy event per arrival instant. A Clade without jitter sends all its pushes of the
        instant to one shared receiver array (its living members; the sender is left out at
        delivery), so a push wave holds no receiver list per push."""
        if not self.cfg.clade.enabled:
            return
        members: dict[int, np.ndarray] = {}   # living members of each Clade (no one dies in here)
        sent = []
        for push in pushes:
            cl = int(self.pop.clade[push["sender"]])
            if cl not in members:
                members[cl] = np.flatnonzero((self.pop.clade == cl) & self.pop.alive)
            if (members[cl] != push["sender"]).any():   # someone besides the sender (who may be dying)
                sent.append((push, cl))
        if not sent:
            return
        shared: dict[int, tuple] = {}         # Clade -> (arrival, receivers, latencies in ms)
        for cl in {cl for _, cl in sent}:
            lat, jit = self.latency[cl]
            if jit == 0:
                delay = max(lat, 0.001)
                shared[cl] = (self.env.now + delay, members[cl].astype(np.int32),
                              _latency_ms(np.full(members[cl].size, delay)))
        jittered = self._jitter_draws([(push, members[cl]) for push, cl in sent if cl not in shared])
        arrivals: dict[float, list[tuple]] = {}
        for push, cl in sent:
            sender = push["sender"]
            entry = cladem.capture(self.gr, push["slot"])
            self.stats.pushes += 1
            if cl in shared:
                t, recv, latency_ms = shared[cl]
                arrivals.setdefault(t, []).append((sender, entry, push["alert_type"], recv, latency_ms))
                continue
            sibs, u = next(jittered)
            lat, jit = self.latency[cl]
            delays = np.maximum(lat + jit * u, 0.001)
            times = self.env.now + delays
            latency_ms = _latency_ms(delays)
            sibs = sibs.astype(np.int32)
            for t in np.unique(times).tolist():
                at = times == t
                arrivals.setdefault(t, []).append((sender, entry, push["alert_type"], sibs[at], latency_ms[at]))
        for t, parcels in arrivals.items():   # insertion order: first arrival of each instant
            self.at(t).callbacks.append(Delivery(self, parcels))

    def _jitter_draws(self, sent: list[tuple]):
        """(siblings, their uniform jitter draws) of each push of `sent` ((push, its Clade's
        members)), in order. The draws are elementwise (counter-based), so a call
        for a group of pushes (~PUSH_DRAWS receivers) gives each (receiver, entry) pair the number
        a call per push would, and a push wave of 1,000-Golem Clades (~10^6 receivers each) never
        holds all its draws at once."""
        group: list[tuple] = []
        count = 0
        for i, (push, mem) in enumerate(sent):
            group.append((push, mem[mem != push["sender"]]))
            count += group[-1][1].size
            if count >= PUSH_DRAWS or i == len(sent) - 1:
                sizes = [sibs.size for _, sibs in group]
                u = hash_uniform_array(self.seed, np.concatenate([sibs for _, sibs in group]),
                                       np.repeat([p["entry_id"] for p, _ in group], sizes), 11)
                yield from zip((sibs for _, sibs in group), np.split(u, np.cumsum(sizes)[:-1]))
                group, count = [], 0

    def deliver(self, parcels: list[tuple]) -> None:
        """Pushes arrive: the living siblings store the copies and feel the contagion."""
        # a dead Golem receives nothing, nor does the sender: clade.receive leaves them out Clade by
        # Clade, so nothing is held per copy across Clades
        n, rows = cladem.receive(self.mind, parcels, self.now_ms, self.cfg.clade.contagion_attenuation,
                                 rows=self.rec is not None)
        if n == 0:
            return
        self.stats.deliveries += n
        if self.rec is not None:
            self.tables.delivered(rows, self.mind.pending_entries)
        self.mind.pending_entries = []

    def flush(self, background: bool = False) -> None:
        """Write the buffered rows; `background` (the periodic flush) leaves the Parquet encoding
        to the recorder's writer thread (the next flush, the run's end among them, waits for it)."""
        if self.rec is not None:
            self.stats.events += self.tables.deliveries()
            self.rec.flush(background)

    def run(self, until_s: float, resume=None, finish: bool = True, stop=None) -> bool:
        """Run to `until_s` (events at exactly until_s do not run, as with env.run(until)).

        `resume` (a sim.checkpoint.Checkpoint whose state is already restored) recreates the
        pending events in their recorded order instead of starting the processes afresh.
        `finish=False` stops there without closing the run (the Python API's steps: a later call
        goes on, and the tables are those of one call to the end); `stop()`, asked after each
        instant, may end the call early. Returns whether until_s was reached. Raises
        RunInterrupted, between two events, once `stop_signal` is set.
        """
        self.begin(resume, progress_every_s=max(until_s / 200, 300))
        reached = self.advance(until_s, stop)
        if finish and reached:
            self.finish()
        return reached

    def begin(self, resume=None, progress_every_s: float = 300.0) -> None:
        """Start the processes (once; later calls do nothing)."""
        if self.begun:
            return
        self.begun = True
        if resume is None:
            self.start("market", self.market())
            for i, c in enumerate(self.cohorts):
                self.start(("cohort", i), self.heartbeat(c))
            if self.rec is not None:
                self.start("flusher", self.flusher())
        else:
            resume.reschedule(self)
        if self.progress is not None:
            self.start("reporter", self.reporter(progress_every_s))

    def advance(self, until_s: float, stop=None) -> bool:
        """Process every event before `until_s`, leaving the clock at until_s (True); with `stop`,
        end early once stop() says so after an instant's last event (False)."""
        env = self.env
        while self.stop_signal is None and env.peek() < until_s:
            env.step()
            if stop is not None and env.peek() > env.now and env.peek() < until_s and stop():
                return False
        if self.stop_signal is not None:
            raise RunInterrupted(self.stop_signal)
        if env.now < until_s:
            env.run(until=until_s)
        return True

    def finish(self) -> None:
        """Close the run: record the bar at the end time and flush everything."""
        # the bar at the end time is part of the run
        if self.rec is not None:
            idx = self.tape.index_at(self.now_ms + self.t0_ms)
            if idx > self.market_step:
                self.tables.market(self.market_step + 1, idx + 1)
                self.market_step = idx
            self.flush()
