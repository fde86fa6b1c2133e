"""Counter-based randomness: a uniform in [0, 1) from (seed, a, b, stream) by SplitMix64 hashing.

Per-Golem per-tick draws come from here instead of a stateful generator, so a draw depends only on
who and when, never on how Golems are batched or how many there are (DESIGN: determinism).
"""
from __future__ import annotations

import numpy as np

_M = np.uint64(0xFFFFFFFFFFFFFFFF)


def _mix(z: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        z = (z + np.uint64(0x9E3779B97F4A7C15)) & _M
        z = ((z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _M
        z = ((z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _M
        return z ^ (z >> np.uint64(31))


def hash_uniform_array(seed: int, a, b, stream: int) -> np.ndarray:
    """Vectorised: uniforms for arrays a (e.g. golem ids) and b (e.g. ticks) under one stream."""
    with np.errstate(over="ignore"):
        z = _mix(np.full(np.broadcast(a, b).shape, np.uint64(seed & 0xFFFFFFFFFFFFFFFF)))
        z = _mix(z ^ np.asarray(a, dtype=np.uint64))
        z = _mix(z ^ np.asarray(b, dtype=np.uint64))
        z = _mix(z ^ np.uint64(stream))
    return (z >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def hash_uniform(seed: int, a: int, b: int, stream: int) -> float:
    return float(hash_uniform_array(seed, np.uint64(a), np.uint64(b), stream))
