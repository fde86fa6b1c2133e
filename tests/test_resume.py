"""Crash-safe, resumable runs: signals, checkpoints, kill -9 and resume."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from conftest import cli

from sim import checkpoint as ckm
from sim.recorder import TABLES, content_hashes
from sim.resume import resume
from sim.rundir import write_manifest
from sim.run import execute

# Clade "a" delivers exactly one heartbeat later (same-time ties with its own ticks); Clade "b"
# is slow, so pushes are still in flight across flushes; two cadences interleave. High probes
# force flashbulbs (and so Clade pushes) whatever the calibration of the mind.
SCEN = """name: resumable
duration: 2d
seed: 5
overrides:
  recording.flush_every_s: 3600
market:
  events:
    - {kind: flash_crash, at: 10h, asset: BTC, duration: 1h, severity: high, impact: -0.10}
    - {kind: exploit, at: 30h, asset: ETH, duration: 1h, severity: high, impact: -0.05}
clades:
  - {name: a, latency: 300s, jitter: 0}
  - {name: b, latency: 3h, jitter: 1h}
golems:
  - {count: 4, clade: a, asset: ETH}
  - {count: 3, clade: b, asset: BTC, interval: 450, start: 100}
"""


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    """The uninterrupted run everyone is compared with."""
    d = tmp_path_factory.mktemp("resume")
    (d / "s.yaml").write_text(SCEN)
    res = execute(d / "s.yaml", d / "ref", environ={})
    assert not (d / "ref" / "checkpoint").exists()      # a complete run needs no checkpoint
    return d, res.manifest["hashes"]


def _start(d: Path, out: Path) -> subprocess.Popen:
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    return subprocess.Popen([sys.executable, "-m", "sim.cli", "run", str(d / "s.yaml"), "--out", str(out), "-q"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _wait_for_checkpoint(proc: subprocess.Popen, out: Path, n: int = 1) -> None:
    t_end = time.time() + 60
    while time.time() < t_end:
        if len(list((out / "checkpoint").glob("state-*.json"))) >= 1 and \
                len(list((out / "heartbeats").glob("part-*.parquet"))) >= n:
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.01)
    raise AssertionError("no checkpoint within 60 s")


def test_kill_9_then_resume_is_byte_identical(ref, tmp_path):
    d, hashes = ref
    out = tmp_path / "killed"
    proc = _start(d, out)
    _wait_for_checkpoint(proc, out, n=3)
    proc.kill()                                           # SIGKILL: no flush, no manifest update
    proc.wait()
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "running", "the run finished before it could be killed"
    # the latest two are kept (the json is the commit point: a kill while the next state is written
    # leaves that state's arrays file too, without a json)
    assert 1 <= len(list((out / "checkpoint").glob("state-*.json"))) <= 2   # the newest and its fallback
    for t in ("heartbeats", "market"):                                  # tables readable up to the last flush
        assert pl.read_parquet(out / t / "*.parquet").height > 0
    code, text = cli("resume", out, "-q")
    assert code == 0, text
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "complete" and m["resumes"] == 1
    assert content_hashes(out) == hashes and m["hashes"] == hashes
    assert not (out / "checkpoint").exists()


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_flushes_marks_interrupted_and_resumes(ref, tmp_path, sig, code):
    d, hashes = ref
    out = tmp_path / "sig"
    proc = _start(d, out)
    _wait_for_checkpoint(proc, out)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert "Traceback" not in err and "resume" in err and len(err.strip().splitlines()) <= 2
    m = json.loads((out / "manifest.json").read_text())
    assert m["status"] == "interrupted" and m["signal"] == signal.Signals(sig).name
    assert m["stopped_at_s"] > 0 and set(m["hashes"]) == set(TABLES)
    assert pl.read_parquet(out / "heartbeats" / "*.parquet")["time_ms"].max() <= m["stopped_at_s"] * 1000
    code_, text = cli("resume", out, "-q")
    assert code_ == 0, text
    assert content_hashes(out) == hashes


def test_checkpoint_with_deliveries_in_flight(ref, tmp_path, monkeypatch):
    """Stop in-process right after the first checkpoint that holds Clade pushes in flight."""
    d, hashes = ref
    save = ckm.save

    class Stop(BaseException):
        pass

    def save_then_stop(world, ckdir):
        p = save(world, ckdir)
        world.rec.sync()                                 # the commit, on the writer thread
        pending = json.loads(p.read_text())["pending"]
        if any(x["role"] == "delivery" for x in pending):
            raise Stop
        return p

    monkeypatch.setattr(ckm, "save", save_then_stop)
    monkeypatch.setattr(ckm, "BUDGET", float("inf"))     # a checkpoint at every flush
    with pytest.raises(Stop):
        execute(d / "s.yaml", tmp_path / "r", environ={})
    monkeypatch.setattr(ckm, "save", save)
    ck = ckm.load(tmp_path / "r" / "checkpoint")
    roles = [x["role"] if isinstance(x["role"], str) else x["role"][0] for x in ck.meta["pending"]]
    assert "delivery" in roles and {"market", "cohort", "flusher"} <= set(roles)
    assert json.loads((tmp_path / "r" / "manifest.json").read_text())["status"] == "interrupted"
    res = resume(tmp_path / "r")
    assert res.manifest["hashes"] == hashes


def test_resume_bad_input(ref, tmp_path):
    d, _ = ref
    code, out = cli("resume", d / "ref")
    assert code == 2 and "the run is complete" in out
    plain = {"scenario": {}, "config": {}, "seed": 1, "status": "running"}
    (tmp_path / "manifest.json").write_text(json.dumps(plain))
    code, out = cli("resume", tmp_path)
    assert code == 2 and "sha256: required key is missing" in out and "Traceback" not in out
    write_manifest(tmp_path, plain)
    code, out = cli("resume", tmp_path)
    assert code == 2 and "no complete checkpoint" in out and "Traceback" not in out
    code, out = cli("resume", tmp_path / "nowhere")
    assert code == 2 and "file not found" in out


def test_checkpoint_of_another_format_is_refused(ref, tmp_path):
    """A checkpoint written by another engine version: exit 2 naming the file and both formats,
    nothing already written is touched, and once the format matches the resume completes."""
    d, hashes = ref
    out = tmp_path / "old"
    proc = _start(d, out)
    _wait_for_checkpoint(proc, out)
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=60)
    states = sorted((out / "checkpoint").glob("state-*.json"))
    metas = [json.loads(s.read_text()) for s in states]
    for s, meta in zip(states, metas):    # every state intact (its sha256 holds), of another format
        ckm._write_meta(s, {k: v for k, v in dict(meta, format=ckm.FORMAT - 1).items() if k != "sha256"})
    before = content_hashes(out)
    code, text = cli("resume", out, "-q")
    assert code == 2 and "Traceback" not in text, text
    assert states[-1].name in text and f"checkpoint format {ckm.FORMAT - 1}" in text and f"format {ckm.FORMAT}" in text
    assert content_hashes(out) == before
    for s, meta in zip(states, metas):
        s.write_text(json.dumps(meta))
    code, text = cli("resume", out, "-q")
    assert code == 0, text
    assert content_hashes(out) == hashes


def test_checkpoints_keep_to_their_wall_time_budget(monkeypatch, tmp_path):
    """Saves keep within the budget from the first flush on: the first waits until the run has
    lasted its estimated cost / budget, later ones until the last save's measured cost fits."""
    from types import SimpleNamespace
    saved, clock = [], [1000.0]         # the wall clock the rule reads, moved by the test alone

    def sleep(s):
        clock[0] += s

    def slow_save(world, ckdir):
        sleep(0.02)
        saved.append(clock[0])
        return ckdir
    monkeypatch.setattr(ckm, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    monkeypatch.setattr(ckm, "save", slow_save)
    monkeypatch.setattr(ckm, "SAVE_RATE", 1e6)
    # 200 used slots x 100 B = 20 kB: estimated 0.02 s, so 0.2 s of run at a 10 % budget
    world = SimpleNamespace(gr=SimpleNamespace(count=np.array([150, 50]), bytes_per_entry=lambda: 100.0))
    assert ckm.maybe_save(world, tmp_path, budget=0.1) is None              # 0.02 s > 10 % of 0 s
    sleep(0.1)
    assert ckm.maybe_save(world, tmp_path, budget=0.1) is None              # 0.02 s > 10 % of 0.1 s
    sleep(0.15)                                                             # 0.02 s <= 10 % of 0.25 s
    assert ckm.maybe_save(world, tmp_path, budget=0.1) == tmp_path
    assert ckm.maybe_save(world, tmp_path, budget=0.1) is None              # measured 0.02 s > 10 % of 0 s
    sleep(0.19)
    assert ckm.maybe_save(world, tmp_path, budget=0.1) is None              # 0.02 s > 10 % of 0.19 s
    sleep(0.02)
    assert ckm.maybe_save(world, tmp_path, budget=0.1) == tmp_path          # 0.02 s <= 10 % of 0.21 s
    assert len(saved) == 2
    assert ckm.maybe_save(SimpleNamespace(), tmp_path, budget=0.1) == tmp_path   # nothing to write: at once
