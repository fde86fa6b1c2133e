"""Processes that need the same uncompiled kernel at the same moment compile it once (sim.compile_lock)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: np.median makes the compile last ~3 s, so two processes released together surely overlap in it
KERNEL = """
import numpy as np
from numba import njit

@njit(cache=True)
def spread(x):
    s = 0.0
    for i in range(x.size):
        s += (x[i] - x.mean()) ** 2
    return s / max(x.size - 1, 1) + 0.0 * np.median(x)
"""
CHILD = """
import json, os, sys, time
sys.path.insert(0, {tmp!r})
if {lock}:
    from sim import compile_lock
    compile_lock.install()
import numpy as np
import kern
open(os.path.join({tmp!r}, "ready-{i}"), "w").close()
while not os.path.exists(os.path.join({tmp!r}, "go")):
    time.sleep(0.001)
kern.spread(np.arange(5.0))
print(json.dumps(sum(kern.spread._cache_misses.values())))
"""


def _children(tmp: Path, lock: bool, n: int = 2) -> list[subprocess.Popen]:
    (tmp / "kern.py").write_text(textwrap.dedent(KERNEL))
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp / "cache"))
    return [subprocess.Popen([sys.executable, "-c", CHILD.format(tmp=str(tmp), lock=lock, i=i)], cwd=ROOT, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(n)]


def _start_together(tmp: Path, procs) -> list[int]:
    t_end = time.monotonic() + 60
    while len(list(tmp.glob("ready-*"))) < len(procs) and time.monotonic() < t_end:
        time.sleep(0.01)
    (tmp / "go").touch()
    out = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e for _, e in out]
    return [json.loads(o) for o, _ in out]


def test_two_processes_missing_the_cache_at_once_compile_the_kernel_once(tmp_path):
    misses = _start_together(tmp_path, _children(tmp_path, lock=True))
    assert sorted(misses) == [0, 1]          # one compiled it; the other waited and loaded it


def test_without_the_lock_both_compile(tmp_path):
    """The situation the lock is for (and the check that the test above can see it)."""
    assert _start_together(tmp_path, _children(tmp_path, lock=False)) == [1, 1]


def test_a_failed_compile_releases_its_lock(tmp_path):
    """A kernel that does not type-check raises in the process that tried, and its lock is free for
    the next process (flock locks of two opens conflict even within one process: the check below)."""
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "kern.py").write_text("from numba import njit\n\n@njit(cache=True)\ndef spread(x):\n    return x.nope\n")
    code = textwrap.dedent(f"""
        import fcntl, pathlib, sys, numpy as np
        sys.path.insert(0, {str(bad)!r})
        from sim import compile_lock
        compile_lock.install()
        import kern
        try:
            kern.spread(np.arange(3.0))
        except Exception as exc:
            print(type(exc).__name__)
        lock = next(pathlib.Path({str(tmp_path / "cache")!r}).rglob("*.lock"))
        with open(lock) as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                print("free")
            except BlockingIOError:
                print("held")
    """)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.stdout.split() == ["TypingError", "free"], r.stderr


def test_a_file_system_without_locks_compiles_as_before(tmp_path):
    (tmp_path / "kern.py").write_text(textwrap.dedent(KERNEL))
    code = textwrap.dedent(f"""
        import errno, fcntl, sys, numpy as np
        sys.path.insert(0, {str(tmp_path)!r})
        from sim import compile_lock
        compile_lock.install()
        def no_locks(fd, op):
            raise OSError(errno.ENOLCK, "No locks available")
        fcntl.flock = no_locks
        import kern
        print(kern.spread(np.arange(5.0)))
    """)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and float(r.stdout) == 2.5, r.stderr
