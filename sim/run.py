"""A run end to end: scenario + config layers -> tape -> world -> run directory (SPEC §13)."""
from __future__ import annotations

import gc
import platform
import shutil
import signal
import threading
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import structlog

from sim import config_layers
from sim.market import generate
from sim.recorder import Recorder, atomic_write_json, content_hashes, row_counts
from sim.scenario import InputError, Scenario, load_scenario
from sim.world import World

VERSION_PACKAGES = ("golem-sim", "numpy", "numba", "simpy", "pyarrow", "polars")


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for p in VERSION_PACKAGES:
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            out[p] = "unknown"
    return out


@dataclass
class RunResult:
    run_dir: Path
    world: World
    manifest: dict
    wall_s: float


def configure_logging(run_dir: Path | None, console: bool = False) -> None:
    """structlog JSON lines into the run directory (and nothing on stdout unless asked)."""
    processors = [structlog.processors.add_log_level, structlog.processors.TimeStamper(fmt="iso", utc=True),
                  structlog.processors.JSONRenderer(sort_keys=True)]
    if run_dir is not None:
        fh = open(Path(run_dir) / "log.jsonl", "a", buffering=1)
        structlog.configure(processors=processors, logger_factory=structlog.WriteLoggerFactory(file=fh),
                            cache_logger_on_first_use=False)
    elif console:
        structlog.configure(processors=[structlog.dev.ConsoleRenderer()], cache_logger_on_first_use=False)


def build_tape(scenario: Scenario, seed: int, cfg=None):
    """The run's market: the scenario's tape file (cut to the run) or the generator's draw."""
    if scenario.market.tape is not None:
        from sim.tape_market import tape_from_file
        from sim.tapes import TapeError
        try:
            return tape_from_file(scenario, cfg)
        except TapeError as exc:  # bad tape data is bad input: one line, exit 2
            raise InputError(str(exc)) from None
    return generate(scenario.market, scenario.duration_s, seed)


def prepare(scenario_path: str | Path, *, seed: int | None = None, sets: list[str] | None = None,
            config_file: str | None = None, environ: dict[str, str] | None = None):
    """Load and validate everything a run needs, before anything is written."""
    cfg_sets, scen_sets = config_layers.split_sets(sets)
    scenario = load_scenario(scenario_path, scen_sets)
    cfg, sources = config_layers.resolve(config_file, scenario.overrides, environ, cfg_sets,
                                         scenario_source=str(scenario_path))
    from sim.plugins import resolve as resolve_plugins
    resolve_plugins(scenario, scenario_path)   # a plug-in that cannot load is bad input, found before a run starts
    run_seed = scenario.seed if seed is None else seed
    return scenario, cfg, sources, run_seed


def execute(scenario_path: str | Path, out_dir: str | Path, *, seed: int | None = None, sets: list[str] | None = None,
            config_file: str | None = None, environ: dict[str, str] | None = None, record: bool = True,
            progress=None, parent: dict | None = None, tape=None, checkpoint: bool = True) -> RunResult:
    """Run a scenario file into `out_dir`. `tape` (a sim.market.Tape) replaces the scenario's market."""
    scenario, cfg, sources, run_seed = prepare(scenario_path, seed=seed, sets=sets, config_file=config_file,
                                               environ=environ)
    return execute_prepared(scenario, cfg, run_seed, out_dir, scenario_path=str(scenario_path), sources=sources,
                            sets=sets, record=record, progress=progress, parent=parent, tape=tape,
                            checkpoint=checkpoint)


def execute_prepared(scenario: Scenario, cfg, run_seed: int, out_dir: str | Path, *, scenario_path: str = "",
                     sources: dict | None = None, sets: list[str] | None = None, record: bool = True, progress=None,
                     parent: dict | None = None, changes: list[str] | None = None, tape=None,
                     checkpoint: bool = True, tape_info: dict | None = None, plugins=None) -> RunResult:
    """Run an already validated scenario + config (replays come in here with the recorded tape;
    `tape_info` then says where that tape came from, for the manifest)."""
    world, manifest, run_dir = open_run(scenario, cfg, run_seed, out_dir, scenario_path=scenario_path, sources=sources,
                                        sets=sets, record=record, progress=progress, parent=parent, changes=changes,
                                        tape=tape, checkpoint=checkpoint, tape_info=tape_info, plugins=plugins)
    return drive(world, manifest, run_dir, record, scenario.duration_s)


def open_run(scenario: Scenario, cfg, run_seed: int, out_dir: str | Path | None, *, scenario_path: str = "",
             sources: dict | None = None, sets: list[str] | None = None, record: bool = True, progress=None,
             parent: dict | None = None, changes: list[str] | None = None, tape=None, checkpoint: bool = True,
             tape_info: dict | None = None, plugins=None, recorder=None) -> tuple[World, dict, Path]:
    """Everything before the first event: plug-ins loaded (sim.plugins; `plugins` already
    resolved, e.g. a replay's), the run directory, the world and its starting manifest.
    `recorder` (with record=False) keeps the tables somewhere else than a run directory (the
    Python API's in-memory runs): nothing is written."""
    from sim import plugins as pluginm
    from sim.tape_market import tape_meta
    if plugins is None:
        plugins = pluginm.resolve(scenario, scenario_path or None)
    run_dir = Path(out_dir) if out_dir is not None else None
    if record:
        if run_dir.exists() and any(run_dir.iterdir()):
            raise InputError(f"{run_dir}: output directory is not empty (choose another --out)")
        run_dir.mkdir(parents=True, exist_ok=True)
        configure_logging(run_dir)
    log = structlog.get_logger()
    if tape is None:
        tape = build_tape(scenario, run_seed, cfg)
    rec = Recorder(run_dir) if record else recorder
    world = World(scenario, cfg, tape, run_seed, recorder=rec, progress=progress, plugins=plugins)
    manifest = {
        "format": 1, "status": "running", "scenario_path": str(scenario_path), "scenario": scenario.model_dump(mode="json"),
        "seed": run_seed, "config": cfg.flat(), "config_sources": sources or {}, "sets": list(sets or []),
        "versions": versions(), "parent": parent, "tape": tape_info or tape_meta(tape, scenario),
        "plugins": plugins.manifest(),
    }
    if changes is not None:
        manifest["changes"] = list(changes)
    if record:
        world.record_tape_events()
        if checkpoint:
            world.checkpoint_dir = run_dir / "checkpoint"
        atomic_write_json(run_dir / "manifest.json", manifest)
        log.info("run_start", scenario=scenario.name, seed=run_seed, golems=world.pop.n)
    elif recorder is not None:
        world.record_tape_events()
    return world, manifest, run_dir


@contextmanager
def stop_on_signals(world: World):
    """SIGINT/SIGTERM ask the world to stop between two events (a second one stops at once), so an
    interrupted run flushes consistent rows and says where it stopped. Main thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, _frame):
        if world.stop_signal is not None:
            raise KeyboardInterrupt
        world.stop_signal = signum

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def drive(world: World, manifest: dict, run_dir: Path, record: bool, until_s: float, resume=None,
          end_s: float | None = None, stop=None) -> RunResult | None:
    """Run the world to `until_s` and keep the manifest honest: complete, interrupted (flushed,
    with where it stopped) or failed (a plug-in's error: flushed, the error named). A completed run
    drops its checkpoint: nothing is left to resume. With `end_s` beyond `until_s`, or when
    `stop()` ends the drive early (World.run), the run stays open (status running) and None is
    returned: the Python API drives a run in steps."""
    from golem.plugins import PluginError
    from sim.plugins import PluginFailed
    log = structlog.get_logger()
    end_s = until_s if end_s is None else end_s
    t0 = time.perf_counter()
    gc.freeze()   # the setup's objects live all run: keep the cyclic collector from rescanning them
    try:
        with stop_on_signals(world) if record else nullcontext():
            reached = world.run(until_s, resume=resume, finish=until_s >= end_s, stop=stop)
    except BaseException as exc:
        failed = isinstance(exc, PluginError)
        if record:
            world.flush()
            sig = getattr(exc, "signum", None)
            manifest.update(status="failed" if failed else "interrupted", stopped_at_s=world.env.now,
                            error=str(exc) if failed else repr(exc), signal=signal.Signals(sig).name if sig else None)
            manifest.update(row_counts=row_counts(run_dir), hashes=content_hashes(run_dir))
            atomic_write_json(run_dir / "manifest.json", manifest)
            log.error("run_failed" if failed else "run_interrupted", at_s=world.env.now, error=repr(exc))
        elif failed and world.rec is not None:
            world.flush()
        if failed:
            manifest.update(status="failed", stopped_at_s=world.env.now, error=str(exc))
            kept = f"; the tables written until then are in {run_dir} (manifest status: failed)" if record else ""
            raise PluginFailed(f"{exc}{kept}") from exc
        raise
    finally:
        gc.unfreeze()   # a sweep runs many worlds in one process: let this one's cycles go
    world.stats.wall_s += time.perf_counter() - t0
    if until_s < end_s or not reached:
        return None
    wall = world.stats.wall_s
    manifest.update(status="complete", wall_s=round(wall, 3), golem_ticks=world.stats.ticks,
                    stats={"events": world.stats.events, "pushes": world.stats.pushes,
                           "deliveries": world.stats.deliveries})
    if record:
        manifest.update(row_counts=row_counts(run_dir), hashes=content_hashes(run_dir))
        atomic_write_json(run_dir / "manifest.json", manifest)
        if world.checkpoint_dir is not None:
            shutil.rmtree(world.checkpoint_dir, ignore_errors=True)
        log.info("run_complete", wall_s=wall, ticks=world.stats.ticks)
    return RunResult(run_dir, world, manifest, wall)




__all__ = ["execute", "prepare", "RunResult", "InputError"]
