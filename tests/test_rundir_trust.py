"""A run directory is data (issue 61, findings 2, 3 and 6): no planted symbolic link makes a
command read or write outside it, no FIFO hangs it, an `--out` replaces only a regular file, every
reader checks the parts against the recorded sha256 whatever the run's status, `resume` takes in
no part the run did not write, and one damaged field of the newest checkpoint falls back to the
older state."""
from __future__ import annotations

import json
import os
import shutil
import signal
import stat
from contextlib import contextmanager
from pathlib import Path

import pytest

from conftest import cli, complete_and_stopped

from sim import checkpoint as ckm
from sim import rundir
from sim.errors import InputError
from sim.recorder import content_hashes, table_files

SCEN = """name: trust
duration: 12h
seed: 3
overrides:
  recording.flush_every_s: 3600
  grimoire.capacity: 128
golems:
  - {count: 3, clade: a, asset: ETH}
  - {count: 2, clade: b, asset: BTC, interval: 450}
"""
SECRET = b"root:$6$not-a-tape:19000:0:99999:7:::\n"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A complete run, and the same run stopped at 8 h with two checkpoints (one per flush)."""
    d = tmp_path_factory.mktemp("trust")
    return d, complete_and_stopped(d, SCEN, 8 * 3600).manifest["hashes"]


class Hung(BaseException):
    """Raised by `deadline`: not an OSError or Exception, so no handler of the code under test takes it."""


@contextmanager
def deadline(seconds: int = 20):
    """Fail instead of hanging (a FIFO opened for reading blocks until a writer comes)."""
    def expire(*_):
        raise Hung(f"still running after {seconds} s")
    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _copy(runs, name, tmp_path) -> Path:
    run = tmp_path / name
    shutil.copytree(runs[0] / name, run, symlinks=True)
    return run


def _one_line(code, out, *expect):
    assert code == 2, out
    lines = out.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out and len(lines[0]) < 500, out
    for e in expect:
        assert e in lines[0], (e, lines[0])
    return lines[0]


def _outside(tmp_path) -> Path:
    f = tmp_path / "outside" / "secret"
    f.parent.mkdir(exist_ok=True)
    f.write_bytes(SECRET)
    return f


def _plant_link(run: Path, rel: str, outside: Path) -> Path:
    """`rel` in the run replaced by a link to `outside` (a folder's link points at a copy of it)."""
    p = run / rel
    if p.is_dir():
        shutil.move(p, outside.parent / p.name)
        target = outside.parent / p.name
    else:
        if p.exists():
            p.unlink()
        target = outside
    p.symlink_to(target)
    return target


def _snapshot(folder: Path) -> dict:
    return {str(p): (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(folder.rglob("*")) if p.is_file()}


# ----------------------------------------------------------------------- symbolic links
LINKS_STOPPED = [".reserve", "manifest.json.tmp", "checkpoint/spare.arrays", "log.jsonl", "report.html", ".lock",
                 "heartbeats", "events/part-00001.parquet", "checkpoint/state-00007.arrays", "manifest.json"]
LINKS_COMPLETE = ["log.jsonl", "report.html", ".lock", ".reserve", "manifest.json.tmp", "heartbeats",
                  "heartbeats/part-00002.parquet", "manifest.json"]


@pytest.mark.parametrize("rel", LINKS_STOPPED)
def test_a_planted_link_is_refused_by_resume_and_report(runs, tmp_path, rel):
    """The issue's links (`.reserve`, `manifest.json.tmp`, `checkpoint/spare.arrays`, `log.jsonl`,
    `report.html`, a table folder ...) in an interrupted run: `resume` and `report` exit 2 in one
    line naming the link, and the file (or folder) outside is left as it was."""
    run = _copy(runs, "stopped", tmp_path)
    if not (run / rel).exists() and rel == "checkpoint/state-00007.arrays":
        rel = sorted(p.relative_to(run).as_posix() for p in (run / "checkpoint").glob("state-*.arrays"))[-1]
    outside = _outside(tmp_path)
    _plant_link(run, rel, outside)
    before = _snapshot(outside.parent)
    for cmd in (["resume", run, "-q"], ["report", run, "-q"]):
        with deadline():
            code, out = cli(*cmd)
        line = _one_line(code, out, str(run / rel))
        assert "symbolic link" in line or "points outside" in line, line
        assert SECRET.decode().strip() not in out
    assert _snapshot(outside.parent) == before


@pytest.mark.parametrize("rel", LINKS_COMPLETE)
def test_a_planted_link_is_refused_by_every_reader_of_a_complete_run(runs, tmp_path, rel):
    run = _copy(runs, "complete", tmp_path)
    outside = _outside(tmp_path)
    _plant_link(run, rel, outside)
    before = _snapshot(outside.parent)
    for cmd in (["report", run, "-q"], ["diff", run, runs[0] / "complete"], ["replay", run, "--verify"]):
        with deadline():
            code, out = cli(*cmd)
        _one_line(code, out, str(run / rel), "symbolic link")
    assert _snapshot(outside.parent) == before


def test_a_link_planted_while_a_run_writes_is_never_written_through(tmp_path):
    """Below the up-front checks: the writers open with O_NOFOLLOW and create their temporaries new
    (a link left under a temporary's name is removed, not followed)."""
    outside = _outside(tmp_path)
    run = tmp_path / "run"
    (run / "checkpoint").mkdir(parents=True)
    for rel in ("manifest.json.tmp", "checkpoint/state-00003.arrays.tmp"):
        (run / rel).symlink_to(outside)
    rundir.write_manifest(run, {"scenario": {}, "config": {}, "seed": 1, "status": "running"})
    assert rundir.read_manifest(run)["seed"] == 1
    index = ckm._write_arrays(run / "checkpoint" / "state-00003.arrays", {"x": list(range(10))})
    assert index == [["x", 0]] and not (run / "checkpoint" / "state-00003.arrays.tmp").is_symlink()
    (run / "checkpoint" / "spare.arrays").symlink_to(outside)      # a spare is a file of ours, or discarded
    ckm._write_arrays(run / "checkpoint" / "state-00004.arrays", {"x": list(range(10))})
    (run / "log.jsonl").symlink_to(outside)
    with pytest.raises(InputError, match="log.jsonl: a symbolic link"):
        rundir.open_file(run / "log.jsonl", "a")
    assert outside.read_bytes() == SECRET


# ------------------------------------------------------------------------------- FIFOs
@pytest.mark.parametrize("rel", ["manifest.json", "log.jsonl", ".lock", ".reserve"])
def test_a_fifo_in_a_run_is_refused_not_waited_on(runs, tmp_path, rel):
    run = _copy(runs, "stopped", tmp_path)
    (run / rel).unlink(missing_ok=True)
    os.mkfifo(run / rel)
    for cmd in (["report", run, "-q"], ["resume", run, "-q"], ["diff", run, runs[0] / "complete"]):
        with deadline():
            code, out = cli(*cmd)
        _one_line(code, out, str(run / rel), "FIFO")
    assert stat.S_ISFIFO(os.lstat(run / rel).st_mode)


def test_open_fd_refuses_special_files_without_blocking(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for flags in (os.O_RDONLY, os.O_WRONLY | os.O_APPEND | os.O_CREAT, os.O_RDWR):
        with deadline(10), pytest.raises(InputError, match=r"fifo: a FIFO \(named pipe\)"):
            rundir.open_fd(fifo, flags)
    with pytest.raises(InputError, match="a character device"):
        rundir.open_fd("/dev/null")
    with pytest.raises(InputError, match="a directory"):
        rundir.open_fd(tmp_path)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "absent")              # dangling: O_CREAT through it would create the target
    with pytest.raises(InputError, match="a symbolic link"):
        rundir.open_fd(link, os.O_WRONLY | os.O_CREAT)
    assert not (tmp_path / "absent").exists()
    f = tmp_path / "f"
    f.write_text("x")
    os.link(f, tmp_path / "g")
    with pytest.raises(InputError, match="2 hard links"):
        rundir.open_fd(f, os.O_WRONLY | os.O_APPEND)     # written in place: another name would change too
    os.close(rundir.open_fd(f))                          # read: fine


def test_open_fd_refuses_a_link_or_fifo_swapped_in_after_its_lstat(tmp_path, monkeypatch):
    """The open itself refuses (O_NOFOLLOW; O_NONBLOCK then fstat) what appears after the lstat."""
    outside = _outside(tmp_path)
    link, fifo = tmp_path / "link", tmp_path / "fifo"
    link.symlink_to(outside)
    os.mkfifo(fifo)

    def swapped(path, *a, **k):
        raise FileNotFoundError(path)       # the lstat saw nothing there: the name was planted after it
    monkeypatch.setattr(rundir.os, "lstat", swapped)
    with pytest.raises(InputError, match="link: a symbolic link"):
        rundir.open_fd(link, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    with deadline(10), pytest.raises(InputError, match="fifo: a FIFO"):
        rundir.open_fd(fifo)
    monkeypatch.undo()
    assert outside.read_bytes() == SECRET


# ------------------------------------------------------------------------------- --out
def test_an_out_file_replaces_only_a_regular_file(tmp_path):
    target = tmp_path / "old.html"
    target.write_text("old")
    rundir.write_out_file(target, b"new")
    assert target.read_text() == "new"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "link"
    link.symlink_to(target)
    folder = tmp_path / "folder"
    folder.mkdir()
    for p, what in ((fifo, "a FIFO"), (link, "a symbolic link"), (folder, "a directory"),
                    (Path("/dev/null"), "a character device")):
        with deadline(10), pytest.raises(InputError, match=what):
            rundir.write_out_file(p, b"x")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and link.is_symlink() and target.read_text() == "new"
    assert stat.S_ISCHR(os.lstat("/dev/null").st_mode)
    try:
        dev = tmp_path / "full"
        os.mknod(dev, 0o600 | stat.S_IFCHR, os.makedev(1, 7))     # /dev/full, where permitted (root)
    except (PermissionError, OSError):
        return
    with pytest.raises(InputError, match="a character device"):
        rundir.write_out_file(dev, b"x")
    assert stat.S_ISCHR(os.lstat(dev).st_mode)


def test_out_options_refuse_special_files(runs, tmp_path):
    d, _ = runs
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere")
    for out in (fifo, link):
        with deadline():
            code, text = cli("report", d / "complete", "--out", out, "-q")
        _one_line(code, text, str(out))
        with deadline():
            code, text = cli("schema", "--out", out)
        _one_line(code, text, str(out))
        with deadline():
            code, text = cli("diff", d / "complete", d / "complete", "--out", out)
        assert code == 2 and str(out) in text.strip().splitlines()[-1], text
        with deadline():
            code, text = cli("run", d / "s.yaml", "--out", out, "-q")
        _one_line(code, text, str(out))
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and link.is_symlink() and not (tmp_path / "elsewhere").exists()


def test_import_tape_out_leaves_a_fifo_a_fifo(tmp_path):
    """The issue: `import-tape --out FIFO` made the FIFO a tape (as root, `--out /dev/full` replaced
    the device)."""
    csv = tmp_path / "bars.csv"
    csv.write_text("timestamp,open,high,low,close,volume\n" + "".join(
        f"{1_700_000_000 + 3600 * i},100,101,99,100.5,10\n" for i in range(48)))
    fifo = tmp_path / "tape.parquet"
    os.mkfifo(fifo)
    with deadline():
        code, out = cli("import-tape", csv, "--time-unit", "s", "--out", fifo)
    _one_line(code, out, str(fifo), "a FIFO")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    code, out = cli("import-tape", csv, "--time-unit", "s", "--out", "/dev/null")
    _one_line(code, out, "/dev/null", "a character device")
    assert stat.S_ISCHR(os.lstat("/dev/null").st_mode)
    code, out = cli("import-tape", csv, "--time-unit", "s", "--out", tmp_path / "ok.parquet")
    assert code == 0 and (tmp_path / "ok.parquet").stat().st_size > 0, out


def test_a_tape_linked_elsewhere_is_not_quoted(tmp_path):
    """A tape that is a link (to /etc/shadow, say): the error names the path and quotes nothing."""
    from sim.tapes import TapeError, import_tape
    secret = _outside(tmp_path)
    tape = tmp_path / "tape.csv"
    tape.symlink_to(secret)
    with pytest.raises(TapeError) as err:
        import_tape([tape])
    msg = str(err.value)
    assert str(tape) in msg and "not-a-tape" not in msg and "root:" not in msg, msg
    plain = tmp_path / "plain.csv"
    plain.write_bytes(SECRET)
    with pytest.raises(TapeError) as err:
        import_tape([plain])
    assert "root:" in str(err.value) and len(str(err.value)) < 500   # a regular file named directly: an excerpt


# ------------------------------------------------------------- sha256 whatever the status
def _flip(f: Path) -> None:
    data = bytearray(f.read_bytes())
    for i in range(len(data) // 3, len(data) // 3 + 16):
        data[i] ^= 0xFF
    f.write_bytes(bytes(data))


def _reseal(run: Path, **changes) -> None:
    m = json.loads((run / "manifest.json").read_text())
    m.pop("sha256")
    for k, v in changes.items():
        if v is None:
            m.pop(k, None)
        else:
            m[k] = v
    rundir.write_manifest(run, m)


@pytest.mark.parametrize("status", ["interrupted", "failed", "killed"])
@pytest.mark.parametrize("damage", ["flipped", "deleted"])
def test_parts_are_checked_whatever_the_status(runs, tmp_path, status, damage):
    """The issue: interrupted or failed runs were never checked (a flipped byte changed 24 values,
    a deleted part dropped rows, exit 0). A killed run's manifest lists no parts: its newest
    checkpoint does."""
    run = _copy(runs, "stopped", tmp_path)
    if status == "failed":
        _reseal(run, status="failed", failure={"type": "OSError", "resumable": True})
    elif status == "killed":
        _reseal(run, status="running", files=None, hashes=None, row_counts=None, stopped_at_s=None)
    # the manifest's list covers the last part, written after the newest checkpoint; a killed run's
    # checkpoint covers the parts before it
    f = table_files(run, "heartbeats")[2 if status == "killed" else -1]
    _flip(f) if damage == "flipped" else f.unlink()
    expect = "differs from the sha256" if damage == "flipped" else "part file missing"
    for cmd in (["report", run, "-q"], ["diff", run, runs[0] / "complete"], ["diff", runs[0] / "complete", run]):
        code, out = cli(*cmd)
        _one_line(code, out, str(f), expect)


def test_a_killed_runs_parts_after_its_checkpoint_are_read(runs, tmp_path):
    """Parts written after a killed run's last checkpoint have no record to check: they are read."""
    run = _copy(runs, "stopped", tmp_path)
    _reseal(run, status="running", files=None, hashes=None, row_counts=None, stopped_at_s=None)
    code, out = cli("report", run, "--out", tmp_path / "r.html", "-q")
    assert code == 0, out
    assert (tmp_path / "r.html").stat().st_size > 0


def test_a_stray_part_is_refused_by_readers_and_set_aside_by_resume(runs, tmp_path):
    """A stray events/part-*.parquet was folded in by `resume` (906 rows instead of 724) and then
    recorded as complete: readers name it; resume sets it aside, says so, and ends byte-identical."""
    d, hashes = runs
    run = _copy(runs, "stopped", tmp_path)
    stray = run / "events" / "part-00099.parquet"
    shutil.copy(table_files(run, "events")[0], stray)
    code, out = cli("report", run, "-q")
    _one_line(code, out, str(stray), "does not list")
    code, out = cli("resume", run, "-q")
    assert code == 0 and f"warning: {stray}: a part file neither" in " ".join(out.split()), out
    m = json.loads((run / "manifest.json").read_text())
    assert m["status"] == "complete" and m["ignored_parts"] == [
        f"{stray}: a part file neither manifest.json nor the checkpoint lists; ignored (kept as "
        "part-00099.parquet.ignored)"]
    assert content_hashes(run) == hashes
    assert (run / "events" / "part-00099.parquet.ignored").exists() and not stray.exists()


def test_a_stray_part_before_the_checkpoint_is_set_aside(runs, tmp_path):
    _, hashes = runs
    run = _copy(runs, "stopped", tmp_path)
    ck = sorted((run / "checkpoint").glob("state-*.json"))[-1]
    part = json.loads(ck.read_text())["part"]
    have = {f.name for f in table_files(run, "snapshots")}
    free = next(i for i in range(part) if f"part-{i:05d}.parquet" not in have)
    stray = run / "snapshots" / f"part-{free:05d}.parquet"
    shutil.copy(table_files(run, "heartbeats")[0], stray)
    code, out = cli("resume", run, "-q")
    assert code == 0, out
    assert content_hashes(run) == hashes
    assert json.loads((run / "manifest.json").read_text())["ignored_parts"][0].startswith(f"{stray}:")


def test_a_manifest_without_its_sha256_is_refused(runs, tmp_path):
    run = _copy(runs, "stopped", tmp_path)
    m = json.loads((run / "manifest.json").read_text())
    m.pop("sha256")
    (run / "manifest.json").write_text(json.dumps(m))
    for cmd in (["report", run, "-q"], ["resume", run, "-q"], ["diff", run, runs[0] / "complete"]):
        code, out = cli(*cmd)
        _one_line(code, out, str(run / "manifest.json"), "sha256: required key is missing")


# ------------------------------------------------------------ checkpoint fallback
def _edit(meta: dict, path: str, value) -> None:
    *up, last = path.split(".")
    for k in up:
        meta = meta[k]
    if value is _DROP:
        del meta[last]
    else:
        meta[last] = value


_DROP = object()
DAMAGED_FIELDS = {
    "format 8": ("format", 8),
    "now_s retyped": ("now_s", "8h"),
    "pending dropped": ("pending", _DROP),
    "stats retyped": ("stats", []),
    "tape bar_ms retyped": ("tape.bar_ms", "1h"),
    "parts emptied": ("parts", {}),
    "arrays_sha256 changed": ("arrays_sha256", "0" * 64),
    "stats key renamed": ("stats.ticks", _DROP),
    "pending role": ("pending", [{"role": "nobody", "time": 1.0, "priority": 0}]),
    "tape assets retyped": ("tape.assets", [1]),
    "grimoire value retyped": ("grimoire", {"next_id": 7}),
    "array offsets retyped": ("array_offsets", [["x", "0"]]),
}


@pytest.mark.parametrize("resealed", [False, True], ids=["checksum stale", "checksum recomputed"])
@pytest.mark.parametrize("field", list(DAMAGED_FIELDS))
def test_one_damaged_field_of_the_newest_checkpoint_falls_back(runs, tmp_path, field, resealed):
    """The issue's `"format": 8` blocked the fallback; any one damaged field now makes the newest
    state corrupt (or of another format) and the resume continues from the older one, ending
    byte-identical. With the checksum recomputed, the field checks catch what it no longer does."""
    _, hashes = runs
    run = _copy(runs, "stopped", tmp_path)
    older, newest = sorted((run / "checkpoint").glob("state-*.json"))
    meta = json.loads(newest.read_text())
    path, value = DAMAGED_FIELDS[field]
    _edit(meta, path, value)
    if resealed:
        meta.pop("sha256")
        ckm._write_meta(newest, meta)
    else:
        newest.write_text(json.dumps(meta))
    code, out = cli("resume", run, "-q")
    assert code == 0, out
    m = json.loads((run / "manifest.json").read_text())
    assert m["checkpoint"] == older.name and m["checkpoint_rejected"][0].startswith(newest.name), m
    assert content_hashes(run) == hashes


@pytest.mark.parametrize("rel, kind", [("manifest.json", "FIFO"), ("heartbeats/part-00002.parquet", "symbolic link")])
def test_the_analysis_layer_reads_a_run_as_data(runs, tmp_path, rel, kind):
    """A notebook's reader (sim.analysis) names a planted FIFO or link instead of waiting on or following it."""
    from sim import analysis as A
    run = _copy(runs, "complete", tmp_path)
    outside = _outside(tmp_path)
    (run / rel).unlink()
    if kind == "FIFO":
        os.mkfifo(run / rel)
    else:
        (run / rel).symlink_to(outside)
    readers = [lambda: A.scan_table(run, "heartbeats").collect(), lambda: A.mood_congruence(run).collect()]
    for read in readers + ([lambda: A.manifest(run)] if rel == "manifest.json" else []):
        with deadline(), pytest.raises(InputError, match=kind):
            read()
    assert outside.read_bytes() == SECRET


@pytest.mark.parametrize("seed", [-1, 2**64, "7", 1.5])
def test_a_resealed_manifest_with_an_impossible_seed_is_bad_input(runs, tmp_path, seed):
    """The fuzzer's find: a manifest whose seed was edited (and its checksum recomputed) is named by replay,
    report and resume in one line, exit 2, never an internal error."""
    run = _copy(runs, "complete", tmp_path)
    _reseal(run, seed=seed)
    for cmd in (["replay", run, "--verify"], ["report", run, "-q"], ["resume", run, "-q"]):
        code, out = cli(*cmd)
        _one_line(code, out, "seed")
