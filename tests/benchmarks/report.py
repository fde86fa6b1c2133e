"""Print the performance tables of docs/performance.md: retrieval ratios, whole runs, peers.

    OPENBLAS_NUM_THREADS=1 python tests/benchmarks/report.py            # everything (~1.5 h)
    OPENBLAS_NUM_THREADS=1 python tests/benchmarks/report.py --quick    # N <= 1M d = 64 only, 1-day runs
    OPENBLAS_NUM_THREADS=1 python tests/benchmarks/report.py --peers-only [--duration 10d]

Retrieval: every implementation of one case is timed round-robin in one process (CPU time of
this thread, the minimum over rounds), so each ratio compares measurements taken side by side.
Whole runs: each in a fresh process (tests/benchmarks/_run.py), phases timed from outside, the
retrieval floor of one tick (a stream read of the bytes the scan reads) measured in the same
process on the final arena. Peers: the engine's recorded bench at capacity 1,024 and the
Golem-lite peers of `../shared/peers/` (read from there: the vectorised numpy one always, Mesa's
when `mesa` imports), each a fresh process, alternating for `--peer-rounds` rounds; the ratios
are Golem-ticks per second, engine over peer, per round.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

import _retrieval as R  # noqa: E402
from _run import PHASES, cores, in_child  # noqa: E402

#: where the Golem-lite peers live: $GOLEM_PEERS, else shared/peers beside the repository (or
#: beside the folder holding a worktree of it)
PEER_DIRS = [Path(os.environ["GOLEM_PEERS"])] if os.environ.get("GOLEM_PEERS") else [
    ROOT.parent / "shared" / "peers", ROOT.parents[1] / "shared" / "peers"]


def machine() -> str:
    cpu = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import numba
    flags = ""
    try:
        f = open("/proc/cpuinfo").read()
        flags = "AVX-512" if "avx512f" in f else ("AVX2" if "avx2" in f else "")
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (f"{cpu}, {cores()} cores, {flags}, {mem:.0f} GB RAM; Python {platform.python_version()}, "
            f"numpy {np.__version__}, numba {numba.__version__}, OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}")


# ----------------------------------------------------------------------------- retrieval
#: entries per slab in the "cohort" retrieval case (the bench's capacity)
COHORT_SLAB = 1024


def retrieval_case(n: int, d: int, mode: str, rounds: int) -> dict:
    from golem import retrieval as rt
    # "cohort": the engine's shape, slabs of the bench's capacity (1,024), one query a slab
    b = 1 if mode == "single" else n // COHORT_SLAB if mode == "cohort" else R.BATCH
    gr = R.build_arena(b, n // b, d)
    q, pad = R.make_queries(b, d)
    prm = rt.RetrievalParams(top_k=R.K)
    golems = np.arange(b)
    res = R.kernel(gr, golems, q, pad, R.NOW_MS, prm)
    idi, tun, floor, stream = R.Idiomatic(gr, prm), R.Tuned(gr, prm), R.Floor(gr, b), R.StreamRead(gr, golems)
    # same top-k, shadow and pool, or no timing; the kernel's stored terms are float32 (the idiomatic
    # peer computes the formulas in float64) and the tuned peer scores in float32: at a thousand
    # queries a few rows hold near ties one of them orders the other way
    R.same_results(res, idi(golems, q, pad, R.NOW_MS), near_ties=1e-6)
    R.same_results(res, tun(golems, q, pad, R.NOW_MS), near_ties=1e-6)
    fns = {"kernel": lambda: R.kernel(gr, golems, q, pad, R.NOW_MS, prm),
           "idiomatic": lambda: idi(golems, q, pad, R.NOW_MS),
           "tuned": lambda: tun(golems, q, pad, R.NOW_MS),
           "sgemv": lambda: floor.sgemv(golems, q),
           "stream": stream.one}
    if mode == "batch32":      # every query against every entry: only meaningful for a few queries
        fns["full_mm"] = lambda: floor.full_mm(golems, q)
    t = R.alternate(fns, rounds=rounds, min_time=0.5)
    if mode != "single":
        # the engine spreads a batch over numba's threads: wall time, side by side with 1 thread
        tw = R.alternate({"kernel_1t": fns["kernel"],
                          "kernel_mt": lambda: R.kernel(gr, golems, q, pad, R.NOW_MS, prm, threads=None),
                          "sgemv": fns["sgemv"]}, rounds=rounds, min_time=0.5, clock=time.perf_counter)
        t["wall_kernel_1t"], t["wall_kernel_mt"], t["wall_sgemv"] = tw["kernel_1t"], tw["kernel_mt"], tw["sgemv"]
    t["n"], t["d"], t["mode"] = n, d, mode
    scan = R.scan_bytes_per_entry(gr) * gr.n_golems * gr.capacity
    t["scan_bytes_per_entry"] = R.scan_bytes_per_entry(gr)
    t["gb_s_kernel"] = scan / t["kernel"] / 1e9
    t["gb_s_stream"] = scan / t["stream"] / 1e9
    return t


def retrieval_table(rows: list[dict]) -> str:
    out = ["| N | d | queries | kernel ms | idiomatic ms | tuned ms | sgemv ms | full mm ms | stream ms | idiomatic/kernel | tuned/kernel | stream/kernel | kernel/sgemv | kernel/full mm | 2-thread kernel / sgemv (wall) |",
           "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        fm = r.get("full_mm")
        fm_ms = "" if fm is None else f"{1e3 * fm:.3f}"
        fm_ratio = "" if fm is None else f"{r['kernel'] / fm:.2f}"
        who = {"single": "1", "cohort": f"{r['n'] // COHORT_SLAB:,} Golems"}.get(r["mode"], f"{R.BATCH} Golems")
        mt = f"{r['wall_kernel_mt'] / r['wall_sgemv']:.2f}" if "wall_kernel_mt" in r else ""
        out.append(
            f"| {r['n']:,} | {r['d']} | {who} | {1e3 * r['kernel']:.3f} | "
            f"{1e3 * r['idiomatic']:.3f} | {1e3 * r['tuned']:.3f} | {1e3 * r['sgemv']:.3f} | {fm_ms} | "
            f"{1e3 * r['stream']:.3f} | {r['idiomatic'] / r['kernel']:.2f} | {r['tuned'] / r['kernel']:.2f} | "
            f"{r['stream'] / r['kernel']:.2f} | {r['kernel'] / r['sgemv']:.2f} | {fm_ratio} | {mt} |")
    return "\n".join(out)


# ----------------------------------------------------------------------------- whole runs
def waiting(r: dict) -> float:
    """ms per tick the simulation thread spent waiting (phase wall time beyond its CPU time: the
    GIL held by the writer thread, a core taken by another thread)."""
    cpu = r.get("phases_cpu_s")
    if not cpu:
        return float("nan")
    # scheduling's wall time is the run's minus the other phases'; its CPU time was measured directly
    idle = sum(max(0.0, r["phases_s"][p] - cpu.get(p, 0.0)) for p in PHASES)
    return 1e3 * idle / max(r["cohort_ticks"], 1)


def cores_bound(r: dict) -> dict:
    """What a run's CPU time (every thread's, over the run: `process_cpu_s`) allows on the cores it
    had: its CPU ms per cohort tick, the least ms per tick no packing of its threads beats (CPU /
    cores), and so the most Golem-ticks/s the machine could give that work."""
    cpu_s = r["process_cpu_s"] / max(r["cohort_ticks"], 1)
    least_s = cpu_s / r["cores"]
    return {"cpu_ms_per_tick": 1e3 * cpu_s, "least_ms_per_tick": 1e3 * least_s,
            "most_golem_ticks_per_s": r["golem_ticks"] / (r["process_cpu_s"] / r["cores"])}


def runs_table(runs: list[dict]) -> str:
    head = ("| capacity | recording | Golem-ticks/s | ms per tick (1,000 Golems) | retrieval floor ms | tick / floor | "
            "kernel ms, 2 threads / 1 (same arena) | kernel / floor | float32 sgemv ms | per-agent peer Golem-ticks/s | "
            "engine / peer | peak RSS MB | simulation thread waiting ms per tick | CPU ms per tick, all threads | "
            "least ms per tick on its cores | " + " | ".join(f"{p} %" for p in PHASES) + " |")
    out = [head, "|" + "---:|" * (15 + len(PHASES))]
    for r in runs:
        fl = r["floor"]
        tot = max(r["run_s"], 1e-9)
        b = cores_bound(r)
        out.append(
            f"| {r['capacity']:,} | {'on' if r['record'] else 'off'} | {r['golem_ticks_per_s']:,.0f} | "
            f"{1e3 * r['s_per_cohort_tick']:.1f} | {1e3 * fl['stream_s']:.1f} | {r['s_per_cohort_tick'] / fl['stream_s']:.2f} | "
            f"{1e3 * fl['kernel_s']:.1f} / {1e3 * fl['kernel_1t_s']:.1f} | {fl['kernel_s'] / fl['stream_s']:.2f} | "
            f"{1e3 * fl['sgemv_s']:.1f} | {r['peer']['golem_ticks_per_s']:,.0f} | "
            f"{r['golem_ticks_per_s'] / r['peer']['golem_ticks_per_s']:.1f} | {r['peak_rss_mb']:,.0f} | "
            f"{waiting(r):.2f} | {b['cpu_ms_per_tick']:.1f} | {b['least_ms_per_tick']:.1f} ({r['cores']}) | "
            + " | ".join(f"{100 * r['phases_s'].get(p, 0.0) / tot:.1f}" for p in PHASES) + " |")
    return "\n".join(out)


# ----------------------------------------------------------------------------- peers
def peer_path(name: str) -> Path | None:
    for d in PEER_DIRS:
        if (d / name).is_file():
            return d / name
    return None


def run_peer(script: Path, golems: int, ticks: int, capacity: int) -> dict:
    """One peer in a fresh process; its last line is `RESULT ... agent_ticks_per_s=X ...`."""
    cmd = [sys.executable, str(script), "--agents", str(golems), "--ticks", str(ticks), "--capacity", str(capacity),
           "--no-collect"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT,
                         env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    line = next(x for x in reversed(out.stdout.splitlines()) if x.startswith("RESULT"))
    fields = dict(kv.split("=", 1) for kv in line.split()[1:])
    return {"golem_ticks_per_s": float(fields["agent_ticks_per_s"]), "seconds": float(fields["seconds"]),
            "ticks": ticks, "golems": golems}


def peers(duration: str | None, rounds: int, capacity: int = 1024) -> dict:
    """The engine's recorded bench and the peers, alternating; ratios per round."""
    import importlib.util
    found = {"numpy": (peer_path("numpy_golem_lite.py"), 100)}
    if importlib.util.find_spec("mesa") is not None:
        found["mesa"] = (peer_path("mesa_golem_lite.py"), 60)
    missing = [k for k, (p, _) in found.items() if p is None]
    if missing:
        raise SystemExit(f"peers {missing} not found in {[str(d) for d in PEER_DIRS]} (set GOLEM_PEERS)")
    out: dict = {"rounds": []}
    for i in range(rounds):
        rnd = {}
        print(f"  peers round {i + 1}: engine ...", file=sys.stderr, flush=True)
        eng = in_child(capacity, True, duration)
        rnd["engine"] = {"golem_ticks_per_s": eng["golem_ticks_per_s"], "s_per_cohort_tick": eng["s_per_cohort_tick"],
                         "cores": eng["cores"], **cores_bound(eng)}
        for name, (path, ticks) in found.items():
            print(f"  peers round {i + 1}: {name} ...", file=sys.stderr, flush=True)
            rnd[name] = run_peer(path, 1000, ticks, capacity)
            rnd[name]["engine_over_peer"] = eng["golem_ticks_per_s"] / rnd[name]["golem_ticks_per_s"]
        out["rounds"].append(rnd)
    return out


def peers_table(p: dict) -> str:
    """Per round: the engine's Golem-ticks/s and the most its CPU time allows on its cores
    (`cores_bound`), each peer's, and the engine over each peer, measured and at most."""
    names = [k for k in p["rounds"][0] if k != "engine"]
    head = ("| round | engine Golem-ticks/s | engine at most on its cores | "
            + " | ".join(f"{n} Golem-ticks/s | engine / {n} | at most / {n}" for n in names) + " |")
    rows = [head, "|" + "---:|" * (3 + 3 * len(names))]
    for i, r in enumerate(p["rounds"], 1):
        e = r["engine"]
        rows.append(f"| {i} | {e['golem_ticks_per_s']:,.0f} | {e['most_golem_ticks_per_s']:,.0f} ({e['cores']}) | " + " | ".join(
            f"{r[n]['golem_ticks_per_s']:,.0f} | {r[n]['engine_over_peer']:.2f} | "
            f"{e['most_golem_ticks_per_s'] / r[n]['golem_ticks_per_s']:.2f}" for n in names) + " |")
    return "\n".join(rows)


def startup() -> tuple[float, float]:
    """Wall time of a tiny `golem-sim run` with an empty numba cache, then with the warm cache."""
    import tempfile
    cmd = [sys.executable, "-m", "sim.cli", "run", "scenarios/default.yaml", "--set", "duration=5m", "--no-record", "-q"]
    base = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    cold_env = dict(base, NUMBA_CACHE_DIR=tempfile.mkdtemp(prefix="numba-cold-"))
    times = []
    for env in (cold_env, cold_env, cold_env):
        t = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True, cwd=ROOT, env=env)
        times.append(time.perf_counter() - t)
    return times[0], min(times[1:])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="d = 64 retrieval only and 1-day runs")
    ap.add_argument("--duration", default=None, help="whole-run duration (default: the scenario's 10d; --quick: 1d)")
    ap.add_argument("--skip-retrieval", action="store_true")
    ap.add_argument("--skip-runs", action="store_true")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--skip-peers", action="store_true")
    ap.add_argument("--peers-only", action="store_true", help="only the engine's bench beside the peers")
    ap.add_argument("--peer-rounds", type=int, default=2)
    ap.add_argument("--json", default=None, help="also write every number to this file")
    a = ap.parse_args(argv)
    report: dict = {"machine": machine()}
    print(f"machine: {report['machine']}\n", flush=True)
    if a.peers_only:
        a.skip_retrieval = a.skip_runs = True
    if not a.skip_retrieval:
        rows = []
        dims = (64,) if a.quick else R.DIMS
        for d in dims:
            for n in R.SIZES:
                for mode in ("single", "batch32") + (("cohort",) if n >= 100 * COHORT_SLAB else ()):
                    rows.append(retrieval_case(n, d, mode, a.rounds))
                    print(f"  retrieval N={n:,} d={d} {mode}: kernel {1e3 * rows[-1]['kernel']:.2f} ms", file=sys.stderr, flush=True)
        report["retrieval"] = rows
        print("## Retrieval (ms per call, CPU time, min of round-robin rounds)\n")
        print(retrieval_table(rows) + "\n", flush=True)
    if not a.skip_runs:
        duration = a.duration or ("1d" if a.quick else None)
        runs = []
        for cap in (1024, 4096):
            for rec in (True, False):
                print(f"  whole run capacity={cap} record={rec} ...", file=sys.stderr, flush=True)
                runs.append(in_child(cap, rec, duration))
        report["runs"] = runs
        print(f"## Whole runs (scenarios/bench.yaml, duration {duration or '10d'})\n")
        print(runs_table(runs) + "\n")
        for cap in (1024, 4096):
            on = next(r for r in runs if r["capacity"] == cap and r["record"])
            off = next(r for r in runs if r["capacity"] == cap and not r["record"])
            print(f"- capacity {cap:,}: recording adds {100 * (on['run_s'] / off['run_s'] - 1):+.1f} % "
                  f"({on['run_s']:.1f} s vs {off['run_s']:.1f} s); bytes per entry {on['bytes_per_entry']:.0f} "
                  f"(limit 2 d + 128 = {2 * on['dim'] + 128}); the scan reads "
                  f"{on['floor']['scan_bytes_per_entry']} of them; on its {on['cores']} cores the recorded tick's CPU "
                  f"({cores_bound(on)['cpu_ms_per_tick']:.1f} ms) allows no less than "
                  f"{cores_bound(on)['least_ms_per_tick']:.1f} ms a tick, "
                  f"{cores_bound(on)['least_ms_per_tick'] / (1e3 * on['floor']['stream_s']):.2f} x the retrieval floor")
        cold, warm = startup()
        report["startup"] = {"cold_s": cold, "warm_s": warm}
        print(f"- `golem-sim run` of a 5-minute scenario: {cold:.2f} s with an empty numba cache, {warm:.2f} s the second time\n")
    if not a.skip_peers:
        duration = a.duration or ("1d" if a.quick else None)
        pr = peers(duration, a.peer_rounds)
        report["peers"] = pr
        print(f"## Peers (engine: scenarios/bench.yaml recorded at capacity 1,024, duration {duration or '10d'}; "
              f"Golem-lite peers of ../shared/peers, 1,000 agents; alternating)\n")
        print(peers_table(pr) + "\n", flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=2, default=float))


if __name__ == "__main__":
    main()
