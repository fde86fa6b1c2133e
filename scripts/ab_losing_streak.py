"""Issue 4's A/B: losing_streak with the countermeasures (contrarian pass + curator balance) on vs off.

    .venv/bin/python scripts/ab_losing_streak.py --seeds 5 --out runs/ab

Runs each seed twice on the same tape and prints, per arm, the mean retrieval valence bias, mood
congruence, lock-in episodes (valence bias below -0.1 for >= 12 ticks) and mean pleasure.
For larger ensembles use `golem-sim sweep sweeps/contrarian_ab.yaml`.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import polars as pl

from sim import analysis as A
from sim.run import execute

ROOT = Path(__file__).resolve().parents[1]
ARMS = {"on": [], "off": ["contrarian.enabled=false", "curator.balance=false"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--out", default="runs/ab")
    args = ap.parse_args()
    rows = []
    for seed in range(1, args.seeds + 1):
        for arm, sets in ARMS.items():
            run = Path(args.out) / f"{arm}_seed{seed}"
            if not (run / "manifest.json").exists():
                execute(ROOT / "scenarios" / "losing_streak.yaml", run, seed=seed, sets=sets)
            li = A.lock_in_episodes(run, metric="valence_bias", threshold=0.1, side="below").collect()
            rows.append(dict(
                arm=arm, seed=seed,
                valence_bias=A.retrieval_valence_bias(run).select(pl.col("valence_bias").mean()).collect().item(),
                mood_congruence=A.mood_congruence(run).select(pl.col("mood_congruence").mean()).collect().item(),
                lock_in_episodes=li.height, lock_in_ticks=int(li["length"].sum() or 0),
                mean_p=pl.scan_parquet(run / "heartbeats" / "*.parquet").select(pl.col("p").mean()).collect().item()))
    df = pl.DataFrame(rows)
    with pl.Config(tbl_rows=100, tbl_cols=20):
        print(df)
        print(df.group_by("arm").agg(pl.all().exclude("seed").mean()).sort("arm"))


if __name__ == "__main__":
    main()
