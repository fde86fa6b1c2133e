"""Files, disks and checkpoints, through real `golem-sim` processes on real files.

A full disk (a size-limited tmpfs), a read-only or non-directory `--out`, `report --out` to a
read-only place, two runs racing for one `--out`; corrupt checkpoints (fallback to the previous
good one, or "corrupt", never "no checkpoint"), forged part indices and paths, damaged parts
before a checkpoint; failed runs marked failed; checkpoints on simulated-time progress."""
from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from conftest import cli, golem_process as golem

from sim import checkpoint as ckm
from sim import recorder
from sim.recorder import TABLES, content_hashes, table_files
from sim.run import RunFailed, execute

ROOT = Path(__file__).resolve().parents[1]
SCEN = """name: disk
duration: 1d
seed: 5
overrides:
  recording.flush_every_s: 3600
  grimoire.capacity: 128
golems:
  - {count: 4, clade: a, asset: ETH}
  - {count: 3, clade: b, asset: BTC, interval: 450}
"""


def one_line(r: subprocess.CompletedProcess, code: int, *expect: str) -> str:
    assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    err = r.stderr.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1 and len(err) < 500, err
    for e in expect:
        assert e in err, (e, err)
    return err


def readable(run: Path) -> None:
    """Every part file the directory holds opens and reads whole; no temporaries are left."""
    for t in TABLES:
        for f in table_files(run, t):
            pq.read_table(f)
    assert not list(run.rglob("*.tmp")), list(run.rglob("*.tmp"))


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    d = tmp_path_factory.mktemp("disks")
    (d / "s.yaml").write_text(SCEN)
    res = execute(d / "s.yaml", d / "ref", environ={})
    return d, res.manifest["hashes"]


@pytest.fixture
def tmpfs(tmp_path):
    """A small tmpfs mounted for the test (root only): yields (mount point, remount(options))."""
    mnt = tmp_path / f"tmpfs-{uuid.uuid4().hex[:6]}"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2500k", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip() or 'not root'}): the ENOSPC path is tested "
                    "by injection in test_enospc_injected_then_resume")

    def remount(opts: str) -> None:
        subprocess.run(["mount", "-o", f"remount,{opts}", str(mnt)], check=True)
    yield mnt, remount
    subprocess.run(["umount", "-l", str(mnt)], check=False)


# ------------------------------------------------------------------------------- disks
def test_full_disk_fails_cleanly_then_resumes(ref, tmpfs):
    d, hashes = ref
    mnt, remount = tmpfs
    out = mnt / "run"
    r = golem("run", d / "s.yaml", "--out", out, "-q")
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "failed", m
    assert m["failure"]["errno"] == errno.ENOSPC, (m["failure"], r.stderr)
    one_line(r, 1, "the disk is full", "manifest.json says failed", f"golem-sim resume {out}")
    assert m["status"] == "failed" and m["failure"]["errno"] == errno.ENOSPC and m["failure"]["resumable"]
    assert 0 < m["stopped_at_s"] <= 86400
    readable(out)
    assert not (out / ".lock").exists() and not (out / ".reserve").exists()
    remount("size=64m")                                  # space again
    r = golem("resume", out, "-q")
    assert r.returncode == 0, r.stderr
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "complete" and content_hashes(out) == hashes
    assert m["stops"][0]["status"] == "failed"           # the history says it failed, and where


def test_read_only_out(ref, tmpfs):
    d, _ = ref
    mnt, remount = tmpfs
    (mnt / "existing").mkdir()
    remount("ro")
    one_line(golem("run", d / "s.yaml", "--out", mnt / "new", "-q"), 2, f"--out {mnt / 'new'}: cannot create it")
    for target in (mnt / "existing", mnt / "a" / "b"):
        code, out = cli("run", d / "s.yaml", "--out", target, "-q")
        assert code == 2 and f"--out {target}" in out and len(out.strip().splitlines()) == 1, out
    assert sorted(p.name for p in mnt.iterdir()) == ["existing"]


def test_disk_turns_read_only_mid_run(ref, tmp_path, monkeypatch):
    """EROFS from the 60th write on (a tmpfs cannot be remounted read-only under open files, so
    injected): one line, and since the manifest cannot be written either the message says so;
    once writable, resume completes the run byte for byte."""
    from sim import recorder
    d, hashes = ref
    monkeypatch.setattr(ckm, "BUDGET", float("inf"))
    real, calls = recorder.atomic_write_bytes, []

    def read_only(path, data):
        calls.append(path)
        if len(calls) >= 60:
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real(path, data)
    monkeypatch.setattr(recorder, "atomic_write_bytes", read_only)
    out = tmp_path / "run"
    code, text = cli("run", d / "s.yaml", "--out", out, "-q")
    assert code == 1 and "Traceback" not in text and len(text.strip().splitlines()) == 1, text
    assert "Read-only file system" in text and "manifest.json could not be updated" in text
    assert json.loads((out / "manifest.json").read_text())["status"] == "running"
    monkeypatch.setattr(recorder, "atomic_write_bytes", real)
    readable(out)
    r = golem("resume", out, "-q")
    assert r.returncode == 0, r.stderr
    assert content_hashes(out) == hashes


def test_out_is_a_file(ref, tmp_path):
    d, _ = ref
    f = tmp_path / "afile"
    f.write_text("keep")
    one_line(golem("run", d / "s.yaml", "--out", f, "-q"), 2, f"--out {f}: exists and is not a directory")
    assert f.read_text() == "keep"


def test_report_out_read_only(ref, tmpfs):
    d, _ = ref
    mnt, remount = tmpfs
    remount("ro")
    one_line(golem("report", d / "ref", "--out", mnt / "r.html", "-q"), 2, f"--out {mnt / 'r.html'}: cannot write "
                                                                           f"under {mnt}")
    for target, expect in ((mnt / "sub" / "r.html", f"cannot write under {mnt}"), (d, "is a directory")):
        code, out = cli("report", d / "ref", "--out", target, "-q")
        assert code == 2 and expect in out and len(out.strip().splitlines()) == 1, out


def test_two_runs_racing_for_one_out(ref, tmp_path):
    d, hashes = ref
    for attempt in range(1):
        out = tmp_path / f"race{attempt}"
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
        procs = [subprocess.Popen([sys.executable, "-m", "sim.cli", "run", str(d / "s.yaml"), "--out", str(out), "-q"],
                                  cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
                 for _ in range(2)]
        results = [(p.wait(timeout=180), p.communicate()[1]) for p in procs]
        codes = sorted(c for c, _ in results)
        assert codes == [0, 2], results
        loser = next(e for c, e in results if c == 2)
        assert "Traceback" not in loser and len(loser.strip().splitlines()) == 1, loser
        assert "another run is writing" in loser or "not empty" in loser
        assert json.loads((out / "manifest.json").read_text())["status"] == "complete"
        assert content_hashes(out) == hashes


def test_claim_is_exclusive_even_inside_the_race_window(tmp_path, monkeypatch):
    """Both racers passed the emptiness check: the lock file (created exclusively, then flocked)
    still lets only one of them in."""
    from sim import rundir
    from sim.errors import InputError
    monkeypatch.setattr(rundir, "check_target", lambda out, flag="--out": None)
    first = rundir.claim(tmp_path / "o")
    with pytest.raises(InputError, match="another run is writing into this directory"):
        rundir.claim(tmp_path / "o")
    first.release()
    assert not (tmp_path / "o" / ".lock").exists()


def test_enospc_injected_then_resume(ref, tmp_path, monkeypatch):
    """The full-disk path without a file system to fill: the 10th part write fails with ENOSPC."""
    from sim import recorder
    d, hashes = ref
    monkeypatch.setattr(ckm, "BUDGET", float("inf"))
    real, calls = recorder.atomic_write_bytes, []

    def full(path, data):
        calls.append(path)
        if len(calls) == 60:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, data)
    monkeypatch.setattr(recorder, "atomic_write_bytes", full)
    out = tmp_path / "run"
    with pytest.raises(RunFailed) as exc:
        execute(d / "s.yaml", out, environ={})
    assert exc.value.resumable and "the disk is full" in str(exc.value)
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "failed" and m["failure"]["errno"] == errno.ENOSPC
    readable(out)
    monkeypatch.setattr(recorder, "atomic_write_bytes", real)
    r = golem("resume", out, "-q")
    assert r.returncode == 0, r.stderr
    assert content_hashes(out) == hashes


# ------------------------------------------------------------------------ failed runs
FAIL_AT = """
import sys
from golem.heartbeat import Mind
tick = Mind.tick
def failing(self, ix, obs):
    if obs.now_ms >= 10 * 3600 * 1000:
        raise ValueError("injected engine error")
    return tick(self, ix, obs)
Mind.tick = failing
from sim.cli import app
sys.argv = ["golem-sim", *sys.argv[1:]]
app()
"""


def test_engine_error_marks_the_run_failed(ref, tmp_path):
    d, _ = ref
    out = tmp_path / "run"
    r = subprocess.run([sys.executable, "-c", FAIL_AT, "run", str(d / "s.yaml"), "--out", str(out), "-q"],
                       capture_output=True, text=True, cwd=ROOT, env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    err = one_line(r, 1, "run failed at t=10.00 h: ValueError: injected engine error", "log.jsonl holds the traceback")
    assert err.startswith(f"error: {out}: run failed"), err      # a failed run, not an internal error
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "failed" and m["failure"]["type"] == "ValueError" and not m["failure"]["resumable"]
    assert "injected engine error" in m["error"] and m["stopped_at_s"] == 10 * 3600
    log = [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines()]
    assert any(e["event"] == "run_failed" and "Traceback" in "".join(e["traceback"]) for e in log)
    readable(out)
    # resume does not pretend it was interrupted
    one_line(golem("resume", out), 2, "the run failed (ValueError: injected engine error)", "not interrupted")
    # report says so at the top; diff and replay refuse a run that did not complete where they must
    code, text = cli("report", out, "--out", tmp_path / "r.html", "-q")
    assert code == 0, text
    page = (tmp_path / "r.html").read_text()
    assert "This run FAILED at t = 10.00 h: ValueError: injected engine error" in page
    assert page.index("This run FAILED") < page.index("<h2>")
    code, text = cli("replay", out, "--verify")
    assert code == 2 and "status: 'failed'; expected a complete run" in text


def test_double_sigint_records_where_it_stopped(ref, tmp_path):
    import signal
    import time
    d, _ = ref
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "sim.cli", "run", str(d / "s.yaml"), "--out", str(out), "-q"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    t_end = time.time() + 60
    while not len(list((out / "heartbeats").glob("part-*.parquet"))) >= 2 and time.time() < t_end:
        assert proc.poll() is None
        time.sleep(0.01)
    proc.send_signal(signal.SIGINT)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "interrupted" and m["stopped_at_s"] > 0
    readable(out)


# ------------------------------------------------------------------------- checkpoints
@pytest.fixture(scope="module")
def stopped(ref, tmp_path_factory):
    """An interrupted run with a checkpoint at every flush (the last two kept), stopped at 15 h."""
    d, _ = ref
    out = tmp_path_factory.mktemp("stopped") / "run"

    def stop(now_s, ticks, alive):
        if now_s >= 15 * 3600:
            raise KeyboardInterrupt
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(ckm, "BUDGET", float("inf"))
        with pytest.raises(KeyboardInterrupt):
            execute(d / "s.yaml", out, environ={}, progress=stop)
    states = sorted((out / "checkpoint").glob("state-*.json"))
    assert len(states) == 2
    return out


def test_a_stopped_runs_directory_does_not_change_after_the_run_has_returned(ref, tmp_path, monkeypatch):
    """Stopped (Ctrl-C) just after a flush queued its checkpoint's commit, whose prune of the older
    states is slow here: the run's last flush waits for that commit, so once the run has returned
    nothing in its directory changes (a copy or a resume made then sees the states it will keep)."""
    import signal
    import time

    import sim.run as run_module
    from sim.world import RunInterrupted
    d, _ = ref
    saves, real_save, real_prune = [], run_module.maybe_save, ckm._prune

    def save(world, ckdir):
        saves.append(world.env.now)
        if len(saves) == 3:
            world.stop_signal = signal.SIGINT            # the first Ctrl-C: stop between two events
        return real_save(world, ckdir, budget=float("inf"))

    def prune(ckdir, part):
        if len(saves) >= 3:
            time.sleep(0.5)
        real_prune(ckdir, part)
    monkeypatch.setattr(run_module, "maybe_save", save)
    monkeypatch.setattr(ckm, "_prune", prune)
    out = tmp_path / "run"
    with pytest.raises(RunInterrupted):
        execute(d / "s.yaml", out, environ={})
    def listing():
        return {str(f.relative_to(out)): f.stat().st_size for f in sorted(out.rglob("*")) if f.is_file()}
    returned = listing()
    recorder._WRITER.submit(lambda: None).result()      # whatever the writer thread still had queued
    assert listing() == returned
    assert len(sorted((out / "checkpoint").glob("state-*.json"))) == 2


def _copy(stopped, tmp_path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(stopped, run)
    return run


def _states(run):
    return sorted((run / "checkpoint").glob("state-*.json"))


def _reseal(f: Path, meta: dict) -> None:
    """Rewrite a state with a valid checksum (a forgery the other checks must still catch)."""
    ckm._write_meta(f, meta)


def _flip(f: Path) -> None:
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0x01
    f.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["json", "arrays", "arrays_truncated"])
def test_corrupt_newest_checkpoint_falls_back(ref, stopped, tmp_path, damage):
    _, hashes = ref
    run = _copy(stopped, tmp_path)
    newest = _states(run)[-1]
    target = newest if damage == "json" else newest.with_suffix(".arrays")
    if damage == "arrays_truncated":
        target.write_bytes(target.read_bytes()[:100])
    else:
        _flip(target)
    if damage == "json":                 # one through a real process, the others in this one
        r = golem("resume", run, "-q")
        code, text = r.returncode, r.stderr
    else:
        code, text = cli("resume", run, "-q")
    assert code == 0, text
    assert f"{newest.name}: corrupt" in text and "resumed from the previous good one" in text
    m = json.loads((run / "manifest.json").read_text())
    assert m["checkpoint"] == _states(stopped)[0].name and m["checkpoint_rejected"]
    assert content_hashes(run) == hashes


def test_every_checkpoint_corrupt_is_corrupt_not_missing(stopped, tmp_path):
    run = _copy(stopped, tmp_path)
    for s in _states(run):
        _flip(s)
    before = content_hashes(run)
    err = one_line(golem("resume", run), 2, "every checkpoint is corrupt", "checksum mismatch")
    assert "no complete checkpoint" not in err
    assert content_hashes(run) == before                 # nothing deleted


def test_forged_part_index_deletes_nothing(stopped, tmp_path):
    """The issue's `"part": -1` (which deleted every part and said complete): with or without a
    valid checksum the state is refused, and no part file is touched."""
    run = _copy(stopped, tmp_path)
    parts = sorted(p for p in run.rglob("part-*.parquet"))
    for s in _states(run):
        meta = json.loads(s.read_text())
        meta.pop("sha256")
        meta["part"] = -1
        _reseal(s, meta)
    one_line(golem("resume", run), 2, "every checkpoint is corrupt", "do not match the file's number")
    assert sorted(p for p in run.rglob("part-*.parquet")) == parts


def test_a_resealed_time_is_caught(ref, stopped, tmp_path):
    """A state's time edited and its checksum recomputed: states are taken at flushes, so its time
    must be its part's flush time; the edited one is corrupt and the other state resumes."""
    _, hashes = ref
    run = _copy(stopped, tmp_path)
    newest = _states(run)[-1]
    meta = json.loads(newest.read_text())
    meta.pop("sha256")
    meta["now_s"] += 3600
    _reseal(newest, meta)
    code, text = cli("resume", run, "-q")
    assert code == 0 and "is not the time of flush" in text, text
    assert content_hashes(run) == hashes


def test_a_path_in_a_checkpoint_is_never_followed(ref, stopped, tmp_path):
    """`"arrays": "../../../x"` was followed: a state reads only its own arrays file."""
    _, hashes = ref
    run = _copy(stopped, tmp_path)
    outside = tmp_path / "x"
    os.mkfifo(outside)                   # opening it would block the resume: the test would time out
    for s in _states(run):
        meta = json.loads(s.read_text())
        meta.pop("sha256")
        meta["arrays"] = os.path.relpath(outside, s.parent)
        _reseal(s, meta)
    r = golem("resume", run, "-q", timeout=120)
    assert r.returncode == 0, r.stderr
    assert content_hashes(run) == hashes


def test_checkpoint_folder_pointing_outside_is_refused(stopped, tmp_path):
    run = _copy(stopped, tmp_path)
    elsewhere = tmp_path / "elsewhere"
    shutil.move(run / "checkpoint", elsewhere)
    (run / "checkpoint").symlink_to(elsewhere)
    code, text = cli("resume", run)
    assert code == 2 and "points outside the run directory" in text and len(text.strip().splitlines()) == 1, text


def test_damaged_part_before_the_checkpoint_is_named(stopped, tmp_path):
    run = _copy(stopped, tmp_path)
    f = table_files(run, "heartbeats")[3]
    _flip(f)
    before = sorted(p.name for p in (run / "heartbeats").iterdir())
    one_line(golem("resume", run), 2, str(f), "differs from the sha256 in checkpoint")
    assert sorted(p.name for p in (run / "heartbeats").iterdir()) == before


def test_resume_deletes_only_the_parts_it_wrote(ref, stopped, tmp_path):
    _, hashes = ref
    run = _copy(stopped, tmp_path)
    keep = [run / "heartbeats" / "notes.txt", run / "heartbeats" / "part-00003.parquet.bak", run / "mine.parquet"]
    for k in keep:
        k.write_text("mine")
    r = golem("resume", run, "-q")
    assert r.returncode == 0, r.stderr
    assert all(k.read_text() == "mine" for k in keep)
    for k in keep:
        k.unlink()
    assert content_hashes(run) == hashes


def test_resume_refuses_a_run_another_process_holds(stopped, tmp_path):
    run = _copy(stopped, tmp_path)
    fd = os.open(run / ".lock", os.O_CREAT | os.O_WRONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        one_line(golem("resume", run), 2, "another process is running or resuming this run")
    finally:
        os.close(fd)


def test_checkpoint_checksum_covers_the_json(stopped):
    s = _states(stopped)[-1]
    meta = json.loads(s.read_text())
    want = meta.pop("sha256")
    assert hashlib.sha256(ckm._canonical(meta)).hexdigest() == want
    meta["now_s"] += 1
    assert hashlib.sha256(ckm._canonical(meta)).hexdigest() != want


# ------------------------------------------------------- checkpoints on simulated time
def test_checkpoints_follow_simulated_time_when_wall_budget_would_not(ref, tmp_path, monkeypatch):
    """With the wall-time rule off (budget 0), saves still come whenever the next flush would
    leave more than 5 % of the duration unsaved: flushes every 30 min, saves every hour, gaps <=
    max(5 % of 24 h, one flush) = 1.2 h."""
    d, _ = ref
    monkeypatch.setattr(ckm, "BUDGET", 0.0)
    monkeypatch.setattr(ckm, "SIM_BUDGET", float("inf"))
    saved, save = [], ckm.save

    def spy(world, ckdir):
        saved.append(world.env.now)
        return save(world, ckdir)
    monkeypatch.setattr(ckm, "save", spy)
    execute(d / "s.yaml", tmp_path / "run", environ={}, sets=["recording.flush_every_s=1800"])
    gaps = [b - a for a, b in zip([0.0] + saved, saved + [86400])]
    assert saved and max(gaps) <= 0.05 * 86400 and gaps[1:-1] == [3600.0] * (len(gaps) - 2)


def test_simulated_time_rule_keeps_to_its_wall_budget(ref, tmp_path, monkeypatch):
    """Saves that cost 0.2 s each are taken by the simulated-time rule only while all saves so far
    stay within 10 % of the wall time since the run started (at most one save over it)."""
    import time
    d, _ = ref
    monkeypatch.setattr(ckm, "BUDGET", 0.0)
    spent = []

    def slow(world, ckdir):
        time.sleep(0.2)
        spent.append(0.2)
    monkeypatch.setattr(ckm, "save", slow)
    t0 = time.perf_counter()
    execute(d / "s.yaml", tmp_path / "run", environ={})
    wall = time.perf_counter() - t0
    assert sum(spent) <= ckm.SIM_BUDGET * wall + 0.2 + 1e-9
    assert len(spent) < 24                               # fewer than one per flush


def test_a_checkpoint_writes_its_arrays_while_the_writer_thread_encodes_the_flush(ref, tmp_path, monkeypatch):
    """The save waits for the flush's parts only before its json (the commit point): the first
    flush's parts are held on the writer thread until the first state's arrays are being written,
    which a save that waited for them first would never let happen (each wait would time out)."""
    import threading

    from sim import recorder
    d, hashes = ref
    monkeypatch.setattr(ckm, "BUDGET", float("inf"))
    started, waits = threading.Event(), []
    real_write, real_arrays = recorder._build_and_write, ckm._write_arrays

    def held(path, table, cols):
        waits.append(started.wait(timeout=5))
        return real_write(path, table, cols)

    def arrays(path, a):
        started.set()
        return real_arrays(path, a)
    monkeypatch.setattr(recorder, "_build_and_write", held)
    monkeypatch.setattr(ckm, "_write_arrays", arrays)
    res = execute(d / "s.yaml", tmp_path / "run", environ={})
    assert waits and all(waits), waits
    assert res.manifest["hashes"] == hashes


def test_saves_from_the_fourth_on_write_over_a_spare(ref, tmp_path, monkeypatch):
    """Saving at every flush, the third commit prunes the first state and keeps its arrays file
    as the spare: every save from the fourth on finds one of the state's size to write over, and
    the tables are the same as ever."""
    d, hashes = ref
    monkeypatch.setattr(ckm, "BUDGET", float("inf"))
    spares, real_arrays = [], ckm._write_arrays

    def arrays(path, a):
        spare = path.with_name(ckm.SPARE)
        spares.append(spare.stat().st_size if spare.exists() else None)
        return real_arrays(path, a)
    monkeypatch.setattr(ckm, "_write_arrays", arrays)
    res = execute(d / "s.yaml", tmp_path / "run", environ={})
    assert len(spares) > 4 and spares[:3] == [None] * 3 and all(spares[3:]), spares
    assert res.manifest["hashes"] == hashes


def test_a_checkpoint_whose_parts_fail_leaves_no_state_behind(ref, tmp_path, monkeypatch):
    """A part of the flush failing on the writer thread fails the save after its arrays are
    written: the arrays file is removed, no json is written, and the run fails saying so."""
    from sim import recorder
    d, _ = ref
    monkeypatch.setattr(ckm, "BUDGET", float("inf"))
    arrays_written, real_arrays = [], ckm._write_arrays

    def arrays(path, a):
        arrays_written.append(path.name)
        return real_arrays(path, a)

    def broken(path, table, cols):
        raise OSError(errno.EIO, "Input/output error", str(path))
    monkeypatch.setattr(ckm, "_write_arrays", arrays)
    monkeypatch.setattr(recorder, "_build_and_write", broken)
    out = tmp_path / "run"
    with pytest.raises(RunFailed):
        execute(d / "s.yaml", out, environ={})
    assert len(arrays_written) == 1                     # the first save got as far as its arrays
    assert not list(out.rglob("state-*")), list(out.rglob("state-*"))
    assert json.loads((out / "manifest.json").read_text())["status"] == "failed"


def test_a_checkpoint_commits_on_the_writer_thread_after_its_parts(ref, tmp_path, monkeypatch):
    """The simulation thread writes a state's arrays and goes on; the json (the commit point) is
    written on the writer thread once every part it lists is on disk: with that thread held, the
    first save returns before its json exists, and every json lists only parts already written."""
    import threading

    from sim import recorder
    d, hashes = ref
    monkeypatch.setattr(ckm, "BUDGET", float("inf"))
    gate, done, commits, at_return = threading.Event(), set(), [], []
    real_write, real_save, real_meta = recorder._build_and_write, ckm.save, ckm._write_meta

    def held(path, table, cols):
        gate.wait(timeout=5)
        sha = real_write(path, table, cols)
        done.add(f"{table}/{path.name}")
        return sha

    def save(world, ckdir):
        p = real_save(world, ckdir)
        at_return.append(p.exists())
        gate.set()
        return p

    def meta(path, m):
        commits.append((threading.current_thread().name, set(m["parts"]) <= done, len(m["parts"])))
        return real_meta(path, m)
    monkeypatch.setattr(recorder, "_build_and_write", held)
    monkeypatch.setattr(ckm, "save", save)
    monkeypatch.setattr(ckm, "_write_meta", meta)
    res = execute(d / "s.yaml", tmp_path / "run", environ={})
    assert at_return[0] is False and len(commits) == len(at_return) > 1
    assert all(name.startswith("golem-recorder") and covered and n > 0 for name, covered, n in commits), commits
    assert res.manifest["hashes"] == hashes


def test_a_commit_removes_older_states_but_its_fallback_and_never_a_newer_one(tmp_path):
    names = ["state-00001.json", "state-00001.arrays", "state-00002.arrays.tmp", "state-00003.json",
             "state-00003.arrays", "state-00005.json", "state-00005.arrays", "state-00006.arrays.tmp",
             "state-00004.json.bak", "notes.txt"]
    for n in names:
        (tmp_path / n).write_text("x")
    ckm._prune(tmp_path, 5)
    assert sorted(f.name for f in tmp_path.iterdir()) == sorted(
        ["state-00003.json", "state-00003.arrays", "state-00005.json", "state-00005.arrays",
         "state-00006.arrays.tmp", "state-00004.json.bak", "notes.txt", "spare.arrays"])
    assert (tmp_path / "spare.arrays").read_text() == "x"     # state 1's arrays, kept to be written over
    for n in ["state-00006.json", "state-00006.arrays"]:
        (tmp_path / n).write_text("y")
    ckm._prune(tmp_path, 6)           # a spare is there already: state 3's files all go
    assert sorted(f.name for f in tmp_path.iterdir()) == sorted(
        ["state-00005.json", "state-00005.arrays", "state-00006.json", "state-00006.arrays",
         "state-00006.arrays.tmp", "state-00004.json.bak", "notes.txt", "spare.arrays"])


@pytest.mark.parametrize("spare_bytes", [0, 10, 10**6])
def test_a_save_writes_its_arrays_over_the_spare_and_cuts_it_to_length(tmp_path, spare_bytes):
    arrays = {"a": np.arange(1000, dtype=np.int64), "b": np.linspace(0, 1, 77, dtype=np.float32)}
    if spare_bytes:
        (tmp_path / "spare.arrays").write_bytes(b"\xff" * spare_bytes)
    path = tmp_path / "state-00002.arrays"
    index = ckm._write_arrays(path, arrays)
    size, digest = ckm._seal(path)
    assert not (tmp_path / "spare.arrays").exists() and not list(tmp_path.glob("*.tmp"))
    fresh = tmp_path / "fresh" / "state-00002.arrays"     # the same arrays into a new file
    fresh.parent.mkdir()
    assert ckm._write_arrays(fresh, arrays) == index and ckm._seal(fresh) == (size, digest)
    assert path.read_bytes() == fresh.read_bytes()
    back = ckm._read_arrays(path, index)
    assert all(np.array_equal(back[k], v) and back[k].dtype == v.dtype for k, v in arrays.items())


class _State:
    pass


def test_plain_dicts_survive_the_json_round_trip():
    """Each kind of plain dict, through JSON and back: the same items, types and order; dicts
    that are not plain (numpy keys, arrays) are left out, as before the type-set check."""
    o = _State()
    o.links = {5: (1, 2, 3), 2: (), 9: (4,)}                       # all tuples
    o.phrases = {1: ("gas", "spike"), 7: ("x",)}
    o.mixed = {3: 0.5, "k": ("a", 1, 2.5, True), 4: "s", 6: [1, 2]}  # scalars and sequences
    o.scalars = {1: 1.5, 2: True, "z": "w"}
    o.empty = {}
    o.subclass = {1: np.float64(0.25), 2: (np.float64(1.5), 2)}   # float subclasses: the slow check
    o.np_keys = {np.int64(1): 2}                                  # not plain
    o.arrays = {1: np.zeros(2)}                                   # not plain
    o.level = 3
    state = json.loads(json.dumps(ckm._plain_dicts_and_scalars(o)))
    assert set(state) == {"links", "phrases", "mixed", "scalars", "empty", "subclass", "level"}
    r = _State()
    for k in ("links", "phrases", "mixed", "scalars", "empty", "subclass"):
        setattr(r, k, {"stale": 1})
    ckm._restore_plain(r, state)
    assert r.level == 3
    for k in ("links", "phrases", "scalars", "empty", "subclass"):
        assert list(getattr(r, k).items()) == list(getattr(o, k).items()), k
    assert list(r.mixed.items()) == [(3, 0.5), ("k", ("a", 1, 2.5, True)), (4, "s"), (6, (1, 2))]
    assert [type(v) for v in r.mixed.values()] == [float, tuple, str, tuple]
    assert [type(x) for v in r.links.values() for x in v] == [int] * 4
    assert type(r.scalars[2]) is bool and type(next(iter(r.mixed))) is int


def test_int_keyed_dicts_go_to_the_arrays_file_and_come_back(tmp_path):
    """Dicts of int keys with all-int, all-str or all-tuple values travel as arrays (through the
    arrays file), with the same items, types and order; what arrays cannot hold exactly stays JSON."""
    o = _State()
    o.links = {5: (1, 2, 3), 2: (), 9: (4,)}
    o.recall = {8: ("gas spike", "depeg"), 1: ("é",)}
    o.phrases = {3: "exploit high", 4: ""}
    o.fired = {7: 10**12, 1: -3}
    o.big = {1: 2**70}                       # beyond int64: JSON
    o.nul = {1: "a\x00"}                     # a trailing NUL: JSON
    o.flags = {1: (True, 2)}                 # a bool is not an int here: JSON
    o.str_keys = {"a": 1}                    # not int keys: JSON
    o.empty = {}
    arrays: dict = {}
    state = json.loads(json.dumps(ckm._plain_dicts_and_scalars(o, arrays=arrays, prefix="x:")))
    assert {k for k, v in state.items() if "arrays" in v} == {"links", "recall", "phrases", "fired"}
    assert {v["arrays"] for v in state.values() if "arrays" in v} == {"int-tuples", "str-tuples", "str", "int"}
    index = ckm._write_arrays(tmp_path / "state-00001.arrays", arrays)
    back = ckm._read_arrays(tmp_path / "state-00001.arrays.tmp", index)
    r = _State()
    for k in vars(o):
        setattr(r, k, {"stale": 1})
    ckm._restore_plain(r, state, back, "x:")
    for k in vars(o):
        assert list(getattr(r, k).items()) == list(getattr(o, k).items()), k
        assert [type(x) for x in getattr(r, k)] == [type(x) for x in getattr(o, k)], k
    assert [type(x) for v in r.links.values() for x in v] == [int] * 4 and type(r.phrases[3]) is str


def test_a_saved_grimoires_dicts_load_back_as_they_were(tmp_path, monkeypatch):
    """At every save of a run, the committed state, loaded, gives back the Grimoire's dicts
    (links, phrases, recall_when, reflex firings) item for item (the exploit scenario: its
    flashbulbs carry links, its event entries phrases)."""
    monkeypatch.setattr(ckm, "BUDGET", float("inf"))
    seen, real_save = [], ckm.save

    def spy(world, ckdir):
        gr = world.gr
        want = {k: dict(v) for k, v in vars(gr).items() if isinstance(v, dict) and k != "cols"}
        path = real_save(world, ckdir)
        world.rec.sync()                         # the commit is on disk
        ck = ckm.load(Path(ckdir))
        assert ck.path.name == path.name
        got = _State()
        for k in want:
            setattr(got, k, {})
        ckm._restore_plain(got, {k: v for k, v in ck.meta["grimoire"].items() if k in want}, ck.arrays, "gr:")
        assert {k: list(getattr(got, k).items()) for k in want} == {k: list(v.items()) for k, v in want.items()}
        seen.append({k: len(v) for k, v in want.items()})
        return path
    monkeypatch.setattr(ckm, "save", spy)
    execute(ROOT / "scenarios" / "exploit.yaml", tmp_path / "run", environ={})
    assert seen and seen[-1]["links"] > 0 and seen[-1]["phrases"] > 0, seen
