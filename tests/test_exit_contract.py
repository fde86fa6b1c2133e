"""The command line's contract: the README's one table of exit statuses, held by every command
for the inputs that once ended as "internal error"; run directories are data (the plug-in code a
manifest names runs only when asked); a plug-in cannot end, hang or fool the engine; names from
the input are printed literally."""
from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from conftest import ROOT, cli, flat, golem_here

from sim import cli as cli_module

SCEN = """name: contract
duration: {duration}
seed: 1
golems:
  - {{count: 2, clade: mine, asset: ETH, strategy: {strategy}}}
"""

PLUGIN = '''
import pathlib, sys, time
import numpy as np
pathlib.Path(__file__).with_name("imported.marker").write_text("the file ran")

def steady(view):
    return np.full(view.n, 0.4)

def exits(view):
    sys.exit(0)

def generator_exit(view):
    raise GeneratorExit

class _Bad:
    def __array__(self, dtype=None, copy=None):
        raise RuntimeError("no array here")

def bad_array(view):
    return _Bad()

def sleeps(view):
    time.sleep(3)
    return np.zeros(view.n)

class _Slow:
    def __array__(self, dtype=None, copy=None):
        time.sleep(3)
        return np.zeros(2)

def slow_array(view):
    return _Slow()

def sleeps_and_swallows(view):
    try:
        time.sleep(3)
    except BaseException:
        pass
    return np.zeros(view.n)

def rewrites_cash(view):
    view._mind.pop.cash[:] = 1e12
    return np.zeros(view.n)

def first_tick(view):
    raise ValueError("fails on its first call")
'''


def one_error_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "Traceback" not in text, text
    return lines[0]


@pytest.fixture
def plug(tmp_path):
    """A scenario folder with the plug-in file; `make(fn)` writes a scenario using it."""
    d = tmp_path / "scen"
    d.mkdir()
    (d / "mine.py").write_text(PLUGIN)

    def make(strategy: str, duration: str = "1h", name: str = "s.yaml") -> Path:
        f = d / name
        f.write_text(SCEN.format(strategy=strategy, duration=duration))
        return f
    make.dir = d
    return make


def marker(d: Path) -> Path:
    return d / "imported.marker"


# ------------------------------------------------------------------------------ the table
def test_the_readme_has_one_exit_table_and_the_cli_follows_it():
    """README's table of exit statuses is the one sim.cli.EXIT holds (and docs/api.md points to it)."""
    readme = (ROOT / "README.md").read_text()
    rows = re.findall(r"^\| `(\d+)` \| (.+?) \|", readme, flags=re.M)
    assert [int(c) for c, _ in rows] == [0, 1, 2, 130, 143], rows
    assert readme.count("| exit status |") == 1
    assert cli_module.EXIT == {"ok": 0, "run failed": 1, "bad input": 2}
    table = dict(rows)
    assert "plug-in" in table["1"] and "manifest" in table["1"] and "nothing" in table["2"]
    api = (ROOT / "docs" / "api.md").read_text()
    assert "exit status" in api and "README" in api


# ------------------------------------------------------------------------------ bad input: exit 2, one line
def _process(args: list, env: dict | None = None) -> subprocess.CompletedProcess:
    """A real process, argv as bytes (what a shell passes: not necessarily UTF-8)."""
    e = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200", "OPENBLAS_NUM_THREADS": "1", **(env or {})}
    argv = [sys.executable.encode(), b"-m", b"sim.cli", *[a if isinstance(a, bytes) else os.fsencode(str(a))
                                                          for a in args]]
    return subprocess.run(argv, capture_output=True, env=e, cwd=ROOT, timeout=120)


def test_set_values_that_are_not_utf8_are_bad_input(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(SCEN.format(strategy="hodl", duration="1h"))
    for cmd in (b"validate", b"run"):
        r = _process([cmd, f, b"--set", b"name=caf\xe9 \xff", b"--out", tmp_path / "o"] if cmd == b"run" else
                     [cmd, f, b"--set", b"name=caf\xe9 \xff"])
        text = r.stderr.decode("utf-8")
        line = one_error_line(text)
        assert r.returncode == 2 and "--set name=caf\\udce9 \\udcff: bytes that are not UTF-8" in line, text
    assert not (tmp_path / "o").exists()


def test_an_80_digit_memory_limit_is_a_limit_not_an_internal_error(tmp_path, monkeypatch):
    f = tmp_path / "s.yaml"
    f.write_text(SCEN.format(strategy="hodl", duration="1h"))
    monkeypatch.setenv("GOLEM_MEMORY_LIMIT", "9" * 80)
    code, text = cli("validate", f)
    assert code == 0 and "ok (contract" in text, text
    monkeypatch.setenv("GOLEM_MEMORY_LIMIT", "9" * 80 + "e9")
    code, text = cli("validate", f)
    assert code == 2 and "GOLEM_MEMORY_LIMIT" in one_error_line(text), text


@pytest.mark.parametrize("args, expect", [
    (["--scheduler", "tcp://[::1"], "--scheduler 'tcp://[::1': Invalid IPv6 URL"),
    (["--scheduler", "tcp://localhost:99999"], "--scheduler 'tcp://localhost:99999': Port out of range"),
    (["--seeds", str(2**64)], f"--seeds '{2**64}': expected distinct integers from 0 to 2**63 - 1"),
    (["--seeds", "-1,2"], "expected distinct integers from 0 to 2**63 - 1"),
    (["--seeds", "0:100000000"], "--seeds '0:100000000': a range of 100,000,000 seeds"),
])
def test_sweep_arguments_are_bad_input(tmp_path, args, expect):
    f = tmp_path / "sweep.yaml"
    f.write_text("scenarios: [s.yaml]\nseeds: [1]\n")
    t0 = time.perf_counter()
    code, text = cli("sweep", f, "--out", tmp_path / "out", *args)
    assert code == 2 and expect in flat(text), text
    one_error_line(text)
    assert time.perf_counter() - t0 < 5          # refused before anything is expanded
    assert not (tmp_path / "out").exists()


def test_the_largest_seed_range_is_accepted():
    from sim.sweep import MAX_SEEDS, parse_seeds
    assert len(parse_seeds(f"5:{5 + MAX_SEEDS}")) == MAX_SEEDS
    with pytest.raises(Exception, match="a range of 10,001 seeds"):
        parse_seeds(f"5:{5 + MAX_SEEDS + 1}")


def test_ctrl_c_in_any_command_is_130_in_one_line(tmp_path, monkeypatch):
    import sim.run

    def ctrl_c(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(sim.run, "prepare", ctrl_c)
    f = tmp_path / "s.yaml"
    f.write_text(SCEN.format(strategy="hodl", duration="1h"))
    code, text = cli("validate", f)
    assert code == 130 and one_error_line(text) == "error: interrupted", text


def test_schema_on_a_full_disk_leaves_no_file(tmp_path, monkeypatch):
    import sim.recorder

    def full(_fd):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(sim.recorder.os, "fsync", full)
    code, text = cli("schema", "--out", tmp_path / "s.json")
    assert code == 2 and "No space left on device" in flat(one_error_line(text)), text
    assert list(tmp_path.iterdir()) == []


def _two_runs(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(SCEN.format(strategy="hodl", duration="1h"))
    for name in ("a", "b"):
        code, text = cli("run", f, "--out", tmp_path / name, "-q")
        assert code == 0, text
    return tmp_path / "a", tmp_path / "b"


def test_diff_on_a_full_disk_is_one_line_and_leaves_no_file(tmp_path, monkeypatch):
    a, b = _two_runs(tmp_path)
    import sim.recorder

    def full(_fd):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(sim.recorder.os, "fsync", full)
    out = tmp_path / "cmp" / "d.parquet"
    code, text = cli("diff", a, b, "--out", out)
    line = one_error_line(text[text.index("error:"):])   # after the comparison table it printed
    assert code == 2 and f"--out {out}: cannot write it: No space left on device; nothing was written" in flat(line)
    assert not out.exists() and list(out.parent.iterdir()) == []


def test_import_tape_on_a_full_disk_is_one_line_and_leaves_no_file(tmp_path, monkeypatch):
    t = 1_600_000_000_000 + 3_600_000 * np.arange(30)
    pl.DataFrame({"timestamp": t, "open": 100.0, "high": 101.0, "low": 99.0, "close": 100.5,
                  "volume": 1.0}).write_csv(tmp_path / "bars.csv")
    real = pl.DataFrame.write_parquet

    def full(self, file, *a, **k):   # what polars' writer does on a full disk: some bytes, then its error
        if hasattr(file, "write"):
            file.write(b"PAR1")
            raise pl.exceptions.ComputeError("parquet: File out of specification: underlying IO error: "
                                             "No space left on device (os error 28)")
        return real(self, file, *a, **k)
    monkeypatch.setattr(pl.DataFrame, "write_parquet", full)
    out = tmp_path / "tapes" / "t.parquet"
    code, text = cli("import-tape", tmp_path / "bars.csv", "--time-unit", "ms", "--out", out)
    line = one_error_line(text)
    assert code == 2 and f"--out {out}: cannot write the tape: No space left on device" in flat(line), text
    assert not out.exists() and [p.name for p in out.parent.iterdir()] == []


def test_a_full_disk_during_setup_leaves_an_out_that_a_retry_accepts(tmp_path, monkeypatch):
    """At <= 1 MiB free the setup fails part way (table folders made, the manifest not written):
    it is rolled back, so the same --out works once there is room."""
    from sim import rundir
    f = tmp_path / "s.yaml"
    f.write_text(SCEN.format(strategy="hodl", duration="1h"))
    real = rundir.write_manifest

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(rundir, "write_manifest", full)
    out = tmp_path / "o"
    code, text = cli("run", f, "--out", out, "-q")
    assert code == 2 and "cannot write the run directory: No space left on device" in flat(text), text
    one_error_line(text)
    assert not out.exists()
    out.mkdir()                                    # an empty directory given as --out is left empty too
    code, text = cli("run", f, "--out", out, "-q")
    assert code == 2 and list(out.iterdir()) == []
    monkeypatch.setattr(rundir, "write_manifest", real)
    code, text = cli("run", f, "--out", out, "-q")
    assert code == 0, text
    assert json.loads((out / "manifest.json").read_text())["status"] == "complete"


# ------------------------------------------------------------------------------ plug-ins: exit 1 or 2
def test_a_plug_in_that_cannot_load_fails_before_the_run_leaving_nothing(plug, tmp_path):
    f = plug("mine.py:absent")
    code, text = cli("run", f, "--out", tmp_path / "o", "-q")
    assert code == 2 and "has no 'absent'" in flat(text)
    assert not (tmp_path / "o").exists()


def test_a_plug_in_file_that_exits_while_loading_is_bad_input(plug, tmp_path):
    (plug.dir / "quits.py").write_text("import sys\nsys.exit(0)\ndef fn(view):\n    return view.cash\n")
    code, text = cli("run", plug("quits.py:fn"), "--out", tmp_path / "o", "-q")
    line = one_error_line(text)
    assert code == 2 and "quits.py failed to load: SystemExit: 0" in flat(line), text
    assert not (tmp_path / "o").exists()


def test_a_plug_in_failing_on_its_first_call_is_a_failed_run(plug, tmp_path):
    """Its first call is the first tick, after the directory is claimed: the failure is recorded
    there (manifest failed, the log), exit 1 as for any run that started and failed."""
    code, text = cli("run", plug("mine.py:first_tick"), "--out", tmp_path / "o", "-q")
    line = one_error_line(text)
    assert code == 1 and "strategy 'mine.py:first_tick' raised ValueError: fails on its first call" in flat(line)
    m = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert m["status"] == "failed" and "first_tick" in m["error"]


@pytest.mark.parametrize("fn, expect", [
    ("exits", "raised SystemExit: 0"),
    ("generator_exit", "raised GeneratorExit"),
    ("bad_array", "returned _Bad at t=0 h, which is not an array of numbers (RuntimeError: no array here)"),
    ("rewrites_cash", "raised AttributeError"),
])
def test_a_plug_in_cannot_end_the_process_or_pass_for_the_engine(plug, tmp_path, fn, expect):
    out = tmp_path / "o"
    code, text = cli("run", plug(f"mine.py:{fn}"), "--out", out, "-q")
    line = one_error_line(text)
    assert code == 1, text
    assert f"golems.0.strategy: strategy 'mine.py:{fn}' {expect}" in flat(line), text
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "failed" and fn in m["error"]


def test_sys_exit_in_a_plug_in_is_a_failed_run_in_a_real_process(plug, tmp_path):
    r = _process(["run", plug("mine.py:exits"), "--out", tmp_path / "o", "-q"])
    assert r.returncode == 1, r.stderr
    one_error_line(r.stderr.decode())
    assert json.loads((tmp_path / "o" / "manifest.json").read_text())["status"] == "failed"


def test_the_view_reaches_no_engine_state():
    """Nothing reachable by attribute from a view (its own, and one level into each) is the
    population, the mind, the observation or a writable array."""
    from types import SimpleNamespace

    from golem.plugins import CohortView
    from golem.population import HIST
    pop = SimpleNamespace(cash=np.array([1.0, 2.0]), units=np.zeros(2), tick=np.array([3, 4]), pad=np.zeros((2, 3)),
                          asset=np.zeros(2, np.int16), price_hist=np.ones((2, HIST)), clade=np.zeros(2, np.int16))
    mind = SimpleNamespace(pop=pop, cfg=None, regime_names=["calm"])
    obs = SimpleNamespace(now_ms=0, close=np.array([5.0]), step=0, bars={}, regime=0, probe_sev=np.zeros(2))
    view = CohortView(mind, np.array([0, 1]), obs)
    seen = []
    for name in dir(view):
        if name.startswith("__"):
            continue
        try:
            v = getattr(view, name)
        except Exception:   # noqa: BLE001 - memory attributes in SENSING
            continue
        seen.append(v)
        seen += [getattr(v, a, None) for a in dir(v) if not a.startswith("__")] if not isinstance(v, np.ndarray) else []
    assert not any(x is pop or x is mind or x is obs or x is pop.cash for x in seen)
    arrays = [x for x in seen if isinstance(x, np.ndarray)]
    assert len(arrays) >= 8 and not any(a.flags.writeable for a in arrays)
    assert not any(np.shares_memory(a, pop.cash) for a in arrays)
    with pytest.raises(AttributeError):
        view._mind                                  # noqa: B018
    with pytest.raises(AttributeError, match="read-only"):
        view.cash = np.zeros(2)
    with pytest.raises(ValueError, match="read-only"):
        view.cash[0] = 1e12
    assert pop.cash.tolist() == [1.0, 2.0]
    # the config's tables are dicts, which a frozen model does not freeze: the view's is a copy
    from golem.config import default_config
    cfg = default_config()
    table_key = next(k for k, v in cfg.appraisal.model_dump().items() if isinstance(v, dict))
    engine_table = dict(getattr(cfg.appraisal, table_key))
    view = CohortView(SimpleNamespace(pop=pop, cfg=cfg), np.array([0, 1]), obs)
    getattr(view.config.appraisal, table_key).clear()
    assert getattr(cfg.appraisal, table_key) == engine_table and engine_table


# ------------------------------------------------------------------------------ the per-call time limit
def test_a_plug_in_past_its_time_limit_fails_the_run(plug, tmp_path):
    for fn in ("sleeps", "sleeps_and_swallows", "slow_array"):
        t0 = time.perf_counter()
        code, text = cli("run", plug(f"mine.py:{fn}"), "--out", tmp_path / fn, "-q", "--set",
                         "plugins.call_timeout_s=0.3")
        line = one_error_line(text)
        assert code == 1, text
        assert f"strategy 'mine.py:{fn}' ran longer than its time limit of 0.3 s in one call" in flat(line)
        assert "plugins.call_timeout_s" in line
        assert time.perf_counter() - t0 < 2.9          # stopped, not waited for
        assert json.loads((tmp_path / fn / "manifest.json").read_text())["status"] == "failed"


def test_the_time_limit_costs_microseconds_and_leaves_no_timer():
    import signal

    from sim.plugins import time_limit
    before = signal.getsignal(signal.SIGALRM)
    n = 20_000
    t0 = time.perf_counter()
    for _ in range(n):
        with time_limit(10.0):
            pass
    per_call = (time.perf_counter() - t0) / n
    assert per_call < 200e-6, per_call             # measured 20-35 us: getitimer, two setitimer, two signal()
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0) and signal.getsignal(signal.SIGALRM) is before


# ------------------------------------------------------------------------------ run directories are data
def _plug_run(plug, tmp_path, fn="steady"):
    from sim.run import execute
    f = plug(f"mine.py:{fn}", duration="2h")
    res = execute(f, tmp_path / "run", environ={})
    marker(plug.dir).unlink()
    return res.run_dir, plug.dir / "mine.py"


def test_replay_and_resume_run_no_plug_in_code_unless_asked(plug, tmp_path):
    run_dir, src = _plug_run(plug, tmp_path)
    for args in (["replay", run_dir, "--verify"], ["replay", run_dir], ["replay", run_dir, "--set", "seed=2",
                                                                         "--out", tmp_path / "cf"],
                 ["replay", run_dir, "--plugin", tmp_path / "other.py"]):
        code, text = cli(*args)
        line = one_error_line(text)
        assert code == 2, (args, text)
        assert f"strategy 'mine.py:steady' would execute the file {src}, named by the run directory" in flat(line)
        assert f"--plugin {src}" in line and "--trust-plugins" in line
        assert not marker(plug.dir).exists(), args      # nothing of the plug-in ran
    assert not (tmp_path / "cf").exists()
    for args in (["--plugin", src], ["--trust-plugins"]):
        code, text = cli("replay", run_dir, "--verify", *args)
        assert code == 0 and "ok: 7 tables identical" in text, text
        assert marker(plug.dir).exists()
        marker(plug.dir).unlink()


def test_a_manifest_pointing_at_another_file_is_refused(plug, tmp_path):
    """The manifest edited to name another .py (its plain sha256 recomputed, and the manifest's own
    checksum too): refused for the file the user named; with --trust-plugins the source is named as
    changed (the hash covers path and content); resume refuses to continue with other code."""
    from sim import rundir
    run_dir, src = _plug_run(plug, tmp_path)
    evil = tmp_path / "evil.py"
    evil.write_text(PLUGIN.replace("imported.marker", "evil.marker"))
    m = json.loads((run_dir / "manifest.json").read_text())
    rec = m["plugins"]["loaded"][0]
    assert rec["sha256"] == hashlib.sha256(str(src).encode() + b"\0" + src.read_bytes()).hexdigest()
    rec.update(file=str(evil), import_path=f"{evil}:steady", sha256=hashlib.sha256(evil.read_bytes()).hexdigest())
    m.pop("sha256", None)
    rundir.write_manifest(run_dir, m)
    code, text = cli("replay", run_dir, "--verify", "--plugin", src)
    assert code == 2 and f"would execute the file {evil}" in flat(text), text
    assert not (tmp_path / "evil.marker").exists()
    code, text = cli("replay", run_dir, "--verify", "--trust-plugins")
    assert code == 1 and "source changed since the run" in flat(text), text


def test_resume_runs_the_recorded_code_only_when_asked_and_unchanged(plug, tmp_path):
    from sim.api import Simulation
    f = plug("mine.py:steady", duration="1d")
    sim = Simulation.from_yaml(f, out=tmp_path / "killed", environ={})
    sim.run_for("10h")
    sim.world.rec.sync()                                # as a kill leaves it: parts and a checkpoint
    src = plug.dir / "mine.py"
    marker(plug.dir).unlink()
    code, text = cli("resume", tmp_path / "killed", "-q")           # not asked: refused, nothing ran
    assert code == 2 and f"would execute the file {src}" in flat(one_error_line(text)), text
    assert not marker(plug.dir).exists()
    src.write_text(PLUGIN + "\n# edited after the run\n")
    code, text = cli("resume", tmp_path / "killed", "--plugin", src, "-q")
    assert code == 2 and "source changed since the run" in flat(text) and "expected the code the run ran" in flat(text)


# ------------------------------------------------------------------------------ validate executes nothing
def test_validate_checks_plug_in_names_without_running_them(plug, tmp_path):
    code, text = cli("validate", plug("mine.py:steady"))
    assert code == 0 and "ok (contract" in text, text
    assert not marker(plug.dir).exists()
    # a module plug-in: its package's __init__ is not run either
    pkg = tmp_path / "site" / "mypkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(f"open({str(tmp_path / 'pkg.marker')!r}, 'w').write('ran')\n")
    (pkg / "strat.py").write_text(PLUGIN)
    sys.path.insert(0, str(tmp_path / "site"))
    try:
        for spec, code_want, expect in (("mypkg.strat:steady", 0, "ok"),
                                        ("mypkg.nothing:steady", 2, "cannot import 'mypkg.nothing'"),
                                        ("mypkg.strat:absent", 2, "has no 'absent'")):
            code, text = cli("validate", plug(spec, name=f"{spec.replace(':', '_')}.yaml"))
            assert code == code_want and expect in flat(text), (spec, text)
        assert not (tmp_path / "pkg.marker").exists() and "mypkg" not in sys.modules
    finally:
        sys.path.remove(str(tmp_path / "site"))


@pytest.mark.parametrize("spec, params, expect", [
    ("mine.py:steady", "{level: 1}", "golems.0.strategy_params: strategy 'mine.py:steady': got an unexpected "
                                     "keyword argument 'level'"),
    ("mine.py:_Bad", "{}", None),                           # a class is callable: its signature is not read
    ("fifo.py:fn", "{}", "fifo.py is not a regular file"),
])
def test_validate_reads_what_it_can_without_running(plug, tmp_path, spec, params, expect):
    os.mkfifo(plug.dir / "fifo.py")
    f = plug(f"{spec}, strategy_params: {params}")
    code, text = cli("validate", f)
    if expect is None:
        assert code == 0, text
    else:
        assert code == 2 and expect in flat(text), text
        one_error_line(text)
    assert not marker(plug.dir).exists()


# ------------------------------------------------------------------------------ names printed literally
NAMES = ["[/]", "[link=https://example.invalid]click[/link]", "\x1b[31mred\x1b[0m", "two\nlines"]


@pytest.mark.parametrize("name", NAMES)
def test_names_are_printed_literally(tmp_path, name):
    f = tmp_path / "s.yaml"
    f.write_text(f"name: {json.dumps(name)}\nduration: 1h\ngolems:\n  - {{count: 2, asset: ETH, clade: "
                 f"{json.dumps(name)}}}\n")
    shown = name.replace("\x1b", "\\x1b").replace("\n", "\\n")
    code, text = cli("validate", f)
    assert code == 0 and f"ok ({shown}: 2 Golems" in text, text
    code, text = cli("run", f, "--out", tmp_path / "o")
    assert code == 0, text
    assert "\x1b" not in text and f"{shown} (seed 1)" in text or f"{shown} (seed 0)" in text, text
    assert any(ln.strip("│ ").startswith(shown) for ln in text.splitlines()), text   # the clade's row
    r = golem_here("diff", tmp_path / "o", tmp_path / "o", columns=300)   # wide enough for the whole name
    assert r.returncode == 0 and "\x1b" not in r.stdout, r.stdout
    assert shown in r.stdout, r.stdout
