"""The memory a population needs: one run of the first K Clades of scenarios/population.yaml
(1,000 Golems each, Grimoires of 1,024 prefilled), peak RSS and Golem-ticks/s, and the estimate
for all 100 Clades from two measured sizes.

    python tests/benchmarks/population.py --clades 1 [--duration 1d] [--no-record] [--json]
    python tests/benchmarks/population.py --clades 10 --no-record
    python tests/benchmarks/population.py --estimate small.json large.json   # 100,000 Golems from two runs

Each run is this process alone (run it once per size: ru_maxrss is the process's peak). Peak RSS
grows with the number of Golems as the arena does (`bytes_per_entry` x capacity per Golem) plus the
per-Golem state and the recorder's buffers; `--estimate` fits that line through two runs and
extrapolates it to the full scenario, next to the arena alone. Do not run the 100,000-Golem
scenario on a shared machine: it needs ~21 GB.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT))
SCENARIO = ROOT / "scenarios" / "population.yaml"
GOLEMS_PER_CLADE = 1000


def scenario_of(clades: int, dest: Path) -> Path:
    """population.yaml cut to its first `clades` Clades (and their Golems)."""
    import yaml
    doc = yaml.safe_load(SCENARIO.read_text())
    names = [c["name"] for c in doc["clades"][:clades]]
    doc["clades"] = doc["clades"][:clades]
    doc["golems"] = [g for g in doc["golems"] if g["clade"] in names]
    dest.write_text(yaml.safe_dump(doc, sort_keys=False))
    return dest


def run(clades: int, duration: str | None, record: bool, out: Path | None = None) -> dict:
    from _run import PHASES, PhaseTimer, instrument
    from sim.run import execute
    timer = PhaseTimer()
    instrument(timer)
    scratch = Path(tempfile.mkdtemp(prefix="golem-population-"))
    path = SCENARIO if clades >= 100 else scenario_of(clades, scratch / "population.yaml")
    out = out or scratch / "run"
    t0 = time.perf_counter()
    try:
        res = execute(path, out, sets=[f"duration={duration}"] if duration else None, environ={}, record=record)
    finally:
        if out.is_relative_to(scratch):
            import shutil
            shutil.rmtree(scratch, ignore_errors=True)
    world = res.world
    gr = world.gr
    ticks = int(res.manifest["golem_ticks"])
    cohort_ticks = max(int(round(world.stats.ticks / max(world.pop.n, 1))), 1)
    phases = dict(timer.total)
    phases["scheduling"] = max(0.0, res.wall_s - sum(v for k, v in phases.items() if k != "scheduling"))
    return {
        "clades": clades, "golems": int(world.pop.n), "capacity": gr.capacity, "record": record,
        "duration": duration or "1d", "golem_ticks": ticks, "run_s": res.wall_s, "setup_s": time.perf_counter() - t0 - res.wall_s,
        "golem_ticks_per_s": ticks / res.wall_s, "ms_per_cohort_tick": 1e3 * res.wall_s / cohort_ticks,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "bytes_per_entry": gr.bytes_per_entry(), "arena_mb": gr.bytes_per_entry() * gr.n_golems * gr.capacity / 2**20,
        "phases_ms_per_tick": {p: 1e3 * phases.get(p, 0.0) / cohort_ticks for p in PHASES},
    }


def estimate(small: dict, large: dict, golems: int = 100 * GOLEMS_PER_CLADE) -> dict:
    """Peak RSS for `golems` Golems on the line through two measured runs (same capacity)."""
    per_golem = (large["peak_rss_mb"] - small["peak_rss_mb"]) / (large["golems"] - small["golems"])
    rss = large["peak_rss_mb"] + per_golem * (golems - large["golems"])
    arena = large["bytes_per_entry"] * large["capacity"] * golems / 2**20
    return {"golems": golems, "peak_rss_mb": rss, "peak_rss_gib": rss / 1024, "per_golem_kb": 1024 * per_golem,
            "arena_mb": arena, "arena_gib": arena / 1024, "beside_the_arena_mb": rss - arena}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clades", type=int, default=1, help="Clades of 1,000 Golems to run (1-100)")
    ap.add_argument("--duration", default=None, help="override the scenario's 1d")
    ap.add_argument("--no-record", action="store_true")
    ap.add_argument("--out", default=None, help="keep the run directory here (default: a scratch one, removed)")
    ap.add_argument("--json", action="store_true", help="one line of JSON")
    ap.add_argument("--estimate", nargs=2, metavar=("SMALL", "LARGE"), help="two runs' JSON files: extrapolate")
    a = ap.parse_args(argv)
    if a.estimate:
        small, large = (json.loads(Path(p).read_text().strip().splitlines()[-1]) for p in a.estimate)
        print(json.dumps(estimate(small, large), indent=2))
        return
    if not 1 <= a.clades <= 100:
        ap.error(f"--clades: expected 1-100, got {a.clades}")
    r = run(a.clades, a.duration, not a.no_record, Path(a.out) if a.out else None)
    print(json.dumps(r, indent=None if a.json else 2, sort_keys=True))


if __name__ == "__main__":
    main()
