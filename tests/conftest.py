"""Shared fixtures: small runs made once per test session."""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import polars as pl
import pytest

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# every retrieval in the tests first checks the Grimoire's scan terms against its columns
# (golem.retrieval.CHECK_SCAN): a write that forgets Grimoire.refresh_scan fails the test it is in
os.environ.setdefault("GOLEM_CHECK_SCAN", "1")
# the suite starts a hundred-odd engine processes (the command line, sweeps, spawn pools): with
# PYTHONDONTWRITEBYTECODE set (some machines set it), each compiled the engine's own modules from
# source, a quarter of a second apiece; here the first one caches their bytecode for the rest
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
sys.dont_write_bytecode = False
# the suite's processes that need an uncompiled kernel at once compile it once (sim.compile_lock;
# a world's process installs it itself, this covers the tests that call the kernels directly)
from sim import compile_lock  # noqa: E402

compile_lock.install()
ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"


def run_scenario(name_or_path, out: Path, seed=None, sets=None, environ=None):
    from sim.run import execute
    path = Path(name_or_path)
    if not path.exists():
        path = SCENARIOS / f"{name_or_path}.yaml"
    return execute(path, out, seed=seed, sets=sets, environ=environ if environ is not None else {})


def table(run_dir: Path, name: str) -> pl.DataFrame:
    return pl.read_parquet(Path(run_dir) / name / "*.parquet")


def shared_dir(tmp_path_factory, name: str, sets=None) -> Path:
    """Where the session's shared run of a scenario (`shared_run`) lives: the session's temporary
    folder, the one all pytest-xdist workers share."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent                      # the folder all workers' temporary folders share
    return root / "-".join(["shared", name, *(x.replace("=", "_") for x in sets or [])])


def make_shared(out: Path, name: str | Path, sets=None) -> Path:
    """Run the scenario (a name or a file) into `out` unless it is there: under a file lock, so
    that whichever process asks first (a worker, or a pool process of one) makes it and the others
    wait and read it."""
    with open(f"{out}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (out / "manifest.json").exists():
            shutil.rmtree(out, ignore_errors=True)
            run_scenario(name, out, sets=sets)
    return out


def shared_run(tmp_path_factory, name: str, sets=None) -> SimpleNamespace:
    """A scenario's run made once for the whole test session, also across pytest-xdist's workers
    (`make_shared`): run_dir and manifest (fixtures that need the live World make their own run)."""
    out = make_shared(shared_dir(tmp_path_factory, name, sets), name, sets)
    return SimpleNamespace(run_dir=out, manifest=json.loads((out / "manifest.json").read_text()))


def shared_text_run(tmp_path_factory, text: str, name: str) -> Path:
    """The session's shared run of a scenario given as YAML text, in a folder called `name` (a
    report labels a run by its folder): made once across the workers, like `shared_run`."""
    out = shared_dir(tmp_path_factory, "text-" + hashlib.sha256(text.encode()).hexdigest()[:12]) / name
    out.parent.mkdir(parents=True, exist_ok=True)
    scenario = out.parent / f"{name}.yaml"
    if not scenario.exists():
        tmp = scenario.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text)
        tmp.replace(scenario)
    return make_shared(out, scenario)


@pytest.fixture(scope="session")
def flash_run(tmp_path_factory):
    return run_scenario("flash_crash", tmp_path_factory.mktemp("flash") / "run")


@pytest.fixture(scope="session")
def exploit_run(tmp_path_factory):
    return shared_run(tmp_path_factory, "exploit")


@pytest.fixture(scope="session")
def rug_run(tmp_path_factory):
    return shared_run(tmp_path_factory, "rug_pull")


@pytest.fixture(scope="session")
def bleed_run(tmp_path_factory):
    return shared_run(tmp_path_factory, "slow_bleed", sets=["duration=10d"])


@pytest.fixture(scope="session")
def panic_run(tmp_path_factory):
    return run_scenario("clade_panic", tmp_path_factory.mktemp("panic") / "run")


def events(run_dir, kind=None) -> pl.DataFrame:
    e = table(run_dir, "events")
    return e if kind is None else e.filter(pl.col("kind") == kind)


def payloads(df: pl.DataFrame) -> list[dict]:
    import json
    return [json.loads(p) for p in df["payload"]]


@pytest.fixture(scope="session")
def bull_run(tmp_path_factory):
    return shared_run(tmp_path_factory, "bull_run")


def _invoke(args, cwd=None, env=None):
    """`golem-sim ARGS` in this process. An exception that escapes the command fails the test (as
    the traceback it would print from a real process): only exits are caught."""
    from typer.testing import CliRunner

    from sim.cli import app
    here = os.getcwd()
    os.chdir(cwd or ROOT)
    try:
        return CliRunner(env=env).invoke(app, [str(a) for a in args], catch_exceptions=False)
    finally:
        os.chdir(here)


def cli(*args):
    """Invoke `golem-sim` in-process: (exit code, stdout and stderr together)."""
    r = _invoke(args, cwd=os.getcwd())
    return r.exit_code, r.output


def golem_here(*args, cwd=None, columns=400) -> SimpleNamespace:
    """`golem-sim ARGS` in this process, read like a finished one: returncode, stdout, stderr (the
    tests of a command's messages, without a process start-up of ~2 s each)."""
    r = _invoke(args, cwd=cwd, env={"COLUMNS": str(columns)})
    return SimpleNamespace(returncode=r.exit_code, stdout=r.stdout, stderr=r.stderr)


def golem_process(*args, cwd=None, env=None, columns=200, timeout=300) -> subprocess.CompletedProcess:
    """`golem-sim ARGS` in a process of its own, running this tree from any working directory: for
    the tests about the process itself (start-up, signals, exit codes of a real process, full disks)."""
    e = {**os.environ, "COLUMNS": str(columns), "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", "sim.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd or ROOT, env=e, timeout=timeout)


def flat(text: str) -> str:
    """The text with its line breaks and runs of spaces as single spaces (messages wrap by terminal width)."""
    return " ".join(text.split())


#: The longest files first (measured, most wall time first): `--dist loadfile` with
#: `--no-loadscope-reorder` (pyproject.toml) hands files to the two workers in collection order, so the
#: short files fill in at the end and the workers finish together. (pytest-xdist's own order, by number
#: of tests, left a 60 s file with two tests for last.)
FIRST = ("test_validity", "test_disks_and_checkpoints", "test_dynamics", "test_dask_cluster", "test_notebooks",
         "test_plugins", "test_resume", "test_examples", "test_affect", "test_sweep", "test_fuzz_inputs",
         "test_config_liveness", "test_first_contact", "test_report", "test_compile_lock", "test_damaged_runs",
         "test_curation")


def pytest_collection_modifyitems(config, items):
    """The longest files first (stable: the order within a file is kept)."""
    rank = {f: i for i, f in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(Path(str(item.fspath)).stem, len(FIRST)))


def complete_and_stopped(d: Path, scenario_text: str, stop_s: float):
    """`scenario_text` run whole in d/complete, and again in d/stopped, stopped (a Ctrl-C) at `stop_s`
    of simulated time with a checkpoint at each flush (two of them); returns the complete run."""
    import json
    from sim import checkpoint as ckm
    from sim.run import execute
    (d / "s.yaml").write_text(scenario_text)
    ref = execute(d / "s.yaml", d / "complete", environ={})

    def stop(now_s, ticks, alive):
        if now_s >= stop_s:
            raise KeyboardInterrupt
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ckm, "BUDGET", float("inf"))
        with pytest.raises(KeyboardInterrupt):
            execute(d / "s.yaml", d / "stopped", environ={}, progress=stop)
    assert len(list((d / "stopped" / "checkpoint").glob("state-*.json"))) == 2
    assert json.loads((d / "stopped" / "manifest.json").read_text())["status"] == "interrupted"
    return ref
