"""The Python API: a run a notebook can drive, look into while it runs, and read as polars.

    from sim.api import Simulation
    sim = Simulation.from_yaml("scenarios/flash_crash.yaml", seed=7, sets=["duration=1d"])
    sim.run_for("6h")                  # or .step() (one heartbeat), .run(until="12h"), .run()
    sim.population()                   # the population now, one row per Golem (polars)
    sim.grimoire(3)                    # Golem 3's memories now
    sim.run()
    sim.result.heartbeats.collect()    # every table as a polars LazyFrame

A Simulation is the same run as `golem-sim run`: the same loading (config layers, plug-ins), the same
world and the same driver (`sim.run.open_run`, `sim.run.drive`), so with a run directory its tables
are byte-identical to the command line's, however it is stepped: steps only choose where the driver
pauses, and pausing changes nothing the world does (docs/api.md). `memory=True` keeps the tables in
memory and writes nothing (no run directory, no log, no checkpoints).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np
import polars as pl
import pyarrow as pa

from golem import grimoire as gm
from golem import mortality
from golem import pad as padm
from golem.memory_writer import KINDS
from golem.plugins import mood_of
from golem.population import PHASES
from sim.recorder import SCHEMAS, TABLES, Recorder, _build
from sim.scenario import InputError, parse_duration

__all__ = ["Simulation", "Result", "MemoryRecorder"]


class MemoryRecorder(Recorder):
    """The recorder of an in-memory run: each flush's part becomes an Arrow table in memory (the
    same rows, order and schema as the part file a run directory would get); nothing is written."""

    def __init__(self):
        self.parts: dict[str, list[pa.Table]] = {t: [] for t in TABLES}
        super().__init__(Path("<memory>"))

    def _make_dirs(self) -> None:
        pass

    def _write(self, parts: list[tuple[Path, str, dict[str, list]]], background: bool) -> None:
        for _, table, cols in parts:
            self.parts[table].append(_build(table, cols))

    def table(self, name: str) -> pa.Table:
        parts = self.parts[name]
        return pa.concat_tables(parts) if parts else SCHEMAS[name].empty_table()


@dataclass
class Result:
    """A run's tables as polars LazyFrames (`result.heartbeats`, `result["events"]`, `result.tables`),
    with its manifest and run directory (None for an in-memory run)."""

    manifest: dict
    run_dir: Path | None
    memory: MemoryRecorder | None = None

    @property
    def status(self) -> str:
        return self.manifest.get("status", "running")

    def table(self, name: str) -> pl.LazyFrame:
        if name not in SCHEMAS:
            raise KeyError(f"no table {name!r}; expected one of {', '.join(TABLES)}")
        if self.memory is not None:
            return pl.from_arrow(self.memory.table(name)).lazy()
        files = sorted((self.run_dir / name).glob("part-*.parquet")) if self.run_dir is not None else []
        if not files:
            return pl.from_arrow(SCHEMAS[name].empty_table()).lazy()
        return pl.scan_parquet(files)

    @property
    def tables(self) -> dict[str, pl.LazyFrame]:
        return {t: self.table(t) for t in TABLES}

    def __getitem__(self, name: str) -> pl.LazyFrame:
        return self.table(name)

    def __getattr__(self, name: str) -> pl.LazyFrame:
        if name in SCHEMAS:
            return self.table(name)
        raise AttributeError(name)

    def __repr__(self) -> str:
        where = self.run_dir if self.run_dir is not None else "in memory"
        return f"Result({self.manifest.get('scenario', {}).get('name')!r}, {self.status}, {where})"


def _sets_list(sets: Iterable[str] | Mapping[str, Any] | None) -> list[str]:
    """--set items from a list of 'key=value' strings or a {key: value} mapping (values as YAML)."""
    if sets is None:
        return []
    if isinstance(sets, Mapping):
        return [f"{k}={json.dumps(v)}" for k, v in sets.items()]
    if isinstance(sets, str):
        raise InputError(f"sets={sets!r}: expected a list of 'key=value' strings or a mapping")
    return [str(s) for s in sets]


class Simulation:
    """A run driven from Python: `from_yaml`, then `step` / `run_for` / `run`, `population`,
    `grimoire`, and `result` (see the module docstring and docs/api.md)."""

    def __init__(self, world, manifest: dict, run_dir: Path | None, memory: MemoryRecorder | None):
        self.world, self.manifest, self.run_dir, self.memory = world, manifest, run_dir, memory
        self._failed: Exception | None = None

    # -------------------------------------------------------------- making one
    @classmethod
    def from_yaml(cls, path: str | Path, *, seed: int | None = None,
                  sets: Iterable[str] | Mapping[str, Any] | None = None, out: str | Path | None = None,
                  memory: bool = False, config: str | Path | None = None, environ: Mapping[str, str] | None = None,
                  checkpoint: bool = True) -> "Simulation":
        """A run of the scenario file `path`, as `golem-sim run path --seed seed --set ... --out out`.

        `out`: the run directory (default `runs/<scenario>-seed<N>`, like the command line);
        `memory=True`: no files at all, the tables stay in memory. `environ`: the GOLEM_*
        environment to read (default: this process's). Bad input raises `InputError` (one line)
        before anything is written."""
        from sim.run import open_run, prepare
        sets = _sets_list(sets)
        if memory and out is not None:
            raise InputError(f"out={str(out)!r} and memory=True: an in-memory run writes no run directory; "
                             "expected one of them")
        scenario, cfg, sources, run_seed = prepare(path, seed=seed, sets=sets,
                                                   config_file=str(config) if config else None, environ=environ)
        if memory:
            rec = MemoryRecorder()
            world, manifest, _ = open_run(scenario, cfg, run_seed, None, scenario_path=str(path), sources=sources,
                                          sets=sets, record=False, recorder=rec, checkpoint=False)
            return cls(world, manifest, None, rec)
        if out is None:
            from sim.cli import _default_out
            out = _default_out(Path(path), run_seed)
        world, manifest, run_dir = open_run(scenario, cfg, run_seed, out, scenario_path=str(path), sources=sources,
                                            sets=sets, record=True, checkpoint=checkpoint)
        return cls(world, manifest, run_dir, None)

    # -------------------------------------------------------------- time
    @property
    def now_s(self) -> float:
        """Simulated seconds since the start."""
        return float(self.world.env.now)

    @property
    def now_ms(self) -> int:
        """The clock of the tables' time_ms columns."""
        return self.world.now_ms

    @property
    def end_s(self) -> float:
        return float(self.world.scenario.duration_s)

    @property
    def status(self) -> str:
        """running, complete, failed or interrupted (as the manifest says)."""
        return self.manifest.get("status", "running")

    @property
    def done(self) -> bool:
        return self.status != "running"

    # -------------------------------------------------------------- driving
    def step(self) -> "Simulation":
        """Run to the end of the next instant at which a heartbeat cohort ticks (every Golem due
        then has ticked, and whatever else happens at that instant has happened)."""
        ticks = self.world.stats.ticks
        return self._drive(self.end_s, stop=lambda: self.world.stats.ticks > ticks)

    def run(self, until: float | str | None = None) -> "Simulation":
        """Run to `until` (simulated time since the start: seconds or '36h'; default and at most the
        scenario's duration). Events at exactly `until` run in the next call, as in SimPy."""
        until_s = self.end_s if until is None else self._time(until, "until")
        return self._drive(min(until_s, self.end_s))

    def run_for(self, span: float | str) -> "Simulation":
        """Run for `span` more simulated time (seconds or '6h'), at most to the end."""
        return self.run(self.now_s + self._time(span, "span"))

    def _time(self, v, name: str) -> float:
        try:
            return parse_duration(v)
        except ValueError as exc:
            raise InputError(f"{name}={v!r}: {exc}") from None

    def _drive(self, until_s: float, stop=None) -> "Simulation":
        from sim.run import drive
        if self._failed is not None:
            how = "failed" if self.status == "failed" else "was interrupted"
            more = f" (golem-sim resume {self.run_dir} continues it)" if how != "failed" and self.run_dir else ""
            raise InputError(f"the run {how} earlier and cannot go on here{more}: {self._failed}")
        if self.done:
            return self
        try:
            drive(self.world, self.manifest, self.run_dir, self.run_dir is not None, max(until_s, self.now_s),
                  end_s=self.end_s, stop=stop)
        except BaseException as exc:
            self._failed = exc
            if self.status == "running":
                self.manifest.update(status="interrupted", stopped_at_s=self.now_s, error=repr(exc))
            raise
        if self.memory is not None and self.status == "complete":
            self.manifest.update(row_counts={t: self.memory.rows[t] for t in TABLES})
        return self

    # -------------------------------------------------------------- looking in
    @property
    def result(self) -> Result:
        """The tables so far (all of them once the run is done). An in-memory run first records
        what is buffered; a run directory shows the parts flushed so far (flushing early would
        change its files)."""
        if self.memory is not None and not self.done:
            self.world.flush()
        return Result(self.manifest, self.run_dir, self.memory)

    def population(self) -> pl.DataFrame:
        """The population now, one row per Golem: identity, strategy, life, affect (emotion and
        mood), portfolio at the current price, and how many entries its Grimoire holds."""
        w = self.world
        pop, tape = w.pop, w.tape
        asset = pop.asset.astype(np.int64)
        price = tape.close[max(w.market_step, 0), asset]     # the last bar the world's market has shown
        value = pop.cash + pop.units * price
        mood = mood_of(pop)
        from golem import appraisal
        emotion = appraisal.classify_batch(pop.pad[:, 0], pop.pad[:, 1], pop.pad[:, 2], w.mind.protos,
                                           w.cfg.emotion.neutral_norm)
        live = w.gr.live_rows(pop.golem_id) if pop.n else np.zeros((0, 0), bool)
        names = [p.name for p in w.plugins.strategies]
        return pl.DataFrame({
            "golem_id": pop.golem_id, "clade": np.array(pop.clade_names, dtype=object)[pop.clade],
            "asset": np.array(tape.assets, dtype=object)[asset], "strategy": np.array(names, dtype=object)[pop.strategy],
            "alive": pop.alive, "phase": np.array(PHASES, dtype=object)[pop.phase], "tick": pop.tick,
            "p": pop.pad[:, 0], "a": pop.pad[:, 1], "d": pop.pad[:, 2],
            "mood_p": mood[:, 0], "mood_a": mood[:, 1], "mood_d": mood[:, 2],
            "emotion": np.array(padm.EMOTION_CODES, dtype=object)[emotion],
            "cash": pop.cash, "units": pop.units, "price": price, "value": value,
            "exposure": np.where(value > 0, pop.units * price / np.maximum(value, 1e-12), 0.0),
            "budget": pop.budget, "vitality": mortality.vitality(pop.budget, pop.budget0, value, pop.value0),
            "entries": live.sum(axis=1).astype(np.int64),
        }, strict=False)

    def grimoire(self, golem_id: int) -> pl.DataFrame:
        """Golem `golem_id`'s memories now, one row per stored entry (archived ones included, see
        `status`), in id order; names as in the entries table."""
        w = self.world
        gr = w.gr
        if not 0 <= int(golem_id) < w.pop.n:
            raise InputError(f"golem_id={golem_id}: expected 0..{w.pop.n - 1}")
        sl = gr.slab(int(golem_id))
        slots = np.arange(sl.start, sl.stop)
        c = gr.cols
        slots = slots[c["id"][slots] >= 0]
        slots = slots[np.argsort(c["id"][slots], kind="stable")]

        def col(name):
            return c[name][slots]

        def names(table, name):
            return np.array(table, dtype=object)[col(name).astype(np.int64)]
        assets = w.tape.assets
        return pl.DataFrame({
            "id": col("id"), "created_ms": col("created_ms"), "last_access_ms": col("last_access_ms"),
            "category": names(gm.CATEGORIES, "category"), "kind": names(KINDS, "kind"),
            "topic": np.array([w.mind.topic_name(int(t)) for t in col("topic")], dtype=object),
            "scope": np.array(assets, dtype=object)[np.clip(col("scope"), 0, len(assets) - 1)],
            "status": names(gm.STATUSES, "status"), "decay_class": names(gm.DECAY_CLASSES, "decay_class"),
            "has_tag": col("has_tag"), "p": col("p"), "a": col("a"), "d": col("d"),
            "emotion": names(padm.EMOTION_CODES, "emotion"), "intensity": col("i0"),
            "confidence": col("confidence"), "importance": col("importance"), "salience": col("salience"),
            "flashbulb": col("flashbulb"), "arousal_bias": col("arousal_bias"), "provenance": col("provenance"),
            "access_count": col("access_count"), "acted_on_count": col("acted_on_count"),
            "reactivated": col("reactivated"), "reflex": col("reflex"), "heat": col("heat"),
            "outcome": np.where(col("has_outcome"), col("outcome"), np.nan),
        }, strict=False).with_columns(pl.col("outcome").fill_nan(None))

    def __repr__(self) -> str:
        where = self.run_dir if self.run_dir is not None else "in memory"
        return (f"Simulation({self.world.scenario.name!r}, t={self.now_s / 3600:g} h of "
                f"{self.end_s / 3600:g} h, {self.status}, {where})")
