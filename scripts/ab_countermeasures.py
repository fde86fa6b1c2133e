"""The countermeasures against lock-in, on vs off: contrarian pass + curator balance (SPEC §4.4, §7).

    .venv/bin/python scripts/ab_countermeasures.py --seeds 20 --out runs/ab

Runs flash_crash and losing_streak for each seed twice on the same tape (arm "on": as shipped; arm
"off": contrarian.enabled=false, curator.balance=false), two runs at a time, and prints per scenario
and arm the means over seeds of the bias-drift metrics (SPEC §14), then the paired difference
on - off with its standard error (the standard deviation of the per-seed differences / sqrt(n)):
  mood_congruence  served emotional factor - pool's, mean over retrievals
  valence_bias     served mean P - pool mean P, mean over retrievals
  lock_in_ticks    ticks spent in lock-in episodes (valence bias below -0.1 for >= 12 ticks)
  mood_p           the mean mood pleasure over the run
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import multiprocessing as mp
from pathlib import Path

import polars as pl

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ("flash_crash", "losing_streak")
ARMS = {"on": [], "off": ["contrarian.enabled=false", "curator.balance=false"]}
METRICS = ["mood_congruence", "valence_bias", "lock_in_ticks", "mood_p"]


def _run(job):
    from sim.run import execute
    scenario, arm, seed, out = job
    if not (Path(out) / "manifest.json").exists():
        execute(ROOT / "scenarios" / f"{scenario}.yaml", out, seed=seed, sets=ARMS[arm], environ={}, checkpoint=False)
    return job


def figures(run: Path) -> dict:
    from sim import analysis as A
    li = A.lock_in_episodes(run, metric="valence_bias", threshold=0.1, side="below").collect()
    return dict(mood_congruence=A.mood_congruence(run).select(pl.col("mood_congruence").mean()).collect().item(),
                valence_bias=A.retrieval_valence_bias(run).select(pl.col("valence_bias").mean()).collect().item(),
                lock_in_ticks=int(li["length"].sum() or 0),
                mood_p=pl.scan_parquet(run / "heartbeats" / "*.parquet").select(pl.col("mood_p").mean()).collect().item())


def paired(df: pl.DataFrame) -> pl.DataFrame:
    """Per scenario: mean of (on - off) over seeds and its standard error, for each metric."""
    wide = df.pivot(on="arm", index=["scenario", "seed"], values=METRICS)
    diff = wide.select("scenario", *[(pl.col(f"{m}_on") - pl.col(f"{m}_off")).alias(m) for m in METRICS])
    return diff.group_by("scenario").agg(
        pl.len().alias("seeds"), *[pl.col(m).mean().alias(f"{m}_diff") for m in METRICS],
        *[(pl.col(m).std() / pl.len().sqrt()).alias(f"{m}_se") for m in METRICS]).sort("scenario")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--out", default="runs/ab")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    jobs = [(s, arm, seed, str(Path(args.out) / f"{s}-{arm}-seed{seed}"))
            for s in SCENARIOS for seed in range(1, args.seeds + 1) for arm in ARMS]
    from sim.sweep import worker_env
    with worker_env(), cf.ProcessPoolExecutor(args.workers, mp_context=mp.get_context("spawn")) as pool:
        done = list(pool.map(_run, jobs))
    df = pl.DataFrame([dict(scenario=s, arm=arm, seed=seed, **figures(Path(out))) for s, arm, seed, out in done])
    with pl.Config(tbl_rows=100, tbl_cols=30, float_precision=4, tbl_width_chars=250):
        print(df.group_by("scenario", "arm").agg(pl.col(METRICS).mean()).sort("scenario", "arm"))
        print(paired(df))


if __name__ == "__main__":
    main()
