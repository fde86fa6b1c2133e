"""Sweeps (SPEC §13): scenario x parameter x seed grids, run on a local process pool or on Dask.

A sweep file names scenarios, parameter combinations (a `grid`, a list of `override_sets`, or both,
crossed) and `seeds`. Each combination is a list of `--set` overrides for `sim.run.execute`; each
run gets its own run directory, DIR/runs/<scenario>/<combination>/seed=<n>/, so `sim.analysis` reads
a sweep like any folder of runs. One row per run (status, error, key figures) goes to DIR/summary/,
a Parquet dataset hive-partitioned by scenario and parameter values: `read_summary(DIR)`.

Why this shape:
* A run is a pure function of scenario + config + seed (+ version), so an executor only moves work
  around: the same sweep gives byte-identical tables on the local pool and on any Dask cluster.
  The GOLEM_* environment of the submitting shell is captured once and handed to every run, so a
  remote worker's environment cannot change a result.
* Every combination is validated in the submitting process first: an invalid one becomes failed
  rows (with the one-line error) instead of a crash, and no worker is started for it.
* A run directory whose manifest is complete and says the same scenario, config, seed and sets is
  reused, so an interrupted or extended sweep continues where it stopped.
* Workers run with OPENBLAS_NUM_THREADS=1 and NUMBA_NUM_THREADS=1: one run per core, and no
  spinning BLAS threads fighting numba's for the same cores (DESIGN.md, speed facts).
"""
from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import re
import shutil
import signal
import time
import traceback
from concurrent import futures as cf
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sim.plugins import resolve as resolve_plugins
from sim.errors import show
from sim.scenario import InputError, _line_of, format_validation_error, read_yaml

ROOT = Path(__file__).resolve().parents[1]
WORKER_ENV = {"OPENBLAS_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
DASK_MISSING = "dask.distributed is not installed: pip install golem-sim[distributed]"
ROW_CACHE = "sweep-row.json"      # a run's summary figures, next to its manifest
ERROR_FILE = "sweep-error.txt"    # the full traceback of a run that failed in a worker

#: summary columns (the hive partition columns scenario + parameters come on top)
SUMMARY_SCHEMA = {
    "status": "str", "error": "str", "reused": "bool", "scenario": "str", "scenario_name": "str",
    "combo": "str", "overrides": "list", "sets": "list", "seed": "i64", "run_dir": "str", "wall_s": "f64",
    "golem_ticks": "i64", "golems": "i64", "pnl": "f64", "pnl_pct": "f64", "deaths": "i64", "flashbulbs": "i64",
    "retrievals": "i64", "mean_mood_congruence": "f64", "mean_valence_bias": "f64", "lock_in_share": "f64",
    "heartbeats_hash": "str", "content_hash": "str",
}
FIGURES = ("wall_s", "golem_ticks", "golems", "pnl", "pnl_pct", "deaths", "flashbulbs", "retrievals",
           "mean_mood_congruence", "mean_valence_bias", "lock_in_share", "heartbeats_hash", "content_hash")


# ------------------------------------------------------------------------------------ the file
class _M(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SweepSpec(_M):
    """A sweep file. Runs = scenarios x override_sets x grid x seeds; `sets` apply to every run."""

    name: str | None = None
    description: str = ""
    scenarios: list[str] = Field(min_length=1)
    grid: dict[str, list[Any]] = Field(default_factory=dict)
    override_sets: list[dict[str, Any]] = Field(default_factory=list)
    seeds: list[int] | None = None            # None: each scenario's own seed
    sets: dict[str, Any] = Field(default_factory=dict)

    @field_validator("seeds", mode="before")
    @classmethod
    def _seeds(cls, v):
        if isinstance(v, dict):
            r = v.get("range")
            if set(v) != {"range"} or not isinstance(r, list) or len(r) != 2 or \
                    not all(isinstance(x, int) and not isinstance(x, bool) for x in r):
                raise ValueError("expected a list of seeds or {range: [start, stop]} (integers, stop exclusive)")
            if r[1] <= r[0]:
                raise ValueError(f"range {r} is empty; expected start < stop")
            return list(range(r[0], r[1]))
        return v

    @field_validator("seeds")
    @classmethod
    def _unique(cls, v):
        if v is not None and (not v or len(set(v)) != len(v)):
            raise ValueError("expected a non-empty list of distinct seeds")
        return v

    @field_validator("sets", mode="before")
    @classmethod
    def _sets(cls, v):
        if isinstance(v, list):   # the command line's form: ["key=value", ...]
            from sim.config_layers import parse_value
            if not all(isinstance(s, str) and "=" in s for s in v):
                raise ValueError("expected a mapping of key: value (or a list of 'key=value')")
            return {s.split("=", 1)[0].strip(): parse_value(s.split("=", 1)[1]) for s in v}
        return v

    @field_validator("grid")
    @classmethod
    def _grid(cls, v):
        for k, vals in v.items():
            if not vals:
                raise ValueError(f"{k}: expected a non-empty list of values")
        return v

    @model_validator(mode="after")
    def _disjoint(self):
        varied = {k for o in self.override_sets for k in o}
        both = sorted(varied & set(self.grid))
        if both:
            raise ValueError(f"{both[0]} is both in grid and in override_sets; expected each key in one place")
        fixed = sorted(set(self.sets) & (varied | set(self.grid)))
        if fixed:
            raise ValueError(f"{fixed[0]} is in sets and also varied; expected it in one place")
        return self


def _text(v: Any) -> str:
    """A value as --set text that parses back to the same value (YAML scalars; JSON is YAML)."""
    from sim.config_layers import parse_value
    if isinstance(v, str):
        return v if parse_value(v) == v else json.dumps(v)
    return json.dumps(v, default=str)


_SAFE = re.compile(r"[A-Za-z0-9._+-]+")


def combo_key(params: tuple[tuple[str, Any], ...]) -> str:
    """The combination's folder name: readable (k=v,k=v) when short and plain, else cut + hash."""
    if not params:
        return "base"
    readable = ",".join(f"{k}={_text(v)}" for k, v in params)
    if len(readable) <= 120 and all(_SAFE.fullmatch(k) and _SAFE.fullmatch(_text(v)) for k, v in params):
        return readable
    digest = hashlib.sha256(readable.encode()).hexdigest()[:10]
    return re.sub(r"[^A-Za-z0-9._=,+-]", "_", readable)[:60] + "~" + digest


@dataclass
class Plan:
    """An expanded sweep: one task (a plain, picklable dict) per run, in plan order."""

    source: Path
    out: Path
    spec: SweepSpec
    tasks: list[dict]
    param_keys: list[str]
    environ: dict[str, str]


def _check_key(key: str, where: str) -> None:
    from golem.config import default_table
    from sim.scenario import SCENARIO_KEYS
    head = key.split(".", 1)[0]
    if key in SUMMARY_SCHEMA or key == "seed":
        raise InputError(f"{where}: {key}: a summary column; vary seeds with `seeds:`")
    if head not in default_table() and head not in SCENARIO_KEYS:
        raise InputError(f"{where}: unknown key (expected a config section {sorted(default_table())} "
                         f"or a scenario key {list(SCENARIO_KEYS)})")


def load_sweep(path: str | Path) -> tuple[SweepSpec, Any]:
    """Read and validate a sweep file; errors name the file, the key path and the line."""
    raw, node = read_yaml(path)
    if not isinstance(raw, dict):
        raise InputError(f"{path}: (top level): expected a mapping with scenarios, grid/override_sets, seeds")
    try:
        spec = SweepSpec.model_validate(raw)
    except ValidationError as err:
        raise InputError(format_validation_error(err, str(path), node)) from None

    def where(*loc) -> str:
        line = _line_of(node, loc)
        return f"{path}:{line}" if line else str(path)
    for k in spec.grid:
        _check_key(k, f"{where('grid', k)}: grid.{k}")
    for i, o in enumerate(spec.override_sets):
        for k in o:
            _check_key(k, f"{where('override_sets', i, k)}: override_sets.{i}.{k}")
    for k in spec.sets:
        _check_key(k, f"{where('sets', k)}: sets.{k}")
    return spec, node


def _resolve_scenario(name: str, sweep_file: Path) -> Path | None:
    p = Path(name)
    for cand in ([p] if p.is_absolute() else [sweep_file.parent / p, ROOT / p]):
        if cand.is_file():
            return cand.resolve()
    return None


#: most seeds one --seeds may name (a range beyond it is refused before anything is planned)
MAX_SEEDS = 10_000
#: the seeds a run accepts (sim.run._check_seed)
SEED_MAX = 2**63 - 1


def parse_seeds(text: str) -> list[int]:
    """--seeds: '1,2,3' or 'start:stop' (stop exclusive): distinct seeds from 0 to 2**63 - 1, at
    most MAX_SEEDS of them (a range is checked before it is expanded)."""
    expected = (f"expected distinct integers from 0 to 2**63 - 1, as '1,2,3' or a range 'start:stop' of at most "
                f"{MAX_SEEDS:,} seeds")
    shown = show(text)
    try:
        if ":" in text:
            a, b = (int(x) for x in text.split(":"))
            if b - a > MAX_SEEDS:
                raise InputError(f"--seeds {shown}: a range of {b - a:,} seeds; {expected}")
            seeds = list(range(a, b))
        else:
            seeds = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        seeds = []
    if not seeds or len(set(seeds)) != len(seeds) or len(seeds) > MAX_SEEDS or \
            not all(0 <= x <= SEED_MAX for x in seeds):
        raise InputError(f"--seeds {shown}: {expected}")
    return seeds


def golem_environ(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The GOLEM_* variables that configure runs (sim.config_layers), captured once per sweep."""
    from sim.config_layers import ENV_KEYS, GENERIC_PREFIX
    environ = os.environ if environ is None else environ
    return {k: v for k, v in sorted(environ.items()) if k in ENV_KEYS or k.startswith(GENERIC_PREFIX)}


def plan_sweep(path: str | Path, out_dir: str | Path, *, sets: Iterable[str] = (), seeds: list[int] | None = None,
               environ: dict[str, str] | None = None) -> Plan:
    """Expand a sweep file into tasks: scenarios x override_sets x grid x seeds, in that order.
    `sets` (k=v, the command line's --set) apply to every run after the file's `sets`."""
    from sim.config_layers import parse_value, split_sets
    from sim.scenario import load_scenario
    path = Path(path)
    spec, node = load_sweep(path)
    global_sets = dict(spec.sets)
    for s in sets:
        split_sets([s])                 # unknown key or missing '=' -> one-line error
        k, v = s.split("=", 1)
        global_sets[k.strip()] = parse_value(v)
    varied = set(spec.grid) | {k for o in spec.override_sets for k in o}
    clash = sorted(varied & {s.split("=", 1)[0].strip() for s in sets})
    if clash:
        raise InputError(f"--set {clash[0]}: the sweep varies this key; expected a key it does not vary")
    out = Path(out_dir)
    combos = []
    for oset in spec.override_sets or [{}]:
        for values in itertools.product(*spec.grid.values()):
            combos.append(tuple(oset.items()) + tuple(zip(spec.grid, values)))
    keys = [combo_key(c) for c in combos]
    if len(set(keys)) != len(keys):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise InputError(f"{path}: override_sets/grid: the combination {dup} appears twice; expected distinct ones")
    param_keys = list(dict.fromkeys(k for c in combos for k, _ in c))
    environ = golem_environ(environ)
    tasks, stems = [], {}
    for i, name in enumerate(spec.scenarios):
        line = _line_of(node, ("scenarios", i))
        scen_path = _resolve_scenario(name, path)
        if scen_path is None:
            raise InputError(f"{path}:{line}: scenarios.{i}: {name}: no such scenario file (looked next to the sweep "
                             f"file and in {ROOT})")
        stem = scen_path.stem
        if stem in stems:
            raise InputError(f"{path}:{line}: scenarios.{i}: {name}: a second scenario named {stem!r} "
                             f"(run folders are named by file stem); expected distinct file names")
        stems[stem] = scen_path
        base = load_scenario(scen_path)     # a broken scenario file is bad input, not a failed run
        cost = base.duration_s * sum(g.count for g in base.golems)
        for combo, key in zip(combos, keys):
            overrides = [f"{k}={_text(v)}" for k, v in combo]
            run_sets = [f"{k}={_text(v)}" for k, v in global_sets.items()] + overrides
            for seed in (seeds or spec.seeds or [None]):
                s = base.seed if seed is None else seed
                tasks.append({"scenario": stem, "scenario_path": str(scen_path), "params": list(combo),
                              "combo": key, "overrides": overrides, "sets": run_sets, "seed": s,
                              "run_dir": str(out.resolve() / "runs" / stem / key / f"seed={s}"),   # absolute: for workers
                              "rel": f"runs/{stem}/{key}/seed={s}", "environ": environ, "cost": cost})
    return Plan(path, out, spec, tasks, param_keys, environ)


# ------------------------------------------------------------------------------------ one run
def _norm(obj: Any) -> Any:
    from sim.recorder import _json_default
    return json.loads(json.dumps(obj, sort_keys=True, default=_json_default))


def _combined_hash(hashes: dict) -> str | None:
    return hashlib.sha256(json.dumps(hashes, sort_keys=True).encode()).hexdigest() if hashes else None


def one_line(exc: BaseException) -> str:
    """An exception as one line: InputError text as is, anything else as 'Type: message'."""
    text = str(exc) if isinstance(exc, InputError) else f"{type(exc).__name__}: {exc}"
    text = " ".join(text.split())
    return text if len(text) <= 500 else text[:497] + "..."


def run_figures(run_dir: str | Path, manifest: dict) -> dict:
    """The key figures of a finished run, from its tables (sim.analysis) and manifest."""
    import polars as pl

    from sim import analysis as A
    life = A.life_summaries(run_dir).select(
        pl.len().alias("golems"), (~pl.col("alive")).sum().alias("deaths"),
        pl.col("flashbulbs").sum().alias("flashbulbs")).collect().row(0, named=True)
    money = A.run_pnl(run_dir).collect().row(0, named=True)
    bs = A.bias_summary(run_dir).collect()
    b = bs.row(0, named=True) if bs.height else {}

    def num(x):
        return None if x is None or x != x else float(x)   # NaN -> null
    hashes = manifest.get("hashes") or {}
    return {"wall_s": manifest.get("wall_s"), "golem_ticks": manifest.get("golem_ticks"), "golems": int(life["golems"]),
            "pnl": num(money["pnl"]), "pnl_pct": num(money["pnl_pct"]) if money["capital"] else None,
            "deaths": int(life["deaths"] or 0), "flashbulbs": int(life["flashbulbs"] or 0),
            "retrievals": int(b.get("retrievals") or 0), "mean_mood_congruence": num(b.get("mean_mood_congruence")),
            "mean_valence_bias": num(b.get("mean_valence_bias")), "lock_in_share": num(b.get("lock_in_share")),
            "heartbeats_hash": hashes.get("heartbeats"), "content_hash": _combined_hash(hashes)}


_STOP = None   # a multiprocessing Event in local-pool workers: set on Ctrl-C, so queued tasks do not start


def _init_worker(stop_event) -> None:
    """Local-pool worker: ignore SIGINT while idle (the parent decides; a run installs its own handler,
    which stops the world between two events and marks the manifest interrupted), and keep the
    parent's stop flag."""
    global _STOP
    _STOP = stop_event
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _stop_check(now_s: float, ticks: int, alive: int) -> None:
    """The world's progress hook in a pool worker: once the sweep is stopping, end the run the way
    a signal does (flushed, manifest marked interrupted). Closes the gap a signal leaves while a
    worker is still importing or building its world."""
    if _STOP is not None and _STOP.is_set():
        raise KeyboardInterrupt("sweep stopped")


def run_task(task: dict) -> dict:
    """Execute one run in a worker and return its figures; never raises (a failure is a result)."""
    os.environ.update(WORKER_ENV)
    if _STOP is not None and _STOP.is_set():
        return {"status": "cancelled", "error": "cancelled before it started"}
    run_dir = Path(task["run_dir"])
    t0 = time.perf_counter()
    # a task may be a retry: Dask reruns the tasks of a worker that died, whose half-written
    # directory would otherwise make this attempt fail ("not empty"); a run is always redone whole
    shutil.rmtree(run_dir, ignore_errors=True)
    try:
        from sim.run import execute
        res = execute(task["scenario_path"], run_dir, seed=task["seed"], sets=task["sets"],
                      environ=task["environ"], checkpoint=False, progress=_stop_check)
        fig = run_figures(run_dir, res.manifest)
        (run_dir / ROW_CACHE).write_text(json.dumps(fig, sort_keys=True) + "\n")
        return {"status": "ok", "error": None, **fig}
    except BaseException as exc:   # noqa: BLE001 - one failing run must not take the others down
        stopped = isinstance(exc, KeyboardInterrupt) or type(exc).__name__ == "RunInterrupted"
        if run_dir.is_dir():
            (run_dir / ERROR_FILE).write_text(traceback.format_exc())
        return {"status": "interrupted" if stopped else "failed", "error": one_line(exc),
                "wall_s": round(time.perf_counter() - t0, 3)}


def _plugin_sources(plugins: dict | None) -> list:
    """(scenario key, source sha256) of each plug-in a manifest's `plugins` section lists."""
    return [(r["key"], r.get("sha256")) for r in (plugins or {}).get("loaded", [])]


def _reusable(task: dict, expect: dict) -> dict | None:
    """The run's figures if its directory holds a complete run of exactly this task, else None."""
    run_dir = Path(task["run_dir"])
    try:
        m = json.loads((run_dir / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    if not (m.get("status") == "complete" and m.get("seed") == task["seed"] and list(m.get("sets") or []) == task["sets"]
            and _norm(m.get("scenario")) == expect["scenario"] and _norm(m.get("config")) == expect["config"]
            and _plugin_sources(m.get("plugins")) == expect["plugins"]):   # an edited plug-in is another run
        return None
    try:
        cached = json.loads((run_dir / ROW_CACHE).read_text())
        if cached.get("content_hash") == _combined_hash(m.get("hashes") or {}):
            return cached
    except (OSError, ValueError):
        pass
    return run_figures(run_dir, m)


# ------------------------------------------------------------------------------------ executors
@contextmanager
def worker_env():
    """Set the one-thread variables while workers start (they inherit the environment at spawn;
    numba and OpenBLAS read it at import), and restore the caller's afterwards."""
    old = {k: os.environ.get(k) for k in WORKER_ENV}
    os.environ.update(WORKER_ENV)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextmanager
def children_ignore_sigint():
    """Start workers with SIGINT ignored (the disposition survives exec, and Python then installs no
    KeyboardInterrupt handler): a terminal Ctrl-C reaches the whole process group, but it is the
    sweep that decides how its workers stop, not a traceback in each of them. Main thread only."""
    import threading
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


class LocalPool:
    """A concurrent.futures process pool with 'spawn' workers: a fresh interpreter each, never a
    fork of a parent that may already hold numba or BLAS threads."""

    def __init__(self, max_workers: int | None = None):
        if max_workers is not None and max_workers < 1:
            raise InputError(f"--workers {max_workers}: expected at least 1")
        self.max_workers = max_workers or os.cpu_count() or 1
        self.workers = 0
        self.pool = None

    def describe(self) -> str:
        return f"local process pool ({self.workers or self.max_workers} workers)"

    def start(self, n_tasks: int) -> None:
        import multiprocessing as mp
        ctx = mp.get_context("spawn")
        self.stop = ctx.Event()
        self.workers = max(1, min(self.max_workers, n_tasks))
        self.pool = cf.ProcessPoolExecutor(max_workers=self.workers, mp_context=ctx, initializer=_init_worker,
                                           initargs=(self.stop,))

    def submit(self, task: dict):
        return self.pool.submit(run_task, task)

    def as_completed(self, fs):
        return cf.as_completed(fs)

    def interrupt(self, fs) -> list:
        """Cancel what has not started; running runs see the stop flag at their next progress report
        and end flushed, marked interrupted. Returns the futures still worth waiting for."""
        self.stop.set()
        for f in fs:
            f.cancel()
        return [f for f in fs if not f.cancelled()]

    def drain(self, fs, timeout: float):
        done, _ = cf.wait(fs, timeout=timeout)
        return done

    def kill(self) -> None:
        """A second Ctrl-C: end the workers now (their runs stay marked running, and are redone)."""
        for p in list((getattr(self.pool, "_processes", None) or {}).values()):
            p.kill()

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)


def _import_distributed():
    try:
        import dask.distributed as dd
    except ImportError:
        raise InputError(DASK_MISSING) from None
    return dd


def address_warning(address: str | None) -> str | None:
    """The one warning for a scheduler address that is neither loopback nor TLS: Dask moves pickles,
    so whoever can reach (or impersonate) a plain-TCP scheduler can run code in the sweep client."""
    if not address:
        return None
    import ipaddress
    from urllib.parse import urlsplit
    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    if parts.scheme == "tls":
        return None
    host = (parts.hostname or "").lower()
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"   # names are not resolved here: only 'localhost' counts
    if loopback:
        return None
    return (f"--scheduler {address}: neither loopback nor TLS; Dask moves pickles, so a scheduler or worker "
            "you do not trust (or anyone on the path) can run code in this process: use tls:// with "
            "--tls-ca-file/--tls-cert/--tls-key (docs/sweeps.md)")


class DaskExecutor:
    """A Dask cluster: a LocalCluster of `n_local` one-thread worker processes, or a running one at
    `address` (its workers must share the sweep directory's filesystem, and should be started
    with --nthreads 1 and the WORKER_ENV variables). `tls` = (ca_file, cert, key) for a tls://
    scheduler. `worker_timeout` (s): how long to wait for a first worker, and how long the sweep
    waits without any worker before its remaining runs are failed."""

    def __init__(self, n_local: int | None = None, address: str | None = None,
                 tls: tuple[str | None, str | None, str | None] | None = None, worker_timeout: float = 60.0):
        self.dd = _import_distributed()
        if n_local is not None and n_local < 1:
            raise InputError(f"--dask-local {n_local}: expected at least 1 worker")
        if worker_timeout <= 0:
            raise InputError(f"--worker-timeout {worker_timeout:g}: expected a positive number of seconds")
        self.n_local, self.address, self.worker_timeout = n_local, address, float(worker_timeout)
        self.tls = tls if tls and any(tls) else None
        if self.tls is not None:
            for flag, f in zip(("--tls-ca-file", "--tls-cert", "--tls-key"), self.tls):
                if f is None:
                    raise InputError(f"{flag}: missing; expected all three of --tls-ca-file, --tls-cert and "
                                     "--tls-key for a tls:// scheduler")
                if not Path(f).is_file():
                    raise InputError(f"{flag} {f}: file not found")
            if not (address or "").startswith("tls://"):
                raise InputError(f"--scheduler {address}: TLS certificates given; expected a tls:// address")
        self.cluster = self.client = None

    def describe(self) -> str:
        return f"Dask scheduler {self.address}" if self.address else f"Dask LocalCluster ({self.n_local} workers)"

    def security(self):
        if self.tls is None:
            return None
        from distributed.security import Security
        ca, cert, key = self.tls
        return Security(tls_ca_file=ca, tls_client_cert=cert, tls_client_key=key, require_encryption=True)

    def start(self, n_tasks: int) -> None:
        dd = self.dd
        if self.address:
            try:
                self.client = dd.Client(self.address, timeout="10s", security=self.security())
            except (OSError, TimeoutError, ValueError, TypeError) as exc:
                hint = "" if self.tls or not self.address.startswith("tls://") else \
                    "; a tls:// scheduler needs --tls-ca-file, --tls-cert and --tls-key"
                raise InputError(f"--scheduler {self.address}: cannot connect ({' '.join(str(exc).split())}){hint}") \
                    from None
            try:
                self.client.wait_for_workers(1, timeout=self.worker_timeout)
            except (TimeoutError, OSError) as exc:
                self.client.close()
                self.client = None
                raise InputError(f"--scheduler {self.address}: no worker joined within {self.worker_timeout:g} s; "
                                 f"expected running workers (dask worker {self.address} --nthreads 1), or a longer "
                                 "--worker-timeout") from exc
        else:
            self.cluster = dd.LocalCluster(n_workers=self.n_local, threads_per_worker=1, processes=True,
                                           dashboard_address=None, silence_logs=logging.ERROR)
            self.client = dd.Client(self.cluster)

    def submit(self, task: dict):
        return self.client.submit(run_task, task, pure=False)

    def as_completed(self, fs):
        """Futures as they finish. Dask reruns the tasks of a worker that died on the others; when
        no worker at all is left for `worker_timeout`, the remaining futures are cancelled (their
        result() raises) and yielded, so the sweep records them as failed instead of waiting forever."""
        from distributed import wait
        pending, idle_since = set(fs), None
        while pending:
            try:
                done, pending = wait(list(pending), timeout=2.0, return_when="FIRST_COMPLETED")
            except TimeoutError:   # distributed.wait raises on its timeout: nothing finished yet
                done = set()
            yield from done
            if not pending:
                return
            workers = len(self.client.scheduler_info().get("workers", {}))
            if workers:
                idle_since = None
                continue
            idle_since = idle_since or time.monotonic()
            if time.monotonic() - idle_since >= self.worker_timeout:
                self.client.cancel(list(pending))
                self.lost = f"no Dask worker for {self.worker_timeout:g} s"
                yield from pending
                return

    def interrupt(self, fs) -> list:
        """Dask cannot stop a running task: drop pending ones and let the cluster go (a LocalCluster's
        half-done runs are redone next time). Returns the finished futures, to be collected."""
        self.client.cancel([f for f in fs if not f.done()])
        return [f for f in fs if f.status == "finished"]

    def drain(self, fs, timeout: float):
        return [f for f in fs if f.status == "finished"]

    def kill(self) -> None:
        pass

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
        if self.cluster is not None:
            self.cluster.close()


def check_address(address: str) -> None:
    """--scheduler: a URL whose host and port parse (urlsplit refuses 'tcp://[::1', a port of 99999)."""
    from urllib.parse import urlsplit
    try:
        parts = urlsplit(address if "://" in address else f"tcp://{address}")
        parts.port   # noqa: B018 - parsing the port is the check
    except ValueError as exc:
        raise InputError(f"--scheduler {show(address)}: {exc}; expected tls://HOST:PORT (or tcp://HOST:PORT on "
                         "loopback)") from None
    if not parts.hostname:
        raise InputError(f"--scheduler {show(address)}: no host; expected tls://HOST:PORT (or tcp://HOST:PORT on "
                         "loopback)")


def make_executor(workers: int | None = None, dask_local: int | None = None, scheduler: str | None = None,
                  tls: tuple[str | None, str | None, str | None] | None = None, worker_timeout: float = 60.0):
    """The command line's choice: --scheduler ADDR, --dask-local N, or the local pool (--workers N)."""
    if scheduler:
        check_address(scheduler)
    if dask_local is not None and scheduler:
        raise InputError("--dask-local and --scheduler: expected one of them")
    if tls and any(tls) and not scheduler:
        raise InputError("--tls-ca-file/--tls-cert/--tls-key: expected --scheduler tls://HOST:PORT with them")
    if dask_local is not None or scheduler:
        return DaskExecutor(n_local=dask_local, address=scheduler, tls=tls, worker_timeout=worker_timeout)
    return LocalPool(workers)


# ------------------------------------------------------------------------------------ the sweep
@dataclass
class SweepResult:
    out: Path
    rows: list[dict]            # finished runs (ok, failed, reused), in plan order
    param_keys: list[str]
    planned: int
    wall_s: float = 0.0
    executor: str = ""
    interrupted: bool = False

    @property
    def failed(self) -> int:
        return sum(r["status"] == "failed" for r in self.rows)

    @property
    def ok(self) -> int:
        return sum(r["status"] == "ok" for r in self.rows)

    @property
    def reused(self) -> int:
        return sum(bool(r["reused"]) for r in self.rows)


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C during a sweep: finished runs are kept and summarised; `.result` says what finished."""

    def __init__(self, result: SweepResult):
        super().__init__("sweep interrupted")
        self.result = result


def _row(task: dict, res: dict, reused: bool = False) -> dict:
    row = {k: None for k in SUMMARY_SCHEMA}
    row.update({k: res.get(k) for k in FIGURES})
    row.update(status=res["status"], error=res.get("error"), reused=reused, scenario=task["scenario"],
               scenario_name=task.get("scenario_name"), combo=task["combo"], overrides=task["overrides"],
               sets=task["sets"], seed=task["seed"], run_dir=task["rel"], params=dict(task["params"]))
    return row


def _triage(plan) -> tuple[dict[int, dict], list[int]]:
    """Each planned run: a failed row when its combination is not valid input, the figures of a
    finished run that can be reused, or a place in the list of runs to do. Each (scenario,
    combination) is prepared once."""
    from sim.run import prepare
    rows: dict[int, dict] = {}
    todo: list[int] = []
    expected: dict[tuple, Any] = {}
    for i, t in enumerate(plan.tasks):
        key = (t["scenario_path"], t["combo"])
        if key not in expected:
            try:
                sc, cfg, _, _ = prepare(t["scenario_path"], sets=t["sets"], environ=plan.environ)
                expected[key] = {"scenario": _norm(sc.model_dump(mode="json")), "config": _norm(cfg.flat()),
                                 "name": sc.name, "plugins": _plugin_sources(
                                     resolve_plugins(sc, t["scenario_path"]).manifest())}
            except InputError as exc:
                expected[key] = exc
        exp = expected[key]
        if isinstance(exp, InputError):
            t["scenario_name"] = None
            rows[i] = _row(t, {"status": "failed", "error": one_line(exp)})
            continue
        t["scenario_name"] = exp["name"]
        fig = _reusable(t, exp)
        if fig is not None:
            rows[i] = _row(t, {"status": "ok", **fig}, reused=True)
        else:
            todo.append(i)
    return rows, todo


def _write_sweep_json(out: Path, path: Path, plan, sets: list[str], seeds, result: SweepResult) -> None:
    """sweep.json: the sweep file, its spec and options, and how the runs ended."""
    (out / "sweep.json").write_text(json.dumps({
        "sweep_file": str(path.resolve()), "spec": plan.spec.model_dump(mode="json"), "sets": sets,
        "seeds": seeds, "planned": len(plan.tasks), "finished": len(result.rows), "ok": result.ok,
        "failed": result.failed, "reused": result.reused, "interrupted": result.interrupted,
        "executor": result.executor, "wall_s": result.wall_s}, indent=2, sort_keys=True, default=str) + "\n")


def run_sweep(path: str | Path, out_dir: str | Path | None = None, *, executor=None, sets: Iterable[str] = (),
              seeds: list[int] | None = None, environ: dict[str, str] | None = None,
              on_progress: Callable[[dict], None] | None = None) -> SweepResult:
    """Run a sweep file into `out_dir` (default runs/sweep-<file stem>) and write its summary.

    Finished runs are reused; invalid combinations and failing runs become failed rows. Ctrl-C
    cancels what has not started, stops running runs, writes the summary of what finished and
    raises SweepInterrupted (a KeyboardInterrupt)."""
    t_start = time.perf_counter()
    path = Path(path)
    out = Path(out_dir) if out_dir is not None else Path("runs") / f"sweep-{path.stem}"
    plan = plan_sweep(path, out, sets=sets, seeds=seeds, environ=environ)
    rows, todo = _triage(plan)
    out.mkdir(parents=True, exist_ok=True)
    result = SweepResult(out, [], plan.param_keys, len(plan.tasks))
    state = {"total": len(todo), "done": 0, "ok": 0, "failed": 0, "running": 0,
             "reused": sum(r["reused"] for r in rows.values()), "invalid": len(rows) - sum(r["reused"] for r in rows.values())}

    def tick(workers: int) -> None:
        state["running"] = min(workers, state["total"] - state["done"])
        if on_progress is not None:
            on_progress(dict(state))

    if todo:
        ex = executor if executor is not None else LocalPool()
        todo.sort(key=lambda i: -plan.tasks[i]["cost"])     # longest first: a shorter tail on few cores
        for i in todo:
            shutil.rmtree(plan.tasks[i]["run_dir"], ignore_errors=True)   # an unfinished or failed earlier try
        with worker_env():
            with children_ignore_sigint():
                ex.start(len(todo))
                futs = {ex.submit({k: v for k, v in plan.tasks[i].items() if k != "cost"}): i for i in todo}
            result.executor = ex.describe()
            workers = getattr(ex, "workers", 0) or getattr(ex, "n_local", 0) or len(todo)
            tick(workers)

            def collect(f) -> None:
                i = futs[f]
                try:
                    res = f.result()
                except BaseException as exc:   # noqa: BLE001 - a lost worker is a failed run
                    why = getattr(ex, "lost", None) or one_line(exc)
                    res = {"status": "interrupted" if result.interrupted else "failed", "error": why}
                if res["status"] == "interrupted" and not result.interrupted:   # a signal to the worker alone
                    res = {**res, "status": "failed"}
                if res["status"] in ("ok", "failed"):
                    rows[i] = _row(plan.tasks[i], res)
                    state["done"] += 1
                    state[res["status"]] += 1
                    tick(workers)
            try:
                for f in ex.as_completed(list(futs)):
                    collect(f)
            except KeyboardInterrupt:
                result.interrupted = True
                try:
                    for f in ex.drain(ex.interrupt(list(futs)), timeout=60):
                        if futs[f] not in rows and not f.cancelled():
                            collect(f)
                except KeyboardInterrupt:   # a second Ctrl-C: stop now
                    ex.kill()
            finally:
                ex.close()
    result.rows = [rows[i] for i in sorted(rows)]
    result.wall_s = round(time.perf_counter() - t_start, 3)
    write_summary(out, result.rows, plan.param_keys)
    _write_sweep_json(out, path, plan, list(sets), seeds, result)
    if result.interrupted:
        raise SweepInterrupted(result)
    return result


# ------------------------------------------------------------------------------------ summary
def _param_series(name: str, values: list):
    """A parameter column: typed when every value is one scalar type (bool, int, float, str),
    else the --set text of each value; null where a combination leaves the key at its default."""
    import polars as pl
    vals = [v for v in values if v is not None]
    if vals and all(isinstance(v, bool) for v in vals):
        return pl.Series(name, values, dtype=pl.Boolean)
    if vals and all(isinstance(v, int) and not isinstance(v, bool) for v in vals):
        return pl.Series(name, values, dtype=pl.Int64)
    if vals and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals):
        return pl.Series(name, [None if v is None else float(v) for v in values], dtype=pl.Float64)
    if vals and all(isinstance(v, str) for v in vals):
        return pl.Series(name, values, dtype=pl.String)
    return pl.Series(name, [None if v is None else _text(v) for v in values], dtype=pl.String)


def summary_frame(rows: list[dict], param_keys: list[str]):
    """The summary rows as a polars DataFrame (base columns, then one column per parameter)."""
    import polars as pl
    types = {"str": pl.String, "bool": pl.Boolean, "i64": pl.Int64, "f64": pl.Float64, "list": pl.List(pl.String)}
    schema = {k: types[t] for k, t in SUMMARY_SCHEMA.items()}
    df = pl.DataFrame([{k: r.get(k) for k in SUMMARY_SCHEMA} for r in rows], schema=schema)
    return df.with_columns(*[_param_series(k, [r["params"].get(k) for r in rows]) for k in param_keys])


def write_summary(out: str | Path, rows: list[dict], param_keys: list[str]) -> Path:
    """DIR/summary/scenario=<s>/<param>=<v>/.../*.parquet, replaced as a whole (a temporary folder
    renamed into place, so a reader never sees half a summary)."""
    out = Path(out)
    df = summary_frame(rows, param_keys)
    tmp, dest = out / ".summary.tmp", out / "summary"
    shutil.rmtree(tmp, ignore_errors=True)
    if df.height:
        df.write_parquet(tmp, partition_by=["scenario", *param_keys])
    else:
        tmp.mkdir(parents=True)
        df.write_parquet(tmp / "part.parquet")
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return dest


def read_summary(sweep_dir: str | Path):
    """A sweep's summary as a polars LazyFrame (hive partitions -> scenario and parameter columns),
    with `run_path` = sweep_dir/run_dir, which is also the `run` name sim.analysis gives these runs
    when it scans the sweep folder (their folder names, seed=<n>, repeat)."""
    import polars as pl
    p = Path(sweep_dir)
    base = p.parent if p.name == "summary" else p
    folder = base / "summary"
    if not folder.is_dir():
        raise FileNotFoundError(f"{base}: no summary/ folder (not a sweep directory)")
    return (pl.scan_parquet(folder, hive_partitioning=True)
            .with_columns((pl.lit(str(base) + "/") + pl.col("run_dir")).alias("run_path"))
            .sort("scenario", "combo", "seed"))


def ok_runs(sweep_dir: str | Path, **where) -> list[Path]:
    """Run directories of the sweep's successful runs, optionally filtered by column == value
    (for parameters with dots: ok_runs(d, **{"contrarian.enabled": True}))."""
    import polars as pl
    lf = read_summary(sweep_dir).filter(pl.col("status") == "ok")
    for k, v in where.items():
        lf = lf.filter(pl.col(k) == v)
    return [Path(x) for x in lf.collect()["run_path"]]


# ------------------------------------------------------------------------------------ display
#: the figures the sweep's table compares: (summary column, heading, display scale, format)
COMPARED = (("pnl_pct", "P&L %", 100, "+.2f"), ("mean_valence_bias", "valence bias", 1, "+.4f"),
            ("mean_mood_congruence", "mood congr.", 1, "+.4f"), ("lock_in_share", "lock-in share", 1, ".4f"))


def compare_settings(rows: list[dict], level: float = 0.95) -> list[dict]:
    """Per scenario x parameter combination, in plan order: runs, failed, and for each COMPARED
    figure over the successful runs its mean with a `level` t interval over seeds (`mean`) and the
    paired difference against the scenario's first combination, the baseline, over the seeds both
    ran (`vs_base`; None for the baseline itself). Both are `sim.analysis.paired_difference` dicts
    (a mean's interval is the paired difference against 0)."""
    from sim.analysis import paired_difference
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["scenario"], r["combo"]), []).append(r)
    base: dict[str, dict] = {}
    out = []
    for (scen, combo), rs in groups.items():
        ok = {r["seed"]: r for r in rs if r["status"] == "ok"}
        first = base.setdefault(scen, ok)
        row = {"scenario": scen, "combo": combo, "overrides": rs[0]["overrides"], "runs": len(rs),
               "failed": sum(r["status"] == "failed" for r in rs), "baseline": first is ok, "metrics": {}}
        for col, *_ in COMPARED:
            a = {s: r[col] for s, r in ok.items()}
            row["metrics"][col] = {"mean": paired_difference(a, dict.fromkeys(a, 0.0), level=level),
                                   "vs_base": None if first is ok else paired_difference(
                                       a, {s: r[col] for s, r in first.items()}, level=level)}
        out.append(row)
    return out


def _interval(d: dict | None, scale: float, fmt: str) -> str:
    if d is None or d["n"] == 0:
        return "-"
    text = format(scale * d["mean"], fmt)
    if d["low"] is None:
        return f"{text} (n={d['n']})"
    return f"{text} [{format(scale * d['low'], fmt)}, {format(scale * d['high'], fmt)}]"


def summary_table(result: SweepResult, level: float = 0.95):
    """Per scenario x parameter combination: runs, failed, and per compared figure the mean over
    seeds with its interval, then (Δ) the paired difference against the scenario's baseline
    combination (its first) with its interval: `compare_settings`."""
    from rich.table import Table

    from sim.notices import shown
    t = Table(title=f"sweep {shown(result.out)}",
              caption=f"mean [{level:.0%} t interval over seeds]; Δ = this setting - the baseline (the scenario's "
                      "first), paired by seed, with its interval")
    t.add_column("scenario", no_wrap=True)
    t.add_column("parameters", overflow="fold", min_width=12)
    for col in ("runs", "failed", *(c[1] for c in COMPARED)):
        t.add_column(col, justify="right")
    for row in compare_settings(result.rows, level):
        cells = []
        for col, _, scale, fmt in COMPARED:
            m = row["metrics"][col]
            second = "baseline" if row["baseline"] else "Δ " + _interval(m["vs_base"], scale, fmt)
            cells.append(_interval(m["mean"], scale, fmt) + "\n" + second)
        t.add_row(shown(row["scenario"]), "\n".join(shown(o) for o in row["overrides"]) or "(defaults)",
                  str(row["runs"]), str(row["failed"]), *cells)
    return t


class RichProgress:
    """A rich progress bar on stderr: runs done / failed / running, elapsed and ETA. Callable with
    the state dicts run_sweep reports."""

    def __init__(self, console=None, disable: bool = False):
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                                   TimeRemainingColumn)
        self.progress = Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[counts]}"), TimeElapsedColumn(), TextColumn("ETA"),
                                 TimeRemainingColumn(), console=console, disable=disable, transient=False)
        self.task = None

    def __enter__(self):
        self.progress.__enter__()
        return self

    def __exit__(self, *exc):
        return self.progress.__exit__(*exc)

    def __call__(self, s: dict) -> None:
        counts = f"ok {s['ok']}  failed {s['failed']}  running {s['running']}"
        if s["reused"] or s["invalid"]:
            counts += f"  (reused {s['reused']}, invalid {s['invalid']})"
        if self.task is None:
            self.task = self.progress.add_task("sweep", total=s["total"], counts=counts)
        self.progress.update(self.task, completed=s["done"], counts=counts)


__all__ = ["SweepSpec", "load_sweep", "plan_sweep", "run_sweep", "read_summary", "ok_runs", "write_summary",
           "summary_frame", "summary_table", "compare_settings", "run_task", "run_figures", "LocalPool", "DaskExecutor", "make_executor",
           "SweepResult", "SweepInterrupted", "RichProgress", "parse_seeds", "DASK_MISSING", "WORKER_ENV",
           "address_warning"]
