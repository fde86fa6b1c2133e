"""One whole `golem-sim run` of scenarios/bench.yaml, timed by phase, in this process.

    python tests/benchmarks/_run.py --capacity 1024 [--duration 10d] [--no-record] [--json]
    ... [--no-write] [--no-checkpoint]     what each part of recording costs (tables incomplete)

Phases are measured from outside, without hooks in the engine: the methods below are wrapped
with a timer that charges each moment of wall time to the innermost running phase (a retrieval
inside DECIDING is retrieval, not decision; a Clade push inside emit is clade, not recording).
What no wrapper covers (the SimPy event loop, the cohort loop in World.heartbeat, tick
bookkeeping outside the state functions) is "scheduling".

    market      World.observe (tape index, probes, events seen) and World.market
    appraisal   Mind.sense (PAD update, labels, somatic markers, reflex lane)
    retrieval   golem.retrieval.retrieve (the fused kernel call) wherever it is called from
    decision    Mind.decide and Mind.act, minus the retrieval inside
    write       Mind.reflect (candidates, gating, the memory writer, flashbulbs)
    curator     Mind._maintenance and Mind.dream (curator, contrarian, dreams)
    clade       World.push and World.deliver (Clade messages, contagion, inherited copies),
                minus the recording of each delivery's rows
    recording   World.emit (minus pushes), World.flush, the checkpoint after it, sim.recording.Tables
    scheduling  the rest: SimPy, the heartbeat loop, Mind.tick's own bookkeeping

A recorded run also reports the CPU time its Parquet parts took, by table (`parts_cpu_s`: building
each part's columns, then encoding, writing and hashing it), on whichever thread did it: the writer
thread, or the simulation thread with it for the final flush. That is the work the writer thread
takes from the second core while the retrieval kernel wants both.

Each phase also gets the simulation thread's CPU time (`phases_cpu_s`); where a phase's wall time
exceeds it, the thread waited (for the GIL the writer thread holds, or for a core).

And the CPU time of the whole process over the run (`process_cpu_s`: every thread, the writer's and
numba's workers' with the simulation thread's `thread_cpu_s`) and the cores it may use (`cores`):
no packing of its threads runs it in less than process_cpu_s / cores.

After the run, in the same process, it measures the retrieval floor of one cohort tick on the
final arena (a stream read of every byte the kernel's scan reads, over numba's threads and on one
thread: the floor is the faster of the two), the kernel on the same arena and queries (as the
engine runs it, and on one thread), the BLAS sgemv per slab a float32 store would need (batched:
np.matmul over the stacked slabs), and the per-agent peer (`_peer.py`: as many simplified
Golems, one SimPy process and numpy calls each, 20 ticks).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
PHASES = ("market", "appraisal", "retrieval", "decision", "write", "curator", "clade", "recording", "scheduling")


class PhaseTimer:
    """Exclusive wall time per phase: entering a phase pauses the one it interrupts.

    Also the simulation thread's CPU time per phase (`time.thread_time`, user + system): wall time
    beyond it is time the thread waited (for the GIL, for the OS), not time it worked."""

    def __init__(self):
        self.total = {p: 0.0 for p in PHASES}
        self.cpu = {p: 0.0 for p in PHASES}
        self.calls = {p: 0 for p in PHASES}
        self.stack: list[list] = []  # [phase, started_at, cpu_at]

    def wrap(self, fn, phase):
        def timed(*args, **kwargs):
            now, cpu = time.perf_counter(), time.thread_time()
            if self.stack:
                top = self.stack[-1]
                self.total[top[0]] += now - top[1]
                self.cpu[top[0]] += cpu - top[2]
            self.stack.append([phase, now, cpu])
            self.calls[phase] += 1
            try:
                return fn(*args, **kwargs)
            finally:
                end, cend = time.perf_counter(), time.thread_time()
                ph, t0, c0 = self.stack.pop()
                self.total[ph] += end - t0
                self.cpu[ph] += cend - c0
                if self.stack:
                    self.stack[-1][1] = end
                    self.stack[-1][2] = cend
        timed.__wrapped__ = fn
        return timed


def instrument(timer: PhaseTimer) -> None:
    """Wrap the engine's phase functions (class attributes and module functions) in place."""
    import golem.heartbeat as H
    import golem.retrieval as RT
    import sim.recording as REC
    import sim.run as RUN
    import sim.world as W

    def patch(owner, name, phase):
        fn = getattr(owner, name, None)
        if fn is not None and not hasattr(fn, "__wrapped__"):
            setattr(owner, name, timer.wrap(fn, phase))

    patch(W.World, "run", "scheduling")     # outermost: what no other phase covers (its wall time is
    patch(W.World, "observe", "market")      # reported as the run's minus the others)
    for name in ("tick", "deliveries", "market"):
        patch(REC.Tables, name, "recording")    # also when called from a Clade delivery or a flush
    patch(W.World, "emit", "recording")
    patch(W.World, "flush", "recording")
    patch(RUN, "maybe_save", "recording")   # the checkpoint after a flush (the driver hands it to the world)
    patch(W.World, "push", "clade")
    patch(W.World, "deliver", "clade")
    patch(H.Mind, "sense", "appraisal")
    patch(H.Mind, "decide", "decision")
    patch(H.Mind, "act", "decision")
    patch(H.Mind, "reflect", "write")
    patch(H.Mind, "_maintenance", "curator")
    patch(H.Mind, "dream", "curator")
    patch(H.Mind, "_die", "write")
    patch(RT, "retrieve", "retrieval")


class PartsTimer:
    """CPU time of building and of writing each table's parts (`sim.recorder._build` and
    `_write_part`, wrapped in place), on the thread that runs them."""

    def __init__(self):
        import threading
        self.cpu: dict[str, dict[str, float]] = {}
        self._lock = threading.Lock()

    def _add(self, table: str, step: str, s: float) -> None:
        with self._lock:
            steps = self.cpu.setdefault(table, {"build": 0.0, "write": 0.0})
            steps[step] += s

    def install(self) -> None:
        import sim.recorder as R
        # the recorder's own functions (a timer installed before in this process is replaced)
        build = getattr(R._build, "__wrapped__", R._build)
        write = getattr(R._write_part, "__wrapped__", R._write_part)

        def timed_build(table, cols):
            c = time.thread_time()
            try:
                return build(table, cols)
            finally:
                self._add(table, "build", time.thread_time() - c)

        def timed_write(path, t):
            c = time.thread_time()
            try:
                return write(path, t)
            finally:
                self._add(Path(path).parent.name, "write", time.thread_time() - c)
        timed_build.__wrapped__, timed_write.__wrapped__ = build, write
        R._build, R._write_part = timed_build, timed_write


class RunCpu:
    """CPU time over `World.run` (the run's wall time `run_s`, not the setup): the whole process's,
    every thread's user + system time (`process_s`), and the simulation thread's own (`thread_s`).
    The difference is the writer thread's and numba's workers'. Over the machine's cores the
    process's CPU time bounds the run from below: it cannot take less than process_s / cores,
    however its threads share them."""

    def __init__(self):
        self.process_s = self.thread_s = 0.0

    def install(self) -> None:
        import sim.world as W
        run = W.World.run
        inner = getattr(run, "_run_cpu_inner", run)     # a RunCpu installed before in this process is replaced

        def timed(world, *args, **kwargs):
            r0, c0 = resource.getrusage(resource.RUSAGE_SELF), time.thread_time()
            try:
                return inner(world, *args, **kwargs)
            finally:
                r1 = resource.getrusage(resource.RUSAGE_SELF)
                self.process_s += (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
                self.thread_s += time.thread_time() - c0
        timed._run_cpu_inner = inner
        W.World.run = timed


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def retrieval_floor(world, rounds: int = 7) -> dict:
    """Kernel vs the stream read of the bytes it reads (its floor: `stream_s`, the faster of the
    read over numba's threads and on one thread) vs a float32 BLAS pass, for one tick of the whole
    population, on the final arena."""
    import _retrieval as R
    from golem import retrieval as rt
    gr = world.gr
    n = gr.n_golems
    golems = np.arange(n)
    q, pad = R.make_queries(n, gr.dim, seed=7)
    prm = world.mind.prm
    floor = R.Floor(gr, n)
    stream = R.StreamRead(gr)
    now = int(world.now_ms)
    t = R.alternate({
        "kernel": lambda: rt.retrieve(gr, golems, q, pad, now, prm),      # as the engine runs it
        "kernel_1t": lambda: R.kernel(gr, golems, q, pad, now, prm, threads=1),
        "stream": stream.threads,
        "stream_1t": stream.one,
        "sgemv": lambda: floor.sgemv(golems, q),
    }, rounds=rounds, clock=time.perf_counter)
    return {"kernel_s": t["kernel"], "kernel_1t_s": t["kernel_1t"], "stream_s": min(t["stream"], t["stream_1t"]),
            "stream_threads_s": t["stream"], "stream_1t_s": t["stream_1t"], "sgemv_s": t["sgemv"],
            "arena_entries": int(gr.count.sum()), "scan_bytes_per_entry": R.scan_bytes_per_entry(gr)}


def peak_rss_kib() -> int:
    """This process's peak resident set (VmHWM): unlike ru_maxrss, which Linux carries over from
    the parent through fork and exec, it starts at zero, so a run launched by a large report
    reports its own peak."""
    try:
        for line in open("/proc/self/status"):
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def whole_run(capacity: int, duration: str | None, record: bool, out: Path | None = None, seed: int | None = None,
              phases: bool = True, floor: bool = True) -> dict:
    from sim.run import execute
    timer, parts = PhaseTimer(), PartsTimer()
    if phases:
        instrument(timer)
    if record:
        parts.install()
    cpu = RunCpu()
    cpu.install()
    sets = [f"grimoire.capacity={capacity}"]
    if duration:
        sets.append(f"duration={duration}")
    scratch = None   # without --out the run's tables (~1 GB recorded) go to a directory removed after it
    if out is None:
        import tempfile
        scratch = Path(tempfile.mkdtemp(prefix="golem-bench-"))
        out = scratch / "run"
    rss0 = peak_rss_kib()
    t0 = time.perf_counter()
    try:
        res = execute(ROOT / "scenarios" / "bench.yaml", out, seed=seed, sets=sets, environ={}, record=record)
        total = time.perf_counter() - t0
    finally:
        if scratch is not None:
            import shutil
            shutil.rmtree(scratch, ignore_errors=True)
    world = res.world
    ticks = int(res.manifest["golem_ticks"])
    cohort_ticks = int(round(world.stats.ticks / max(world.pop.n, 1)))
    phase_s = dict(timer.total)
    run_s = res.wall_s
    phase_s["scheduling"] = max(0.0, run_s - sum(v for k, v in phase_s.items() if k != "scheduling"))
    out_d = {
        "capacity": capacity, "duration": duration or "10d", "record": record, "golems": int(world.pop.n),
        "golem_ticks": ticks, "cohort_ticks": cohort_ticks, "run_s": run_s, "setup_s": total - run_s,
        "golem_ticks_per_s": ticks / run_s, "s_per_cohort_tick": run_s / max(cohort_ticks, 1),
        "phases_s": phase_s, "phases_cpu_s": dict(timer.cpu) if phases else None,
        "parts_cpu_s": parts.cpu if record else None,
        "process_cpu_s": cpu.process_s, "thread_cpu_s": cpu.thread_s, "cores": cores(),
        "peak_rss_mb": peak_rss_kib() / 1024,
        "rss_before_mb": rss0 / 1024, "bytes_per_entry": world.gr.bytes_per_entry(), "dim": world.gr.dim,
        "run_dir": None if scratch is not None else str(out),
    }
    if floor:
        out_d["floor"] = retrieval_floor(world)
        import _peer
        out_d["peer"] = _peer.run(golems=int(world.pop.n), ticks=20, capacity=capacity, dim=world.gr.dim)
    return out_d


def parts_of_recording(write: bool = True, checkpoint: bool = True) -> None:
    """Switch off parts of recording, to measure what each costs (the tables are then incomplete)."""
    import sim.checkpoint
    import sim.recorder
    import sim.run
    if not write:
        sim.recorder._build_and_write = lambda path, table, cols: None
    if not checkpoint:   # the run driver hands maybe_save to the world as its checkpointer
        sim.checkpoint.maybe_save = sim.run.maybe_save = lambda *a, **k: None


def in_child(capacity: int, record: bool, duration: str | None) -> dict:
    """`whole_run` in a fresh process (its own peak RSS, no JIT or arena left from before)."""
    import subprocess
    cmd = [sys.executable, str(HERE / "_run.py"), "--capacity", str(capacity), "--json"]
    if duration:
        cmd += ["--duration", duration]
    if not record:
        cmd.append("--no-record")
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=ROOT,
                         env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--capacity", type=int, default=4096)
    ap.add_argument("--duration", default=None, help="scenario duration override (default: the scenario's 10d)")
    ap.add_argument("--no-record", action="store_true")
    ap.add_argument("--no-phases", action="store_true", help="no phase timers (to measure their overhead)")
    ap.add_argument("--no-floor", action="store_true", help="skip the floor, kernel, stream and peer measurements")
    ap.add_argument("--no-write", action="store_true",
                    help="recorded, but the writer thread drops each part (what recording costs the simulation "
                         "thread, without the writer beside it)")
    ap.add_argument("--no-checkpoint", action="store_true", help="recorded, without checkpoints")
    ap.add_argument("--out", default=None)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    parts_of_recording(write=not a.no_write, checkpoint=not a.no_checkpoint)
    r = whole_run(a.capacity, a.duration, not a.no_record, Path(a.out) if a.out else None,
                  phases=not a.no_phases, floor=not a.no_floor)
    print(json.dumps(r, indent=None if a.json else 2, sort_keys=True))


if __name__ == "__main__":
    main()
