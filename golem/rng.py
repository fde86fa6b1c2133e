"""Counter-based uniforms for the mind: a draw depends only on (seed, golem, tick, stream), so
batching and population size never shift anyone's randomness (SplitMix64 finaliser)."""
from __future__ import annotations

import numpy as np

_M = np.uint64(0xFFFFFFFFFFFFFFFF)


def _mix(z: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        z = (z + np.uint64(0x9E3779B97F4A7C15)) & _M
        z = ((z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _M
        z = ((z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _M
        return z ^ (z >> np.uint64(31))


def uniform(seed: int, a, b, stream: int) -> np.ndarray:
    """Uniforms in [0, 1) for arrays a (e.g. golem ids) and b (e.g. ticks) under one stream."""
    with np.errstate(over="ignore"):
        z = _mix(np.full(np.broadcast(np.asarray(a), np.asarray(b)).shape, np.uint64(seed & 0xFFFFFFFFFFFFFFFF)))
        z = _mix(z ^ np.asarray(a).astype(np.uint64))
        z = _mix(z ^ np.asarray(b).astype(np.uint64))
        z = _mix(z ^ np.uint64(stream))
    return (z >> np.uint64(11)).astype(np.float64) / float(1 << 53)
