"""The per-agent peer of a whole run: what a competent user writes without the engine's batching.

The reference point: a simplified Golem (PAD update, four-factor retrieval over a full
1,024-entry memory with d = 64, top-8, salience-gated writes, a curator every 50 ticks), one
SimPy process per agent, numpy per agent. Its Golem-ticks per second is the yardstick for the
engine's whole-run throughput (`_run.py` measures both in one process).

    python tests/benchmarks/_peer.py [--golems 1000] [--ticks 20] [--capacity 1024]
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np
import simpy

WEIGHTS = np.array([0.40, 0.20, 0.20, 0.20])   # semantic, temporal, importance, emotional
TOP_K = 8
DAY_MS = 86_400_000


class PeerGolem:
    """One agent with its own arrays, updated one numpy call at a time."""

    def __init__(self, rng: np.random.Generator, capacity: int, dim: int):
        e = rng.standard_normal((capacity, dim)).astype(np.float32)
        self.emb = e / np.linalg.norm(e, axis=1, keepdims=True)
        self.created = -rng.integers(0, 30 * DAY_MS, capacity).astype(np.float64)
        self.importance = rng.uniform(0, 1, capacity)
        self.confidence = rng.uniform(0.3, 0.9, capacity)
        tags = rng.uniform(-1, 1, (capacity, 3))
        self.tag_unit = tags / np.linalg.norm(tags, axis=1, keepdims=True)           # kept at write time
        self.outcome = rng.uniform(-1, 1, capacity)
        self.pad = np.zeros(3)
        self.rng = rng

    def tick(self, now_ms: float, ret: float, tick: int) -> None:
        stim = np.array([np.tanh(20 * ret), min(1.0, 40 * abs(ret)) - 0.2, np.tanh(10 * ret)])
        self.pad = np.clip(0.85 * self.pad + 0.35 * stim, -1, 1)                      # PAD update
        q = self.emb[self.rng.integers(len(self.emb))] + 0.1 * self.rng.standard_normal(self.emb.shape[1])
        q = (q / np.linalg.norm(q)).astype(np.float32)
        semantic = (self.emb @ q + 1) / 2                                               # four factors
        temporal = np.exp(-(now_ms - self.created) / (30 * DAY_MS))
        pu = self.pad / max(np.linalg.norm(self.pad), 1e-8)
        emotional = (self.tag_unit @ pu + 1) / 2
        score = WEIGHTS[0] * semantic + WEIGHTS[1] * temporal + WEIGHTS[2] * self.importance + WEIGHTS[3] * emotional
        top = np.argpartition(-score, TOP_K)[:TOP_K]
        top = top[np.argsort(-score[top])]
        signal = float(np.mean(self.outcome[top]))                                       # decide
        salience = min(1.0, abs(ret) * 20 + abs(self.pad[1]) * 0.5 + abs(signal) * 0.1)
        if salience > 0.3:                                                               # gated write
            slot = int(np.argmin(self.importance * self.confidence))
            self.emb[slot] = q
            self.created[slot], self.importance[slot], self.confidence[slot] = now_ms, salience, 0.9
            self.tag_unit[slot], self.outcome[slot] = pu, np.sign(ret)
        if tick % 50 == 49:                                                              # curator
            self.importance *= 0.99
            weak = self.confidence < 0.35
            self.importance[weak] *= 0.9


def run(golems: int = 1000, ticks: int = 20, capacity: int = 1024, dim: int = 64, seed: int = 1) -> dict:
    """Golem-ticks per second of `golems` SimPy processes ticking every 300 s on a random walk."""
    rng = np.random.default_rng(seed)
    agents = [PeerGolem(np.random.default_rng([seed, i]), capacity, dim) for i in range(golems)]
    returns = rng.normal(0, 0.01, ticks + 1)
    env = simpy.Environment()
    done = [0]

    def heartbeat(g: PeerGolem):
        for t in range(ticks):
            g.tick(env.now * 1000, float(returns[t]), t)
            done[0] += 1
            yield env.timeout(300)
    for g in agents:
        env.process(heartbeat(g))
    t0 = time.perf_counter()
    env.run()
    wall = time.perf_counter() - t0
    return {"golems": golems, "ticks": ticks, "capacity": capacity, "golem_ticks": done[0], "run_s": wall,
            "golem_ticks_per_s": done[0] / wall}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--golems", type=int, default=1000)
    ap.add_argument("--ticks", type=int, default=20)
    ap.add_argument("--capacity", type=int, default=1024)
    a = ap.parse_args(argv)
    print(json.dumps(run(a.golems, a.ticks, a.capacity), sort_keys=True))


if __name__ == "__main__":
    main()
