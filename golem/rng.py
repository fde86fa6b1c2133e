"""Counter-based uniforms for the mind: a draw depends only on (seed, golem, tick, stream), so
batching and population size never shift anyone's randomness (SplitMix64 finaliser)."""
from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, inline="always")
def _mix1(z):
    """SplitMix64's step on a uint64 (wrapping): the golden-ratio increment, then its finaliser."""
    z = z + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


@njit(cache=True, inline="always")
def draw(z0, a, b, stream):
    """The uniform of (a, b, stream) under the mixed seed z0 = `_mix1(seed)` (uint64s): SplitMix64
    again after a, b and the stream are mixed in (xor) one at a time; the top 53 bits over 2^53.
    For kernels that draw as they go (`golem.trading`)."""
    z = _mix1(_mix1(_mix1(z0 ^ a) ^ b) ^ stream)
    return np.float64(z >> np.uint64(11)) / 9007199254740992.0


@njit(cache=True)
def _uniforms(seed, a, b, stream, out):
    """out[i] = the draw (`draw`) of (a[i], b[i]) under the seed."""
    z0 = _mix1(seed)
    for i in range(out.size):
        out[i] = draw(z0, a[i], b[i], stream)


def mixed_seed(seed: int) -> np.uint64:
    """z0 of `draw` for a run's seed."""
    return np.uint64(_mix1(np.uint64(seed & 0xFFFFFFFFFFFFFFFF)))


def uniform(seed: int, a, b, stream: int) -> np.ndarray:
    """Uniforms in [0, 1) for arrays a (e.g. golem ids) and b (e.g. ticks) under one stream: in
    one pass (`_uniforms`), ids and ticks taken modulo 2^64 as numpy's astype(uint64) takes them."""
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    out = np.empty(a.shape)
    _uniforms(np.uint64(seed & 0xFFFFFFFFFFFFFFFF), np.ascontiguousarray(a, dtype=np.uint64).ravel(),
              np.ascontiguousarray(b, dtype=np.uint64).ravel(), np.uint64(stream & 0xFFFFFFFFFFFFFFFF), out.reshape(-1))
    return out
