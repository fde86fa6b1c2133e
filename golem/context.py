"""Context embeddings: what a situation "means" to a Golem, as a unit vector in R^d.

A context is a bag of tokens (asset, regime, return bucket, volatility bucket, event kinds); each
token has a fixed random direction derived from (seed, token) by hashing, and the context is their
weighted sum. Similar situations therefore land close together, which is all semantic recall
needs, and the vectors never depend on the order in which contexts are first seen.
"""
from __future__ import annotations

import zlib
from functools import lru_cache

import numpy as np

WEIGHTS = {"asset": 1.0, "regime": 1.0, "ret": 1.5, "vol": 0.7, "event": 1.5, "kind": 0.8}
RET_STEP = 0.005
RET_MAX = 6


@lru_cache(maxsize=1 << 16)
def topic_code(topic: str) -> int:
    """Stable int32 code of a topic string (asset/protocol + event kind); cached, as every entry
    written asks for one of a few names."""
    return zlib.crc32(topic.encode()) & 0x7FFFFFFF


class Lexicon:
    """Seeded token vectors and a cache of base-context embeddings."""

    def __init__(self, dim: int, seed: int):
        self.dim = dim
        self.seed = seed
        self._tok: dict[str, np.ndarray] = {}
        self._ctx: dict[int, np.ndarray] = {}

    def token(self, tok: str) -> np.ndarray:
        v = self._tok.get(tok)
        if v is None:
            rng = np.random.default_rng([self.seed, zlib.crc32(tok.encode())])
            v = rng.standard_normal(self.dim)
            v /= np.linalg.norm(v)
            self._tok[tok] = v
        return v

    def base(self, asset: str, regime: str, ret_bucket: int, vol_bucket: int) -> np.ndarray:
        return (WEIGHTS["asset"] * self.token(f"asset:{asset}") + WEIGHTS["regime"] * self.token(f"regime:{regime}")
                + WEIGHTS["ret"] * self.token(f"ret:{ret_bucket}") + WEIGHTS["vol"] * self.token(f"vol:{vol_bucket}"))

    @staticmethod
    def context_keys(asset_idx: np.ndarray, regime: np.ndarray, ret: np.ndarray, vol_ratio: np.ndarray) -> np.ndarray:
        """The integer key of each base context: asset, regime, move bucket, volatility bucket."""
        return _key(asset_idx, regime, ret_bucket(ret), vol_bucket(vol_ratio))

    def contexts(self, assets: list[str], asset_idx: np.ndarray, regime_names: list[str], regime: np.ndarray,
                 ret: np.ndarray, vol_ratio: np.ndarray) -> np.ndarray:
        """Base-context vectors (not normalised) for a cohort, cached by their integer key."""
        rb = ret_bucket(ret)
        vb = vol_bucket(vol_ratio)
        key = _key(asset_idx, regime, rb, vb)
        uniq, inv = np.unique(key, return_inverse=True)
        out = np.empty((uniq.size, self.dim))
        for i, k in enumerate(uniq):
            v = self._ctx.get(int(k))
            if v is None:
                j = int(np.flatnonzero(key == k)[0])
                v = self.base(assets[asset_idx[j]], regime_names[regime[j]], int(rb[j]), int(vb[j]))
                self._ctx[int(k)] = v
            out[i] = v
        return out[inv.ravel()]

    def with_tokens(self, base: np.ndarray, tokens: list[str], weight: float) -> np.ndarray:
        v = base.copy()
        for t in tokens:
            v = v + weight * self.token(t)
        return v


def _key(asset_idx, regime, rb, vb) -> np.ndarray:
    return ((np.asarray(asset_idx).astype(np.int64) * 64 + regime) * 32 + (rb + RET_MAX)) * 16 + (vb + 4)


def ret_bucket(ret: np.ndarray) -> np.ndarray:
    return np.clip(np.round(np.asarray(ret) / RET_STEP), -RET_MAX, RET_MAX).astype(np.int64)


def vol_bucket(vol_ratio: np.ndarray) -> np.ndarray:
    return np.clip(np.round(np.log2(np.maximum(np.asarray(vol_ratio), 1e-6))), -3, 3).astype(np.int64)


def normalise(v: np.ndarray) -> np.ndarray:
    return (v / np.maximum(np.linalg.norm(v, axis=-1, keepdims=True), 1e-12)).astype(np.float32)
