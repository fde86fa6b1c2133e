"""Damaged run directories: truncated, emptied, foreign-schema or flipped parts, missing
or extra parts, and truncated, list-shaped or retyped manifests. `replay --verify`, `report`,
`diff` and `resume` name the damaged file and exit 2; `report` and `diff` check every part's
recorded sha256 before reading. Every case runs in-process for all four commands, and through a
real `golem-sim` process for `report` (the command the issue caught with exit 0)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import cli

from sim.recorder import table_files
from sim.rundir import write_manifest
from sim.run import execute

ROOT = Path(__file__).resolve().parents[1]
SCEN = """name: damaged
duration: 12h
seed: 4
overrides:
  recording.flush_every_s: 3600
  grimoire.capacity: 128
golems:
  - {count: 3, clade: a, asset: ETH}
  - {count: 2, clade: b, asset: BTC}
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("damaged")
    (d / "s.yaml").write_text(SCEN)
    execute(d / "s.yaml", d / "good", environ={})
    execute(d / "s.yaml", d / "other", seed=5, environ={})
    return d


def _part(run: Path, table: str = "heartbeats", i: int = 1) -> Path:
    return table_files(run, table)[i]


def truncate(run):
    f = _part(run)
    f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    return f


def empty(run):
    f = _part(run)
    f.write_bytes(b"")
    return f


def flip(run):
    f = _part(run)
    data = bytearray(f.read_bytes())
    for i in range(len(data) // 3, len(data) // 3 + 16):
        data[i] ^= 0xFF
    f.write_bytes(bytes(data))
    return f


def foreign(run):
    f = _part(run)
    pq.write_table(pa.table({"x": [1, 2, 3]}), f)
    return f


def missing(run):
    f = _part(run, "entries", 0)
    f.unlink()
    return f


def extra(run):
    f = run / "events" / "part-00099.parquet"
    shutil.copy(_part(run, "events", 0), f)
    return f


def _manifest(run, text):
    (run / "manifest.json").write_text(text)
    return run / "manifest.json"


def manifest_truncated(run):
    text = (run / "manifest.json").read_text()
    return _manifest(run, text[: len(text) // 2])


def manifest_list(run):
    return _manifest(run, json.dumps([1, 2, 3]))


def manifest_retyped(run):
    m = json.loads((run / "manifest.json").read_text())
    m["seed"] = "four"
    return _manifest(run, json.dumps(m))


def manifest_scenario_retyped(run):
    m = json.loads((run / "manifest.json").read_text())
    m["scenario"]["golems"] = [{"count": "many"}]
    return _manifest(run, json.dumps(m))


def _resealed(run, m):
    """The manifest rewritten with a recomputed sha256 (a forgery the other checks must still catch)."""
    m.pop("sha256", None)
    write_manifest(run, m)
    return run / "manifest.json"


def manifest_scenario_retyped_resealed(run):
    """A manifest whose sha256 holds: the recorded scenario is validated all the same."""
    m = json.loads((run / "manifest.json").read_text())
    m["scenario"]["golems"] = [{"count": "many"}]
    return _resealed(run, m)


def manifest_sha256_dropped(run):
    """A manifest without its own sha256 is refused: removing the key does not switch the check off."""
    m = json.loads((run / "manifest.json").read_text())
    m.pop("sha256")
    m["seed"] += 1
    return _manifest(run, json.dumps(m))


def manifest_seed_edited(run):
    m = json.loads((run / "manifest.json").read_text())
    m["seed"] += 1
    return _manifest(run, json.dumps(m))


def manifest_hashes_dropped(run):
    m = json.loads((run / "manifest.json").read_text())
    m.pop("hashes")
    m.pop("files")
    return _resealed(run, m)


def manifest_empty(run):
    return _manifest(run, "")


def manifest_hash_retyped(run):
    m = json.loads((run / "manifest.json").read_text())
    m["files"] = {k: 1 for k in m["files"]}
    return _manifest(run, json.dumps(m))


DAMAGE = {
    "truncated part": (truncate, "not a readable Parquet file"),
    "emptied part": (empty, "empty file"),
    "flipped bytes": (flip, None),       # the footer may survive: the hash or the pages catch it
    "foreign schema": (foreign, "a Parquet file of another schema"),
    "missing part": (missing, "part file missing"),
    "extra part": (extra, None),
    "truncated manifest": (manifest_truncated, "not valid JSON"),
    "list-shaped manifest": (manifest_list, "a JSON list; expected the run's manifest"),
    "retyped seed": (manifest_retyped, "seed: 'four'; expected int"),
    "retyped scenario": (manifest_scenario_retyped, "content differs from its sha256"),
    "retyped scenario, resealed manifest": (manifest_scenario_retyped_resealed, "golems.0.count"),
    "sha256 dropped": (manifest_sha256_dropped, "sha256: required key is missing"),
    "edited seed": (manifest_seed_edited, "content differs from its sha256"),
    "hashes dropped": (manifest_hashes_dropped, "no content hash for market"),
    "emptied manifest": (manifest_empty, "empty file"),
    "retyped hashes": (manifest_hash_retyped, "expected a sha256 hex digest"),
}


def _damaged(runs, tmp_path, kind):
    run = tmp_path / "run"
    shutil.copytree(runs / "good", run)
    damage, expect = DAMAGE[kind]
    return run, damage(run), expect


def _check(code, out, named: Path, expect):
    assert code == 2, out
    assert "Traceback" not in out
    line = out.strip().splitlines()
    assert len(line) == 1 and len(line[0]) < 500, out
    assert str(named) in line[0], (named, line[0])
    if expect:
        assert expect in line[0], (expect, line[0])


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_damage_is_named_by_every_reader(runs, tmp_path, kind):
    run, named, expect = _damaged(runs, tmp_path, kind)
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    cmds = [["report", run, "--out", tmp_path / "r.html", "-q"], ["diff", run, runs / "other"],
            ["diff", runs / "other", run], ["replay", run, "--verify"]]
    if named.name == "manifest.json" and kind != "retyped scenario, resealed manifest":
        cmds.append(["resume", run])   # the run is complete: resume reads no further than its manifest
    for cmd in cmds:
        code, out = cli(*cmd)
        if kind in ("flipped bytes", "extra part") and cmd[0] == "replay":
            # verify reports a readable change as a difference (exit 1); pages that do not read are damage
            assert code in (1, 2) and "Traceback" not in out and str(named.name) in out or "differ" in out, out
            continue
        _check(code, out, named if named.name != "manifest.json" else run / "manifest.json", expect)
    assert not (tmp_path / "r.html").exists()
    after = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert after == before                               # readers never change a run directory


def test_flipped_bytes_report_was_exit_0(runs, tmp_path):
    """The issue's case: `report` on a part with flipped bytes now names it (real process)."""
    run, named, _ = _damaged(runs, tmp_path, "flipped bytes")
    r = subprocess.run([sys.executable, "-m", "sim.cli", "report", str(run), "--out", str(tmp_path / "r.html"), "-q"],
                       capture_output=True, text=True, cwd=ROOT, env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    _check(r.returncode, r.stderr, named, "differs from the sha256 in manifest.json")


@pytest.mark.parametrize("kind", ["truncated part", "list-shaped manifest"])
def test_damage_through_a_real_process(runs, tmp_path, kind):
    run, named, expect = _damaged(runs, tmp_path, kind)
    for cmd in (["report", str(run), "-q"], ["diff", str(run), str(runs / "other")]):
        r = subprocess.run([sys.executable, "-m", "sim.cli", *cmd], capture_output=True, text=True, cwd=ROOT,
                           env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
        _check(r.returncode, r.stderr, named, expect)


def test_verify_still_reports_a_readable_change_as_a_difference(runs, tmp_path):
    """A part rewritten with one value changed reads fine: that is what --verify is for (exit 1)."""
    run = tmp_path / "run"
    shutil.copytree(runs / "good", run)
    f = _part(run)
    t = pq.read_table(f)
    vals = t.column("p").to_pylist()
    vals[0] += 1e-9
    from sim.recorder import write_options
    pq.write_table(t.set_column(t.schema.get_field_index("p"), "p", pa.array(vals)), f, **write_options(t.schema))
    code, out = cli("replay", run, "--verify")
    assert code == 1 and "column 'p': value differs" in out and "changed after the run" in out, out
    code, out = cli("report", run, "-q")
    _check(code, out, f, "differs from the sha256 in manifest.json")


def test_a_directory_that_is_not_a_run(tmp_path):
    (tmp_path / "heartbeats").mkdir()
    for cmd in (["report", tmp_path], ["diff", tmp_path, tmp_path], ["replay", tmp_path, "--verify"],
                ["resume", tmp_path]):
        code, out = cli(*cmd)
        _check(code, out, tmp_path / "manifest.json", "file not found")
