"""A run end to end: scenario + config layers -> tape -> world -> run directory (SPEC §13)."""
from __future__ import annotations

import gc
import shutil
import signal
import threading
import time
import traceback
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import structlog

from sim.checkpoint import maybe_save
from sim import config_layers, resources, rundir, versions
from sim.errors import clip, escape, one_line, show
from sim.market import generate
from sim.recorder import Recorder, row_counts, warm_up as recorder_warm_up
from sim.scenario import InputError, Scenario, load_scenario
from sim.world import RunInterrupted, World

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
        fh = rundir.open_file(Path(run_dir) / "log.jsonl", "a", buffering=1)   # no link followed (sim.rundir)
        structlog.configure(processors=processors, logger_factory=structlog.WriteLoggerFactory(file=fh),
                            cache_logger_on_first_use=False)
    elif console:
        structlog.configure(processors=[structlog.dev.ConsoleRenderer()], cache_logger_on_first_use=False)


def build_tape(scenario: Scenario, seed: int, cfg=None, where: str = ""):
    """The run's market: the scenario's tape file (cut to the run) or the generator's draw, checked
    (`where`: the scenario file, for the error)."""
    if scenario.market.tape is not None:
        from sim.tape_market import tape_from_file
        from sim.tapes import TapeError
        try:
            tape = tape_from_file(scenario, cfg)
        except TapeError as exc:  # bad tape data is bad input: one line, exit 2
            raise InputError(str(exc)) from None
    else:
        with np.errstate(over="ignore", invalid="ignore"):   # an overflow is reported by check_tape
            tape = generate(scenario.market, scenario.duration_s, seed)
    key_path = "market.tape" if scenario.market.tape is not None else "market"
    check_tape(tape, f"{where}: {key_path}" if where else key_path)
    return tape


def check_tape(tape, where: str) -> None:
    """Prices finite and at least MIN_PRICE on every bar: a generator whose drift, volatility, jumps
    and event impacts overflow (or underflow) over a long run would otherwise give a run of inf and
    NaN values."""
    from sim.scenario import MIN_PRICE
    with np.errstate(invalid="ignore"):
        for name in ("close", "open", "high", "low"):
            bad = ~(np.isfinite(getattr(tape, name)) & (getattr(tape, name) >= MIN_PRICE))
            if bad.any():
                step, asset = np.argwhere(bad)[0]
                t_h = (int(tape.time_ms[step]) - int(tape.time_ms[0])) / 3.6e6
                raise InputError(
                    f"{where}: the {name} price of {tape.assets[asset]} is {float(getattr(tape, name)[step, asset])!r} "
                    f"at bar {step} ({t_h:,.1f} h); expected regimes (drift, vol, jump_size), events (impact) and "
                    f"a duration that keep prices finite and at least {MIN_PRICE:g}")


def _check_seed(seed: int, where: str) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= 2**63 - 1:
        raise InputError(f"{where}: {show(seed)}: expected a seed from 0 to 2**63 - 1")
    return seed


def prepare(scenario_path: str | Path, *, seed: int | None = None, sets: list[str] | None = None,
            config_file: str | None = None, environ: dict[str, str] | None = None, record: bool = True):
    """Load and validate everything a run needs, before anything is written: scenario, config
    layers, seed, and whether the world fits in memory (sim.resources)."""
    cfg_sets, scen_sets = config_layers.split_sets(sets)
    scenario = load_scenario(scenario_path, scen_sets)
    cfg, sources = config_layers.resolve(config_file, scenario.overrides, environ, cfg_sets,
                                         scenario_source=str(scenario_path))
    from sim.plugins import check as check_plugins
    check_plugins(scenario, scenario_path)   # every plug-in name resolves (nothing executed: validate uses this)
    run_seed = scenario.seed if seed is None else _check_seed(seed, "--seed")
    resources.check(scenario, cfg, str(scenario_path), record=record, environ=environ)
    return scenario, cfg, sources, run_seed


def execute(scenario_path: str | Path, out_dir: str | Path, *, seed: int | None = None, sets: list[str] | None = None,
            config_file: str | None = None, environ: dict[str, str] | None = None, record: bool = True,
            progress=None, parent: dict | None = None, tape=None, checkpoint: bool = True) -> RunResult:
    """Run a scenario file into `out_dir`. `tape` (a sim.market.Tape) replaces the scenario's market."""
    scenario, cfg, sources, run_seed = prepare(scenario_path, seed=seed, sets=sets, config_file=config_file,
                                               environ=environ, record=record)
    return execute_prepared(scenario, cfg, run_seed, out_dir, scenario_path=str(scenario_path), sources=sources,
                            sets=sets, record=record, progress=progress, parent=parent, tape=tape,
                            checkpoint=checkpoint, environ=environ)


def build_world(scenario: Scenario, cfg, tape, seed: int, progress=None, where: str = "", plugins=None,
                recorder=None) -> World:
    """The world, with allocation failures said as such (the estimate passed, the machine disagreed)."""
    try:
        return World(scenario, cfg, tape, seed, recorder=recorder, progress=progress, plugins=plugins)
    except MemoryError:
        est = resources.gib(sum(resources.estimate(scenario, cfg).values()))
        raise InputError(f"{where or scenario.name}: golems: out of memory while building the world (estimated "
                         f"{est}); expected fewer Golems or a smaller grimoire.capacity") from None


def execute_prepared(scenario: Scenario, cfg, run_seed: int, out_dir: str | Path, *, scenario_path: str = "",
                     sources: dict | None = None, sets: list[str] | None = None, record: bool = True, progress=None,
                     parent: dict | None = None, changes: list[str] | None = None, tape=None,
                     checkpoint: bool = True, tape_info: dict | None = None, plugins=None, environ=None) -> RunResult:
    """Run an already validated scenario + config (replays come in here with the recorded tape;
    `tape_info` then says where that tape came from, for the manifest)."""
    world, manifest, run_dir = open_run(scenario, cfg, run_seed, out_dir, scenario_path=scenario_path, sources=sources,
                                        sets=sets, record=record, progress=progress, parent=parent, changes=changes,
                                        tape=tape, checkpoint=checkpoint, tape_info=tape_info, plugins=plugins,
                                        environ=environ)
    return drive(world, manifest, run_dir, record, scenario.duration_s)


def open_run(scenario: Scenario, cfg, run_seed: int, out_dir: str | Path | None, *, scenario_path: str = "",
             sources: dict | None = None, sets: list[str] | None = None, record: bool = True, progress=None,
             parent: dict | None = None, changes: list[str] | None = None, tape=None, checkpoint: bool = True,
             tape_info: dict | None = None, plugins=None, recorder=None, environ=None) -> tuple[World, dict, Path]:
    """Everything before the first event: plug-ins loaded (sim.plugins; `plugins` already
    resolved, e.g. a replay's), the world and its starting manifest, and the run directory.
    Everything that can be refused is refused, and the world is built, before the directory is
    touched; then the directory is claimed (`world.hold`: its lock and disk reserve, let go when
    the run ends). `recorder` (with record=False) keeps the tables somewhere else than a run
    directory (the Python API's in-memory runs): nothing is written."""
    from sim import plugins as pluginm
    from sim.tape_market import tape_meta
    if plugins is None:
        plugins = pluginm.resolve(scenario, scenario_path or None)
    run_dir = Path(out_dir) if out_dir is not None else None
    if record:
        rundir.check_target(run_dir)
    resources.check(scenario, cfg, scenario_path or scenario.name, record=record, environ=environ)
    if record or recorder is not None:
        recorder_warm_up()
    if tape is None:
        tape = build_tape(scenario, run_seed, cfg, scenario_path)
    world = build_world(scenario, cfg, tape, run_seed, progress, scenario_path, plugins=plugins,
                        recorder=None if record else recorder)
    world.hold = None
    manifest = {
        "format": 1, "status": "running", "scenario_path": str(scenario_path), "scenario": scenario.model_dump(mode="json"),
        "seed": run_seed, "config": cfg.flat(), "config_sources": sources or {}, "sets": list(sets or []),
        "versions": versions(), "parent": parent, "tape": tape_info or tape_meta(tape, scenario),
        "plugins": plugins.manifest(),
    }
    if changes is not None:
        manifest["changes"] = list(changes)
    if record:
        fresh, hold = not run_dir.exists(), None   # check_target: absent or empty, and left so if setup fails
        try:
            hold = world.hold = Hold(rundir.claim(run_dir), None)
            hold.reserve = rundir.Reserve(run_dir)
            configure_logging(run_dir)
            world.rec = Recorder(run_dir)
            world.tables.tape_events()
            if checkpoint:
                world.checkpoint_dir, world.checkpointer = run_dir / "checkpoint", maybe_save
            rundir.write_manifest(run_dir, manifest)
        except OSError as exc:
            if hold is not None:
                hold.release()
            world.hold = None
            _undo_setup(run_dir, fresh)
            raise InputError(f"{run_dir}: cannot write the run directory: {exc.strerror or exc}; nothing was kept "
                             "(the same --out can be used again)") from None
        structlog.get_logger().info("run_start", scenario=scenario.name, seed=run_seed, golems=world.pop.n)
    elif recorder is not None:
        world.tables.tape_events()
    return world, manifest, run_dir


def _undo_setup(run_dir: Path, fresh: bool) -> None:
    """A setup that failed (a full disk: table folders made, the manifest not) leaves the directory
    as check_target found it, absent or empty, so the same --out is accepted once there is room."""
    structlog.reset_defaults()   # let go of the log file
    for p in list(run_dir.iterdir()) if run_dir.is_dir() and not run_dir.is_symlink() else []:
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
    if fresh:
        try:
            run_dir.rmdir()
        except OSError:
            pass


@dataclass
class Hold:
    """What a recording run holds in its directory while it runs: the claim (lock) and the disk
    reserve; both are let go when the run ends, however it ends."""

    claim: object
    reserve: object

    def release(self) -> None:
        if self.reserve is not None:
            self.reserve.release()
        if self.claim is not None:
            self.claim.release()


class RunFailed(Exception):
    """A run raised after it started. Its manifest says `failed` with the error; `resumable` when
    the machine was the cause (a full or read-only disk, memory), not the engine."""

    def __init__(self, run_dir: Path, at_s: float, cause: BaseException, recorded: bool):
        self.run_dir, self.at_s, self.cause, self.recorded = Path(run_dir), at_s, cause, recorded
        self.resumable = isinstance(cause, (OSError, MemoryError))
        super().__init__(self.describe())

    def describe(self) -> str:
        c, where = self.cause, f"{self.run_dir}: run failed at t={self.at_s / 3600:,.2f} h"
        said = ("manifest.json says failed" if self.recorded else
                "manifest.json could not be updated (it still says running)")
        if rundir.is_disk_full(c):
            return (f"{where}: the disk is full ({c.strerror}); the tables written so far are readable and {said}; "
                    f"free some space, then: golem-sim resume {self.run_dir}")
        if isinstance(c, OSError):
            name = f" {c.filename}" if c.filename else ""
            return (f"{where}: cannot write{name}: {c.strerror or c}; the tables written so far are readable and "
                    f"{said}; once it is writable: golem-sim resume {self.run_dir}")
        if isinstance(c, MemoryError):
            return (f"{where}: out of memory; the tables written so far are readable and {said}; with more memory "
                    f"free: golem-sim resume {self.run_dir}")
        return (f"{where}: {type(c).__name__}: {clip(escape(str(c)), 160)}; {said}, log.jsonl holds the traceback "
                "(an engine error, not bad input: please report it)")


def failure_record(exc: BaseException, at_s: float) -> dict:
    """manifest["failure"]: what raised, where in simulated time, and whether resume may continue."""
    return {"type": type(exc).__name__, "error": one_line(f"{type(exc).__name__}: {exc}"), "at_s": at_s,
            "resumable": isinstance(exc, (OSError, MemoryError)),
            "errno": getattr(exc, "errno", None) if isinstance(exc, OSError) else None}


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


@contextmanager
def signals_deferred():
    """While a stopped run records how it stopped, further Ctrl-C / SIGTERM wait (main thread)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    got: list[int] = []
    old = {s: signal.signal(s, lambda signum, _f: got.append(signum)) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def _record_stop(world: World, manifest: dict, run_dir: Path, exc: BaseException, hold) -> bool:
    """Flush what can be flushed and write the manifest of a stopped run; True once it is written.

    A full disk first releases the run's reserve, so the manifest can still be written."""
    log = structlog.get_logger()
    interrupted = isinstance(exc, RunInterrupted) or not isinstance(exc, Exception)
    flush_error = None
    try:
        world.flush()
    except BaseException as e2:   # noqa: BLE001 - the first error is the one to report
        flush_error = e2
    if hold is not None and hold.reserve is not None and (rundir.is_disk_full(exc) or
                                                          rundir.is_disk_full(flush_error)):
        hold.reserve.release()
    sig = getattr(exc, "signum", None)
    if interrupted:
        manifest.update(status="interrupted", stopped_at_s=world.env.now, error=one_line(repr(exc)),
                        signal=signal.Signals(sig).name if sig else None)
    else:
        from golem.plugins import PluginError
        text = str(exc) if isinstance(exc, PluginError) else f"{type(exc).__name__}: {exc}"
        manifest.update(status="failed", stopped_at_s=world.env.now, error=one_line(text),
                        failure=failure_record(exc, world.env.now), signal=None)
    if flush_error is not None:
        manifest["flush_error"] = one_line(f"{type(flush_error).__name__}: {flush_error}")
    try:
        tables, files = rundir.hashes(run_dir)
        manifest.update(row_counts=row_counts(run_dir), hashes=tables, files=files)
    except Exception as e3:   # noqa: BLE001 - a manifest without counts still says how the run ended
        manifest["hash_error"] = one_line(f"{type(e3).__name__}: {e3}")
    try:
        rundir.write_manifest(run_dir, manifest)
        written = True
    except OSError:
        written = False
    try:
        log.error("run_interrupted" if interrupted else "run_failed", at_s=world.env.now, error=repr(exc),
                  traceback=None if interrupted else traceback.format_exception(exc))
    except Exception:   # noqa: BLE001 - the log is on the same full disk
        pass
    return written


def drive(world: World, manifest: dict, run_dir: Path, record: bool, until_s: float, resume=None,
          end_s: float | None = None, stop=None, hold: Hold | None = None) -> RunResult | None:
    """Run the world to `until_s` and keep the manifest honest: complete; interrupted (flushed,
    with where it stopped; RunInterrupted / KeyboardInterrupt re-raised); or failed (the error
    recorded; a plug-in's error raised as PluginFailed, bad input; anything else as RunFailed).
    A completed run drops its checkpoint: nothing is left to resume. With `end_s` beyond
    `until_s`, or when `stop()` ends the drive early (World.run), the run stays open (status
    running, the directory still held) and None is returned: the Python API drives a run in steps."""
    from golem.plugins import PluginError
    from sim.plugins import PluginFailed
    log = structlog.get_logger()
    end_s = until_s if end_s is None else end_s
    hold = hold if hold is not None else getattr(world, "hold", None)
    t0 = time.perf_counter()
    if getattr(world, "wall_t0", None) is None:
        world.wall_t0 = t0
    gc.freeze()   # the setup's objects live all run: keep the cyclic collector from rescanning them
    ended = True
    try:
        try:
            with stop_on_signals(world) if record else nullcontext():
                reached = world.run(until_s, resume=resume, finish=until_s >= end_s, stop=stop)
        except BaseException as exc:
            # a signal, Ctrl-C or another BaseException (SystemExit ...) stops a run; an Exception fails it
            interrupted = isinstance(exc, RunInterrupted) or not isinstance(exc, Exception)
            written = False
            if record:
                with signals_deferred():
                    written = _record_stop(world, manifest, run_dir, exc, hold)
            elif world.rec is not None and not interrupted:
                world.flush()            # an in-memory run keeps the rows of the ticks before the failure
            if interrupted:
                raise
            if isinstance(exc, PluginError):   # the scenario's plug-in: bad input, exit 2 (sim.plugins)
                manifest.update(status="failed", stopped_at_s=world.env.now, error=str(exc))
                kept = f"; the tables written until then are in {run_dir} (manifest status: failed)" if record else ""
                raise PluginFailed(f"{exc}{kept}") from exc
            raise RunFailed(run_dir, world.env.now, exc, written) from exc
        world.stats.wall_s += time.perf_counter() - t0
        if until_s < end_s or not reached:
            ended = False
            return None
        wall = world.stats.wall_s
        manifest.update(status="complete", wall_s=round(wall, 3), golem_ticks=world.stats.ticks,
                        stats={"events": world.stats.events, "pushes": world.stats.pushes,
                               "deliveries": world.stats.deliveries})
        if record:
            tables, files = rundir.hashes(run_dir)
            manifest.update(row_counts=row_counts(run_dir), hashes=tables, files=files)
            try:
                rundir.write_manifest(run_dir, manifest)
            except OSError as exc:
                if rundir.is_disk_full(exc) and hold is not None and hold.reserve is not None:
                    hold.reserve.release()
                    rundir.write_manifest(run_dir, manifest)
                else:
                    raise RunFailed(run_dir, world.env.now, exc, False) from exc
            if world.checkpoint_dir is not None:
                shutil.rmtree(world.checkpoint_dir, ignore_errors=True)
            log.info("run_complete", wall_s=wall, ticks=world.stats.ticks)
        return RunResult(run_dir, world, manifest, wall)
    finally:
        gc.unfreeze()   # a sweep runs many worlds in one process: let this one's cycles go
        if ended and hold is not None:
            hold.release()
            world.hold = None


__all__ = ["execute", "prepare", "open_run", "drive", "RunResult", "RunFailed", "InputError"]
