"""The world's randomness: counter-based uniforms shared with the mind (see golem.rng)."""
from __future__ import annotations

from golem.rng import uniform as hash_uniform_array


def hash_uniform(seed: int, a: int, b: int, stream: int) -> float:
    return float(hash_uniform_array(seed, a, b, stream))
