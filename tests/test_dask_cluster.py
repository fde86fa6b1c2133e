"""Sweeps on a real Dask cluster: a `dask scheduler` and `dask worker` processes on
127.0.0.1, driven by `golem-sim sweep --scheduler` in its own process. The same hashes as the local
pool, a worker killed mid-sweep, a scheduler without workers, TLS with a certificate made here, and
the warning for an address that is neither loopback nor TLS. Runs are tiny (calm, a few hours)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from sim import sweep as sw

ROOT = Path(__file__).resolve().parents[1]
DASK = Path(sys.executable).parent / "dask"
CALM = ROOT / "scenarios" / "calm.yaml"
#: workers and the sweep import this tree, whatever their working directory
ENV = dict(os.environ, OPENBLAS_NUM_THREADS="1", NUMBA_NUM_THREADS="1", COLUMNS="300", PYTHONPATH=str(ROOT))


def sweep_file(d: Path, seeds: str, duration: str, name: str) -> Path:
    f = d / f"{name}.yaml"
    f.write_text(f"scenarios: [{CALM}]\nseeds: {seeds}\nsets: {{duration: {duration}}}\n")
    return f


class Cluster:
    """A scheduler (and workers) in their own processes, on 127.0.0.1; stopped by close()."""

    def __init__(self, d: Path, workers: int, tls: list[str] | None = None):
        self.d, self.procs, self.tls = d, [], tls or []
        self.file = d / "scheduler.json"
        proto = ["--protocol", "tls"] if tls else []
        try:
            self.scheduler = self._start([str(DASK), "scheduler", "--host", "127.0.0.1", "--port", "0",
                                          "--no-dashboard", "--scheduler-file", str(self.file), *proto, *self.tls],
                                         "scheduler")
            t_end = time.monotonic() + 60
            while not self.file.exists() and time.monotonic() < t_end:
                time.sleep(0.2)
            assert self.file.exists(), self.log("scheduler")
            self.address = json.loads(self.file.read_text())["address"]
            self.workers = [self.add_worker(f"w{i}") for i in range(workers)]
            if workers:
                self.wait_workers(workers)
        except BaseException:
            self.close()   # never leave a process of ours behind
            raise

    def _start(self, cmd, name):
        log = open(self.d / f"{name}.log", "w")
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=ENV, cwd=self.d, start_new_session=True)
        self.procs.append(p)
        return p

    def add_worker(self, name):
        return self._start([str(DASK), "worker", "--scheduler-file", str(self.file), "--nthreads", "1",
                            "--no-nanny", "--no-dashboard", "--host", "127.0.0.1", "--name", name,
                            "--death-timeout", "60", *self.tls], name)

    def log(self, name) -> str:
        return (self.d / f"{name}.log").read_text()[-3000:]

    def wait_workers(self, n):
        from distributed import Client
        sec = None
        if self.tls:
            from distributed.security import Security
            ca, cert, key = self.tls[1], self.tls[3], self.tls[5]
            sec = Security(tls_ca_file=ca, tls_client_cert=cert, tls_client_key=key, require_encryption=True)
        with Client(self.address, timeout="30s", security=sec) as c:
            c.wait_for_workers(n, timeout=90)

    def close(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("dask"), workers=2)
    yield c
    c.close()


def golem_sweep(*args, timeout=240):
    return subprocess.run([sys.executable, "-m", "sim.cli", "sweep", *map(str, args)], capture_output=True,
                          text=True, env=ENV, cwd=ROOT, timeout=timeout)


def hashes(out: Path) -> dict[str, dict]:
    return {str(p.parent.relative_to(out)): json.loads(p.read_text())["hashes"]
            for p in sorted(out.glob("runs/**/manifest.json"))}


def test_a_real_cluster_gives_the_local_pools_hashes(cluster, tmp_path):
    f = sweep_file(tmp_path, "[1, 2]", "6h", "small")
    r = golem_sweep(f, "--scheduler", cluster.address, "--out", tmp_path / "dask", "-q")
    assert r.returncode == 0, r.stderr + cluster.log("w0")
    assert f"on Dask scheduler {cluster.address}" in " ".join(r.stdout.split())
    assert "warning" not in r.stderr                     # loopback: nothing to warn about
    pool = sw.run_sweep(f, tmp_path / "pool", executor=sw.LocalPool(2), environ={})
    assert pool.ok == 2
    a, b = hashes(tmp_path / "dask"), hashes(tmp_path / "pool")
    assert len(a) == 2 and a == b


def test_no_worker_is_a_clear_error_after_the_timeout(tmp_path):
    c = Cluster(tmp_path, workers=0)
    try:
        f = sweep_file(tmp_path, "[1]", "1h", "lonely")
        t0 = time.monotonic()
        r = golem_sweep(f, "--scheduler", c.address, "--worker-timeout", "3", "--out", tmp_path / "out", "-q",
                        timeout=120)
        waited = time.monotonic() - t0
    finally:
        c.close()
    assert r.returncode == 2 and "Traceback" not in r.stderr
    msg = " ".join(r.stderr.split())
    assert f"--scheduler {c.address}: no worker joined within 3 s" in msg and "dask worker" in msg
    assert waited < 60


def test_losing_every_worker_mid_sweep_fails_the_rest_after_the_timeout(tmp_path):
    c, proc = Cluster(tmp_path, workers=1), None
    try:
        f = sweep_file(tmp_path, "[1, 2]", "4d", "orphaned")
        out = tmp_path / "out"
        proc = subprocess.Popen([sys.executable, "-m", "sim.cli", "sweep", str(f), "--scheduler", c.address,
                                 "--worker-timeout", "3", "--out", str(out), "-q"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=ENV, cwd=ROOT)
        t_end = time.monotonic() + 120
        while time.monotonic() < t_end and proc.poll() is None and not any(
                json.loads(p.read_text() or "{}").get("status") == "running" for p in out.glob("runs/**/manifest.json")):
            time.sleep(0.1)
        os.killpg(c.workers[0].pid, signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        c.close()
    assert proc.returncode == 1, stderr                 # runs failed, the sweep itself ended
    s = sw.read_summary(out).collect()
    assert s.height == 2 and s["status"].to_list() == ["failed", "failed"]
    assert s["error"].to_list() == ["no Dask worker for 3 s"] * 2


def openssl_cert(d: Path) -> tuple[str, str, str]:
    """A self-signed certificate for 127.0.0.1 that is also its own CA."""
    key, cert = d / "key.pem", d / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-addext", "basicConstraints=critical,CA:TRUE"],
                   check=True, capture_output=True)
    return str(cert), str(cert), str(key)


def test_tls_scheduler_with_a_self_signed_certificate(tmp_path):
    ca, cert, key = openssl_cert(tmp_path)
    tls = ["--tls-ca-file", ca, "--tls-cert", cert, "--tls-key", key]
    c = Cluster(tmp_path, workers=1, tls=tls)
    try:
        assert c.address.startswith("tls://127.0.0.1:")
        f = sweep_file(tmp_path, "[3]", "3h", "secure")
        r = golem_sweep(f, "--scheduler", c.address, *tls, "--out", tmp_path / "out", "-q")
        assert r.returncode == 0, r.stderr + c.log("w0")
        assert "warning" not in r.stderr
        assert len(hashes(tmp_path / "out")) == 1
        # without the certificates the client cannot talk to a TLS scheduler: one line, exit 2
        r = golem_sweep(sweep_file(tmp_path, "[4]", "3h", "insecure"), "--scheduler", c.address,
                        "--out", tmp_path / "out2", "-q", timeout=120)
        assert r.returncode == 2 and "Traceback" not in r.stderr
        assert "needs --tls-ca-file, --tls-cert and --tls-key" in " ".join(r.stderr.split())
    finally:
        c.close()


def test_plain_tcp_to_another_host_warns_once(tmp_path):
    # every combination is invalid, so nothing is submitted and no connection is attempted
    f = tmp_path / "bad.yaml"
    f.write_text(f"scenarios: [{CALM}]\ngrid: {{retrieval.top_k: [\"bad\"]}}\nseeds: [1]\n")
    r = golem_sweep(f, "--scheduler", "tcp://192.0.2.1:8786", "--out", tmp_path / "out")
    assert r.returncode == 1                         # the invalid run is a failed row
    warnings = [line for line in r.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1
    w = " ".join(r.stderr.split())
    assert "tcp://192.0.2.1:8786: neither loopback nor TLS" in w and "Dask moves pickles" in w
    assert sw.address_warning("tcp://127.0.0.1:8786") is None and sw.address_warning("localhost:8786") is None
    assert sw.address_warning("tls://10.0.0.5:8786") is None and sw.address_warning("tcp://[::1]:8786") is None
    assert sw.address_warning("tcp://scheduler.lab:8786") is not None


def test_a_worker_killed_mid_sweep_has_its_runs_redone(cluster, tmp_path):
    """Last in this file: it kills one of the module cluster's two workers."""
    f = sweep_file(tmp_path, "[1, 2, 3]", "2d", "long")
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "sim.cli", "sweep", str(f), "--scheduler", cluster.address,
                             "--out", str(out), "-q"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=ENV, cwd=ROOT)
    try:
        t_end = time.monotonic() + 120
        running = []
        while time.monotonic() < t_end and proc.poll() is None:
            running = [p for p in out.glob("runs/**/manifest.json")
                       if json.loads(p.read_text() or "{}").get("status") == "running"]
            if len(running) >= 2:     # both workers are inside a run
                break
            time.sleep(0.1)
        assert len(running) >= 2, "the two workers never ran at the same time"
        from distributed import Client
        with Client(cluster.address, timeout="30s") as c:   # the victim holds a run in flight
            names = {a: w["name"] for a, w in c.scheduler_info()["workers"].items()}
            busy = {names[a]: len(keys) for a, keys in c.processing().items()}
        assert busy.get("w0", 0) >= 1, busy
        # a mark in every run in flight: the dead worker's run is redone whole (its directory
        # removed and made again), so its mark goes; a run that went on keeps its mark
        in_flight = [p.parent for p in out.glob("runs/**/manifest.json")
                     if json.loads(p.read_text() or "{}").get("status") == "running"]
        for run in in_flight:
            (run / "mark").touch()
        victim = cluster.workers[0]
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait()
        stdout, stderr = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr
    s = sw.read_summary(out).collect()
    assert s.height == 3 and s["run_dir"].n_unique() == 3 and set(s["seed"]) == {1, 2, 3}
    assert s["status"].to_list() == ["ok"] * 3
    for p in out.glob("runs/**/manifest.json"):
        assert json.loads(p.read_text())["status"] == "complete"
    assert any(not (run / "mark").exists() for run in in_flight), in_flight   # a run was redone
    # the runs the dead worker had started were redone whole: the same tables as a plain run
    from sim.run import execute
    rel = "runs/calm/base/seed=1"
    direct = execute(CALM, tmp_path / "direct", seed=1, sets=["duration=2d"], environ={}).manifest
    assert direct["hashes"] == json.loads((out / rel / "manifest.json").read_text())["hashes"]
    assert s.filter(pl.col("seed") == 1)["heartbeats_hash"][0] == direct["hashes"]["heartbeats"]
