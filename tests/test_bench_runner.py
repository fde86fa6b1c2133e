"""The benchmark runner (tests/benchmarks/_run.py) on a tiny load: phases add up, nothing left behind."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import ROOT


def test_whole_run_times_every_phase_and_removes_its_tables(tmp_path):
    """In its own process, as the report runs it (its phase timers wrap the engine's methods)."""
    out = subprocess.run([sys.executable, str(ROOT / "tests" / "benchmarks" / "_run.py"), "--capacity", "64",
                          "--duration", "1h", "--no-floor", "--json"], check=True, capture_output=True, text=True,
                         cwd=ROOT, env=dict(os.environ, TMPDIR=str(tmp_path)))
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert list(tmp_path.iterdir()) == []          # the recorded run (~1 GB at full size) is gone
    assert r["run_dir"] is None and r["golem_ticks"] == 1000 * 12
    assert abs(sum(r["phases_s"].values()) - r["run_s"]) < 1e-6 * r["run_s"]
    assert r["phases_s"]["retrieval"] > 0 and r["phases_s"]["recording"] > 0
