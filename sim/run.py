"""A run end to end: scenario + config layers -> tape -> world -> run directory (SPEC §13)."""
from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

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
    if scenario.market.tape is not None:
        from sim.tape_market import tape_from_file
        return tape_from_file(scenario, cfg)
    return generate(scenario.market, scenario.duration_s, seed)


def prepare(scenario_path: str | Path, *, seed: int | None = None, sets: list[str] | None = None,
            config_file: str | None = None, environ: dict[str, str] | None = None):
    """Load and validate everything a run needs, before anything is written."""
    cfg_sets, scen_sets = config_layers.split_sets(sets)
    scenario = load_scenario(scenario_path, scen_sets)
    cfg, sources = config_layers.resolve(config_file, scenario.overrides, environ, cfg_sets,
                                         scenario_source=str(scenario_path))
    run_seed = scenario.seed if seed is None else seed
    return scenario, cfg, sources, run_seed


def execute(scenario_path: str | Path, out_dir: str | Path, *, seed: int | None = None, sets: list[str] | None = None,
            config_file: str | None = None, environ: dict[str, str] | None = None, record: bool = True,
            progress=None, parent: dict | None = None) -> RunResult:
    scenario, cfg, sources, run_seed = prepare(scenario_path, seed=seed, sets=sets, config_file=config_file,
                                               environ=environ)
    run_dir = Path(out_dir)
    if record:
        if run_dir.exists() and any(run_dir.iterdir()):
            raise InputError(f"{run_dir}: output directory is not empty (choose another --out)")
        run_dir.mkdir(parents=True, exist_ok=True)
        configure_logging(run_dir)
    log = structlog.get_logger()
    tape = build_tape(scenario, run_seed, cfg)
    rec = Recorder(run_dir) if record else None
    world = World(scenario, cfg, tape, run_seed, recorder=rec, progress=progress)
    manifest = {
        "format": 1, "status": "running", "scenario_path": str(scenario_path), "scenario": scenario.model_dump(mode="json"),
        "seed": run_seed, "config": cfg.flat(), "config_sources": sources, "sets": list(sets or []),
        "versions": versions(), "parent": parent,
    }
    if record:
        world.record_tape_events()
        atomic_write_json(run_dir / "manifest.json", manifest)
        log.info("run_start", scenario=scenario.name, seed=run_seed, golems=world.pop.n)
    t0 = time.perf_counter()
    try:
        world.run(scenario.duration_s)
    except BaseException as exc:
        if record:
            world.flush()
            manifest.update(status="interrupted", stopped_at_s=world.env.now, error=repr(exc))
            manifest.update(row_counts=row_counts(run_dir), hashes=content_hashes(run_dir))
            atomic_write_json(run_dir / "manifest.json", manifest)
            log.error("run_interrupted", at_s=world.env.now, error=repr(exc))
        raise
    wall = time.perf_counter() - t0
    manifest.update(status="complete", wall_s=round(wall, 3), golem_ticks=world.stats.ticks,
                    stats={"events": world.stats.events, "pushes": world.stats.pushes,
                           "deliveries": world.stats.deliveries})
    if record:
        manifest.update(row_counts=row_counts(run_dir), hashes=content_hashes(run_dir))
        atomic_write_json(run_dir / "manifest.json", manifest)
        log.info("run_complete", wall_s=wall, ticks=world.stats.ticks)
    return RunResult(run_dir, world, manifest, wall)


def env_for_run() -> dict[str, str]:
    return dict(os.environ)


__all__ = ["execute", "prepare", "RunResult", "InputError", "Any"]
