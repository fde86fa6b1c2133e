"""Hyperdimensional fingerprints of emotional state (SPEC §11).

A Grimoire entry's affect (PAD, discrete emotion, intensity, market regime, and any extra context such
as protocol or gas level) is folded into one 10,240-bit binary hypervector. Binary vectors are chosen
because similarity is then a Hamming distance, which compiles to XOR + popcount and streams at memory
bandwidth over a whole arena, and because binding (XOR) and bundling (majority) let a *partial*
description ("fear AND protocol aave AND gas spiking") be compared against full fingerprints.

Layout: a fingerprint is ``N_WORDS`` packed ``uint64`` words (bit ``p`` lives in word ``p // 64``,
bit ``p % 64``); a batch is a C-contiguous ``(n, N_WORDS)`` array.

Everything random comes from an :class:`ItemMemory` derived from one seed, and each vector depends
only on (seed, kind, name), never on call order, so fingerprints are reproducible across runs and
processes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

import numpy as np
from numba import njit

__all__ = [
    "D_BITS",
    "N_WORDS",
    "PAD_LEVELS",
    "INTENSITY_LEVELS",
    "ItemMemory",
    "bind",
    "bundle",
    "bundle_reference",
    "permute",
    "level_index",
    "encode",
    "encode_batch",
    "query",
    "similarity",
    "hamming_similarity_batch",
    "hamming_topk",
    "high_arousal_prototype",
    "somatic_score",
]

D_BITS = 10_240
"""Bits per fingerprint; large enough that independent random vectors sit at 0.5 ± 0.005 (1 sigma)."""
N_WORDS = D_BITS // 64
"""uint64 words per fingerprint (160 words = 1,280 bytes)."""
PAD_LEVELS = 21
"""Quantisation levels for each PAD axis over [-1, 1] (steps of 0.1)."""
INTENSITY_LEVELS = 7
"""Intensity levels over [0, 1]: level = round(intensity * 6) (SPEC §11)."""

_ROLE_NAMES = ("pleasure", "arousal", "dominance", "emotion", "intensity", "regime")
_DEFAULT_TIEBREAK_SEED = 0x6F6C656D  # for bundle() calls made without an ItemMemory

# ---------------------------------------------------------------------------------------------
# Item memory
# ---------------------------------------------------------------------------------------------


def _random_hv(seed: int, kind: str, name: str) -> np.ndarray:
    """Uniform random hypervector keyed by (seed, kind, name) alone.

    The name goes through blake2b (stable across processes, unlike ``hash``) and, with the seed,
    into a SeedSequence; ``kind`` separates namespaces so role("gas") and symbol("gas") differ.
    """
    digest = hashlib.blake2b(f"{kind}\x00{name}".encode(), digest_size=16).digest()
    ss = np.random.SeedSequence([seed, int.from_bytes(digest, "little")])
    v = np.random.default_rng(ss).integers(0, 2**64, size=N_WORDS, dtype=np.uint64, endpoint=False)
    v.flags.writeable = False  # cached and shared: protect against in-place edits
    return v


def _level_table(seed: int, n_levels: int) -> np.ndarray:
    """(n_levels, N_WORDS) level hypervectors by progressive flipping.

    Level 0 is random; level i flips the first ``round(i * D/2 / (n_levels-1))`` positions of a fixed
    random permutation of the D bit positions. Hence sim(level_i, level_j) = 1 - |k_i - k_j| / D:
    linear in level distance, adjacent levels very similar, the two extremes exactly 0.5 apart.
    """
    if n_levels < 2:
        raise ValueError(f"n_levels must be >= 2, got {n_levels}")
    base = _random_hv(seed, "level-base", str(n_levels))
    digest = hashlib.blake2b(f"level-perm\x00{n_levels}".encode(), digest_size=16).digest()
    rng = np.random.default_rng(np.random.SeedSequence([seed, int.from_bytes(digest, "little")]))
    perm = rng.permutation(D_BITS)
    flips = np.rint(np.arange(n_levels) * (D_BITS / 2) / (n_levels - 1)).astype(np.int64)
    table = np.empty((n_levels, N_WORDS), dtype=np.uint64)
    mask = np.zeros(N_WORDS, dtype=np.uint64)
    done = 0
    for i in range(n_levels):
        pos = perm[done : flips[i]]
        np.bitwise_or.at(mask, pos // 64, np.left_shift(np.uint64(1), (pos % 64).astype(np.uint64)))
        done = flips[i]
        table[i] = base ^ mask
    table.flags.writeable = False
    return table


def level_index(x, lo: float = -1.0, hi: float = 1.0, n_levels: int = PAD_LEVELS):
    """Quantise scalar(s) x in [lo, hi] to a level index (clipped; round half to even like ``round``).

    Scalars and arrays go through the same float64 operations, so ``encode`` and ``encode_batch``
    always pick the same level for the same value.
    """
    xa = np.asarray(x, dtype=np.float64)
    if not np.all(np.isfinite(xa)):
        raise ValueError("level_index: non-finite value")
    idx = np.rint((np.clip(xa, lo, hi) - lo) / (hi - lo) * (n_levels - 1)).astype(np.int64)
    return int(idx) if idx.ndim == 0 else idx


class ItemMemory:
    """Seeded codebook: role vectors, symbol fillers, level vectors and a bundle tie-break vector.

    Vectors are created lazily and memoised; each depends only on (seed, name), so the order in
    which names are first used never changes any vector.
    """

    def __init__(self, seed: int):
        seed = int(seed)
        if seed < 0:
            raise ValueError(f"ItemMemory seed must be >= 0, got {seed}")
        self.seed = seed
        self._roles: dict[str, np.ndarray] = {}
        self._symbols: dict[str, np.ndarray] = {}
        self._levels: dict[int, np.ndarray] = {}
        self.tiebreak = _random_hv(seed, "tiebreak", "")
        """Breaks majority ties when an even number of vectors is bundled."""

    def role(self, name: str) -> np.ndarray:
        """Role vector (the 'key' slot), e.g. "emotion", "regime", "protocol", "gas", "asset"."""
        v = self._roles.get(name)
        if v is None:
            v = self._roles[name] = _random_hv(self.seed, "role", name)
        return v

    def symbol(self, name: str) -> np.ndarray:
        """Filler vector for a symbol (emotion name, regime name, protocol, gas level, ...)."""
        v = self._symbols.get(name)
        if v is None:
            v = self._symbols[name] = _random_hv(self.seed, "symbol", name)
        return v

    def level_table(self, n_levels: int = PAD_LEVELS) -> np.ndarray:
        """All level vectors for an n_levels quantisation, shape (n_levels, N_WORDS)."""
        t = self._levels.get(n_levels)
        if t is None:
            t = self._levels[n_levels] = _level_table(self.seed, n_levels)
        return t

    def level(self, x: float, lo: float = -1.0, hi: float = 1.0, n_levels: int = PAD_LEVELS) -> np.ndarray:
        """Level vector for a scalar: nearby values get similar vectors, lo and hi ~orthogonal ones."""
        return self.level_table(n_levels)[level_index(x, lo, hi, n_levels)]

    R_pleasure = property(lambda self: self.role("pleasure"), doc="Role of the P axis.")
    R_arousal = property(lambda self: self.role("arousal"), doc="Role of the A axis.")
    R_dominance = property(lambda self: self.role("dominance"), doc="Role of the D axis.")
    R_emotion = property(lambda self: self.role("emotion"), doc="Role of the discrete emotion.")
    R_intensity = property(lambda self: self.role("intensity"), doc="Role of the intensity level.")
    R_regime = property(lambda self: self.role("regime"), doc="Role of the market regime.")


# ---------------------------------------------------------------------------------------------
# Operations
# ---------------------------------------------------------------------------------------------


def bind(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """XOR binding: the result is dissimilar to both inputs, and bind(bind(a, b), b) == a."""
    return np.bitwise_xor(a, b)


def permute(a: np.ndarray, shift: int = 1) -> np.ndarray:
    """Cyclic rotation of all D bits by ``shift`` (bit p moves to p + shift); encodes order/position."""
    a = np.asarray(a, dtype=np.uint64)
    s = shift % D_BITS
    w, b = divmod(s, 64)
    r = np.roll(a, w, axis=-1)
    if b:
        r = (r << np.uint64(b)) | (np.roll(r, 1, axis=-1) >> np.uint64(64 - b))
    return r


def _n_planes(k: int) -> int:
    """Bit planes needed to count up to k votes without overflow."""
    return max(1, int(k).bit_length())


@njit(cache=True)
def _encode_kernel(roles, table, idx, tiebreak, nplanes, out):
    """out[i] = majority_c(roles[c] XOR table[idx[i, c]]): bind and bundle fused, nothing materialised.

    roles (k, W); table (m, W) holds every filler/level vector used; idx (n, k) rows into table.
    Votes are counted with bit-sliced counters: planes[p, j] holds bit p of the vote count of the
    64 lanes of word j, so one AND/XOR carry step counts 64 bits at once and the word loop vectorises.
    The count is compared with thr = k // 2 from the top plane down; a tie (even k, count == k/2)
    takes the tie-break bit.
    """
    n, k = idx.shape
    w = roles.shape[1]
    planes = np.zeros((nplanes, w), dtype=np.uint64)
    carry = np.empty(w, dtype=np.uint64)
    thr = k // 2
    even = k % 2 == 0
    for i in range(n):
        planes[:] = 0
        for c in range(k):
            rr = roles[c]
            tr = table[idx[i, c]]
            for j in range(w):
                carry[j] = rr[j] ^ tr[j]
            for p in range(nplanes):
                pl = planes[p]
                for j in range(w):
                    t = pl[j] & carry[j]
                    pl[j] ^= carry[j]
                    carry[j] = t
        o = out[i]
        for j in range(w):
            gt = np.uint64(0)
            eq = ~np.uint64(0)
            for p in range(nplanes - 1, -1, -1):
                if (thr >> p) & 1:
                    eq &= planes[p, j]
                else:
                    gt |= eq & planes[p, j]
                    eq &= ~planes[p, j]
            if even:
                gt |= eq & tiebreak[j]
            o[j] = gt


_DEFAULT_TIEBREAK = None


def _default_tiebreak() -> np.ndarray:
    global _DEFAULT_TIEBREAK
    if _DEFAULT_TIEBREAK is None:
        _DEFAULT_TIEBREAK = _random_hv(_DEFAULT_TIEBREAK_SEED, "tiebreak", "")
    return _DEFAULT_TIEBREAK


def bundle(vectors: np.ndarray, tiebreak: np.ndarray | None = None) -> np.ndarray:
    """Bitwise majority of (k, N_WORDS) vectors: the result stays similar to every input.

    With even k, ties take the bit of ``tiebreak`` (an ItemMemory's, or a fixed default), which is
    the same as adding it as a (k+1)-th vote, so the result is deterministic and order-free.
    """
    v = np.ascontiguousarray(vectors, dtype=np.uint64)
    if v.ndim != 2 or v.shape[0] == 0:
        raise ValueError(f"bundle expects a non-empty (k, words) array, got shape {v.shape}")
    tb = _default_tiebreak() if tiebreak is None else np.ascontiguousarray(tiebreak, dtype=np.uint64)
    if tb.shape != (v.shape[1],):
        raise ValueError(f"tiebreak shape {tb.shape} does not match {v.shape[1]} words")
    k, w = v.shape
    out = np.empty((1, w), dtype=np.uint64)
    # the fused kernel with an all-zero filler: roles XOR 0 = the vectors themselves
    _encode_kernel(v, np.zeros((1, w), dtype=np.uint64), np.zeros((1, k), dtype=np.int64), tb, _n_planes(k), out)
    return out[0]


def bundle_reference(vectors: np.ndarray, tiebreak: np.ndarray | None = None) -> np.ndarray:
    """Plain numpy majority (unpack bits, count, compare), the reference for the bundle kernel."""
    v = np.ascontiguousarray(vectors, dtype=np.uint64)
    tb = _default_tiebreak() if tiebreak is None else np.ascontiguousarray(tiebreak, dtype=np.uint64)
    k = v.shape[0]
    bits = np.unpackbits(v.view(np.uint8), axis=1, bitorder="little").astype(np.int64)
    counts = bits.sum(axis=0)
    tbits = np.unpackbits(tb.view(np.uint8), bitorder="little").astype(bool)
    maj = (2 * counts > k) | ((2 * counts == k) & tbits)
    return np.packbits(maj, bitorder="little").view(np.uint64)


# ---------------------------------------------------------------------------------------------
# Encoding and queries
# ---------------------------------------------------------------------------------------------


def _role_stack(im: ItemMemory, extra_keys: Sequence[str]) -> np.ndarray:
    return np.stack([im.role(r) for r in _ROLE_NAMES] + [im.role(k) for k in extra_keys])


def encode_batch(
    p,
    a,
    d,
    emotions: Sequence[str],
    intensities,
    regimes: Sequence[str],
    im: ItemMemory,
    extra: Mapping[str, Sequence[str]] | None = None,
) -> np.ndarray:
    """Fingerprints for n states at once, shape (n, N_WORDS).

    Inputs are structure-of-arrays (as the Grimoire stores them); ``extra`` maps a role name to one
    symbol per row, e.g. {"protocol": [...], "gas": [...]}. Row i equals ``encode`` of row i.
    """
    p, a, d, inten = (np.asarray(x, dtype=np.float64).ravel() for x in (p, a, d, intensities))
    n = p.size
    extra = dict(extra or {})
    if clash := set(extra) & set(_ROLE_NAMES):
        raise ValueError(f"encode: extra keys {sorted(clash)} clash with the built-in roles")
    keys = sorted(extra)  # majority is order-free; sorting just fixes the layout
    cols_sym = [list(emotions), list(regimes)] + [list(extra[k]) for k in keys]
    if any(x.size != n for x in (a, d, inten)) or any(len(c) != n for c in cols_sym):
        raise ValueError("encode_batch: all inputs must have the same length")

    pad_t = im.level_table(PAD_LEVELS)
    int_t = im.level_table(INTENSITY_LEVELS)
    names = sorted({s for c in cols_sym for s in c})
    sym_row = {s: i for i, s in enumerate(names)}
    parts = [pad_t, int_t] + ([np.stack([im.symbol(s) for s in names])] if names else [])
    table = np.ascontiguousarray(np.concatenate(parts))
    off_int, off_sym = PAD_LEVELS, PAD_LEVELS + INTENSITY_LEVELS

    k = len(_ROLE_NAMES) + len(keys)
    idx = np.empty((n, k), dtype=np.int64)
    idx[:, 0] = level_index(p, -1.0, 1.0, PAD_LEVELS)
    idx[:, 1] = level_index(a, -1.0, 1.0, PAD_LEVELS)
    idx[:, 2] = level_index(d, -1.0, 1.0, PAD_LEVELS)
    idx[:, 4] = off_int + level_index(inten, 0.0, 1.0, INTENSITY_LEVELS)
    for col, c in zip([3, 5] + list(range(6, k)), cols_sym):
        idx[:, col] = [off_sym + sym_row[s] for s in c]

    out = np.empty((n, N_WORDS), dtype=np.uint64)
    _encode_kernel(_role_stack(im, keys), table, idx, im.tiebreak, _n_planes(k), out)
    return out


def encode(
    pad: tuple[float, float, float],
    emotion: str,
    intensity: float,
    regime: str,
    im: ItemMemory,
    extra: Mapping[str, str] | None = None,
) -> np.ndarray:
    """Fingerprint of one affective state: bundle of R_P⊗level(P), R_A⊗level(A), R_D⊗level(D),
    R_emotion⊗emotion, R_intensity⊗level(round(intensity*6)), R_regime⊗regime, role(k)⊗symbol(v).
    """
    ex = {k: [v] for k, v in (extra or {}).items()}
    return encode_batch([pad[0]], [pad[1]], [pad[2]], [emotion], [intensity], [regime], im, ex)[0]


def _query_role(im: ItemMemory, key: str) -> np.ndarray:
    return im.role(key)  # R_emotion is role("emotion"), R_regime is role("regime"): same slots


def query(im: ItemMemory, **items: str) -> np.ndarray:
    """Compositional probe, e.g. ``query(im, emotion="fear", protocol="aave", gas="spiking")``.

    Bundles role(k)⊗symbol(v) for the given items only; fingerprints that carry all of them score
    highest, those that carry some score in between, unrelated ones ~0.5.
    """
    if not items:
        raise ValueError("query needs at least one item")
    vs = np.stack([bind(_query_role(im, k), im.symbol(v)) for k, v in sorted(items.items())])
    return bundle(vs, im.tiebreak)


def high_arousal_prototype(im: ItemMemory) -> np.ndarray:
    """Fear-like high-arousal state in a crash; dreams replay the entries most similar to it."""
    return encode((-0.6, 0.9, -0.5), "fear", 0.8, "crash", im)


# ---------------------------------------------------------------------------------------------
# Similarity
# ---------------------------------------------------------------------------------------------


def similarity(a: np.ndarray, b: np.ndarray) -> float:
    """1 - hamming / D: 1 for identical, ~0.5 for unrelated, 0 for complementary (scalar reference)."""
    x = np.bitwise_xor(np.asarray(a, dtype=np.uint64), np.asarray(b, dtype=np.uint64))
    ham = int(np.unpackbits(x.view(np.uint8)).sum())
    return 1.0 - ham / (x.size * 64)


_M1 = np.uint64(0x5555555555555555)
_M2 = np.uint64(0x3333333333333333)
_M4 = np.uint64(0x0F0F0F0F0F0F0F0F)
_H01 = np.uint64(0x0101010101010101)


@njit(cache=True)
def _popcount64(x):
    """SWAR popcount; LLVM recognises the idiom and emits (v)popcnt, vectorised with AVX-512."""
    x = x - ((x >> np.uint64(1)) & _M1)
    x = (x & _M2) + ((x >> np.uint64(2)) & _M2)
    x = (x + (x >> np.uint64(4))) & _M4
    return (x * _H01) >> np.uint64(56)


@njit(cache=True)
def _hamming_row(q, row):
    c = np.uint64(0)
    for j in range(row.size):
        c += _popcount64(q[j] ^ row[j])
    return c


@njit(cache=True)
def hamming_similarity_batch(query, fps):
    """Similarity of ``query`` (W,) to each row of ``fps`` (n, W): one streaming XOR+popcount pass."""
    n, w = fps.shape
    if query.size != w:
        raise ValueError("hamming_similarity_batch: query and fingerprints differ in width")
    dbits = np.float64(w * 64)
    out = np.empty(n, dtype=np.float64)
    for i in range(n):
        out[i] = 1.0 - np.float64(_hamming_row(query, fps[i])) / dbits
    return out


@njit(cache=True)
def hamming_topk(query, fps, k):
    """Top-k most similar rows in one pass: (ids int64[k], sims float64[k]), best first.

    Keeps a sorted buffer of the k smallest Hamming distances; a row enters only if strictly
    better than the current k-th, so equal similarities keep the lower index first (stable).
    k is capped at n.
    """
    n, w = fps.shape
    if query.size != w:
        raise ValueError("hamming_topk: query and fingerprints differ in width")
    k = max(0, min(k, n))
    ids = np.empty(k, dtype=np.int64)
    dist = np.empty(k, dtype=np.uint64)
    filled = 0
    for i in range(n):
        h = _hamming_row(query, fps[i])
        if filled < k:
            pos = filled
            filled += 1
        elif h < dist[k - 1]:
            pos = k - 1
        else:
            continue
        while pos > 0 and dist[pos - 1] > h:
            dist[pos] = dist[pos - 1]
            ids[pos] = ids[pos - 1]
            pos -= 1
        dist[pos] = h
        ids[pos] = i
    dbits = np.float64(w * 64)
    sims = np.empty(k, dtype=np.float64)
    for j in range(k):
        sims[j] = 1.0 - np.float64(dist[j]) / dbits
    return ids, sims


def somatic_score(recency: float, importance: float, relevance: float, hdc_similarity: float,
                  weights: tuple[float, float, float, float] = (0.30, 0.30, 0.25, 0.15)) -> float:
    """Somatic-enhanced retrieval score (SPEC §11): the HDC similarity stands in for the emotional
    factor (weights: `retrieval.hdc_recency`, `hdc_importance`, `hdc_relevance`, `hdc_similarity`)."""
    return weights[0] * recency + weights[1] * importance + weights[2] * relevance + weights[3] * hdc_similarity
