"""First contact: what a new user meets from the README and `--help`, through a real
`golem-sim` process each time (python -m sim.cli, the console script's module)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import tomllib
from pathlib import Path

from conftest import flat, golem_process as golem

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
TINY = """name: tiny
duration: 2h
golems:
  - {count: 2, asset: ETH}
"""


# ------------------------------------------------------------------------------------ --help, --version
def test_version():
    r = golem("--version")
    assert r.returncode == 0, r.stderr
    from importlib import metadata
    assert r.stdout.startswith(f"golem-sim {metadata.version('golem-sim')} ")


def _help(*args) -> str:
    """--help in-process (the same typer app and renderer as the console script; faster)."""
    from typer.testing import CliRunner

    from sim.cli import app
    r = CliRunner().invoke(app, [*args, "--help"], terminal_width=200)
    assert r.exit_code == 0, r.output
    return r.output


def test_flags_show_no_value_type_and_quiet_is_documented():
    r = golem("run", "--help")                        # the real console path once
    assert r.returncode == 0 and "<bool>" not in r.stdout and "--no-record" in r.stdout
    assert "<bool>" not in golem("--help").stdout     # --version, --help
    for cmd in ("run", "validate", "replay", "resume", "report", "sweep"):
        text = _help(cmd)
        assert "<bool>" not in text, cmd              # flags take no value: do not label them <bool>
        quiet = next(line for line in text.splitlines() if " -q " in line)
        assert "print" in quiet, (cmd, quiet)         # -q says what it silences
    from typer.testing import CliRunner

    from sim.cli import app
    assert CliRunner().invoke(app, ["run", "--quiet", "yes", "x.yaml"]).exit_code == 2   # a flag takes no value
    r = golem("run", "--quiet", "yes", "x.yaml")      # ... and indeed a flag rejects a value
    assert r.returncode == 2


def test_validate_documents_set_and_takes_config(tmp_path):
    h = flat(golem("validate", "--help").stdout)
    assert "--set" in h and "key=value" in h and "--config" in h
    s = tmp_path / "s.yaml"
    s.write_text(TINY)
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text("retrieval: {top_k: 4}\n")
    bad.write_text("retrieval: {top_k: nine}\n")
    r = golem("validate", s, "--config", good)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr
    r = golem("validate", s, "--config", bad)
    assert r.returncode == 2 and str(bad) in flat(r.stderr) and "retrieval.top_k" in r.stderr


def test_default_out_suffix_is_documented_and_explained(tmp_path):
    assert "-2, -3" in flat(golem("run", "--help").stdout)
    (tmp_path / "s.yaml").write_text(TINY)
    first = golem("run", "s.yaml", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "run directory: runs/s-seed0" in first.stdout and "already holds" not in first.stdout
    second = golem("run", "s.yaml", cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    assert "run directory: runs/s-seed0-2 (runs/s-seed0 already holds a run)" in flat(second.stdout)
    # the summary names its P/A/D the final state, and its rate an average with start-up
    assert "final P" in second.stdout and "mean P" not in second.stdout
    assert "Golem-ticks/s on average, start-up included" in flat(second.stdout)
    # diff's P/A/D are means over the run, and say so
    d = golem("diff", "runs/s-seed0", "runs/s-seed0-2", cwd=tmp_path)
    assert d.returncode == 0, d.stderr
    assert "P, mean over the run" in d.stdout and "mean_p" not in d.stdout


def test_progress_rate_is_called_instantaneous():
    from rich.progress import Progress

    from sim.cli import _progress_cb
    with Progress(disable=True) as p:
        task = p.add_task("starting", total=10)
        _progress_cb(p, task, 10)(1.0, 100, 2)
        assert "Golem-ticks/s now" in p.tasks[0].description


# ------------------------------------------------------------------------------------ notices
def test_late_events_warn_and_the_readme_example_reaches_the_crash():
    r = golem("validate", "scenarios/flash_crash.yaml", "--set", "duration=1d")
    assert r.returncode == 0
    w = [line for line in r.stderr.splitlines() if line.startswith("warning:")]
    assert len(w) == 1, r.stderr                        # one line for all of them
    assert "market.events.0 (flash_crash at 36h)" in w[0] and "market.regime_schedule.0 (crash at 36h)" in w[0]
    assert "after the run's end at 1 d" in w[0]
    r = golem("validate", "scenarios/flash_crash.yaml", "--set", "duration=2d")
    assert r.returncode == 0 and "warning" not in r.stderr
    # every README command on flash_crash that sets a duration reaches the crash and the recovery
    from sim.scenario import load_scenario, parse_duration
    sc = load_scenario(ROOT / "scenarios" / "flash_crash.yaml")
    last = max([e.at_s + e.duration_s for e in sc.market.events] + [f.at_s for f in sc.market.regime_schedule])
    durations = re.findall(r"flash_crash\.yaml[^\n]*--set duration=(\S+)", README)
    assert durations
    assert all(parse_duration(d) > last for d in durations), durations
    # ... and no README command shortens any scenario past one of its scheduled events
    from sim.notices import late_schedule
    for name, d in re.findall(r"golem-sim (?:run|validate) scenarios/(\w+)\.yaml[^\n]*--set duration=(\S+)", README):
        assert late_schedule(load_scenario(ROOT / "scenarios" / f"{name}.yaml", {"duration": d})) is None, name


def _wait_for(proc, needle: str, limit_s: float) -> str:
    """Read the process's stderr until `needle` appears (or it ends / the limit passes)."""
    import selectors
    sel = selectors.DefaultSelector()
    sel.register(proc.stderr, selectors.EVENT_READ)
    seen, t_end = "", time.monotonic() + limit_s
    while needle not in seen and time.monotonic() < t_end and proc.poll() is None:
        if sel.select(timeout=0.5):
            line = proc.stderr.readline()
            seen += line
    return seen


def test_first_run_says_it_compiles_and_a_cached_run_does_not(tmp_path):
    from sim.notices import COMPILE_NOTICE
    (tmp_path / "s.yaml").write_text(TINY)
    # an empty numba cache: the notice comes as soon as the first kernel compiles (then stop the run)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cold"), COLUMNS="300", PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "sim.cli", "run", "s.yaml", "--no-record"], cwd=tmp_path,
                            env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        seen = _wait_for(proc, COMPILE_NOTICE, 120)
    finally:
        proc.kill()
        proc.wait()
    assert f"note: {COMPILE_NOTICE}" in seen
    # the default cache, warmed by a first run: a second run compiles nothing and says nothing
    golem("run", "s.yaml", "--no-record", cwd=tmp_path)
    r = golem("run", "s.yaml", "--no-record", cwd=tmp_path)
    assert r.returncode == 0 and "compiling" not in r.stderr, r.stderr


def test_a_generated_markets_run_does_not_load_polars(tmp_path):
    """Start-up: a run on a generated market does not import polars (0.3 s of every start), which
    only tapes and the analysis need."""
    (tmp_path / "s.yaml").write_text(TINY)
    code = ("import sys; from sim.cli import main; sys.argv = ['golem-sim', 'run', 's.yaml', '--no-record', '-q']\n"
            "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            "print('polars' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=300)
    assert r.returncode == 0 and r.stdout.strip().splitlines()[-1] == "False", (r.stdout, r.stderr)


def test_help_version_and_schema_do_not_load_the_engine(tmp_path):
    """Start-up: --help, --version and schema answer without importing numba or the world (which
    took them from ~0.3 s to ~1.3 s); only the commands that run or read runs load it."""
    code = ("import sys; from sim.cli import main\n"
            "for argv in (['--help'], ['--version'], ['schema'], ['import-tape', '--help']):\n"
            "    sys.argv = ['golem-sim', *argv]\n"
            "    try:\n        main()\n    except SystemExit as e:\n        assert not e.code, (argv, e.code)\n"
            "print(sorted({'numba', 'sim.world', 'sim.run'} & set(sys.modules)))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=300)
    assert r.returncode == 0 and r.stdout.strip().splitlines()[-1] == "[]", (r.stdout[-500:], r.stderr)


def test_a_report_refused_for_its_run_loads_neither_the_engine_nor_matplotlib(tmp_path):
    """`report` of a folder that is no run (a typo) answers in ~0.4 s: before it loads numba, the
    config models or matplotlib (~2 s), and having checked both runs it was given."""
    code = ("import sys; from sim.cli import main\n"
            "for argv in (['report', 'no-such-run'], ['report', sys.argv[1], '--compare', 'no-such-run']):\n"
            "    sys.argv = ['golem-sim', *argv]\n"
            "    try:\n        main()\n    except SystemExit as e:\n        assert e.code == 2, (argv, e.code)\n"
            "print(sorted({'numba', 'matplotlib', 'golem.config', 'sim.report'} & set(sys.modules)))")
    run = tmp_path / "run"
    (run / "heartbeats").mkdir(parents=True)
    r = subprocess.run([sys.executable, "-c", code, str(run)], capture_output=True, text=True, cwd=tmp_path,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=300)
    assert r.returncode == 0 and r.stdout.strip().splitlines()[-1] == "[]", (r.stdout[-500:], r.stderr)
    assert r.stderr.count("not a run directory (no heartbeats table)") == 2, r.stderr


def test_readme_mentions_compilation_and_activation():
    text = flat(README)
    assert "compiles the numba kernels" in text
    # the usage commands run as written after the two set-up commands: activated, or .venv/bin/
    assert "source .venv/bin/activate" in README[:README.index("golem-sim run scenarios/flash_crash.yaml")]


# ------------------------------------------------------------------------------------ README outputs
def _readme_outputs() -> list[str]:
    """Every file or folder a README command writes: its --out values and mkdir -p targets."""
    outs = re.findall(r"--out\s+(\S+)", README) + [d.rstrip("/") + "/" for d in re.findall(r"mkdir -p (\S+)", README)]
    return [o for o in outs if not o.startswith("-")]


def test_readme_commands_write_under_runs_or_ignored_paths():
    outs = _readme_outputs()
    assert outs
    r = subprocess.run(["git", "check-ignore", "--no-index", *outs], cwd=ROOT, capture_output=True, text=True)
    ignored = set(r.stdout.split())
    assert set(outs) <= ignored, sorted(set(outs) - ignored)
    # the real tape the scenarios read lives in an ignored folder, never in a commit
    assert "tapes/x.parquet" in subprocess.run(["git", "check-ignore", "--no-index", "tapes/x.parquet"], cwd=ROOT,
                                               capture_output=True, text=True).stdout


def test_notebook_extra_and_how_to_open_notebooks():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(d.lower().startswith("jupyterlab") for d in extras["notebook"])
    text = flat(README)
    assert "pip install -e '.[notebook]'" in text and "jupyter lab notebooks/" in text
