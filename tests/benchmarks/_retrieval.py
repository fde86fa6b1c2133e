"""Shared pieces of the retrieval benchmarks (imported by test_bench_retrieval.py and report.py).

Everything here computes the same thing from the same arena: for each queried Golem, the SPEC §4.1
four-factor score of every eligible entry of its slab, the served top-k, the salience shadow
top-k (§4.2), and the pool statistics of §13 (n eligible, sum of emotional factors, sum of
valences, best non-negative entry). Three ways:

- `kernel`: the engine (`golem.retrieval.retrieve`: int8 codes, exact integer dot products,
  float64 factors, one fused numba pass);
- `Idiomatic`: numpy as one would first write it (matmul, elementwise factors in float64,
  `argpartition`) on the stored vectors decoded once to float64 (what `Grimoire.emb` reads);
- `Tuned`: numpy as one would write it for speed: the vectors decoded once to float32, float32
  throughout, `out=` buffers reused, every term that does not depend on the query precomputed
  "at insert" (expiry time, the temporal and charge exponents, the unit PAD, the salience
  multiplier, the importance term, masks).

Both peers score the query as the kernel does (its int16 codes, decoded), so that they return the
kernel's results and are timed doing the same work. The floors: `StreamRead` (a plain numba read
of every byte the kernel's scan reads: the codes and the 13 columns, `scan_arrays`; one thread, or
over numba's threads), `Floor.sgemv` (the BLAS matrix-vector pass over float32
embeddings, what a float32 store must at least read, one per slab, batched for several Golems:
`np.matmul` on the stacked slabs) and `Floor.full_mm` (one BLAS matrix-matrix product of every
query with every entry of the arena).
"""
from __future__ import annotations

import math
import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # DESIGN: BLAS threads fight numba's on 2 cores

import numpy as np  # noqa: E402
from numba import njit, prange  # noqa: E402

from golem import retrieval as rt  # noqa: E402
from golem.grimoire import ARCHIVED, DAY_MS, Grimoire  # noqa: E402

HOUR_MS = 3_600_000.0
NOW_MS = 40 * DAY_MS
K = 8
SIZES = (10_000, 100_000, 1_000_000)
DIMS = (64, 384)
BATCH = 32


# ----------------------------------------------------------------------------- inputs
def build_arena(n_golems: int, cap: int, dim: int, seed: int = 0, tagged: float = 0.7) -> Grimoire:
    """A full arena of plausible entries (filled column-wise; same layout as Grimoire.insert makes).

    Mostly active entries, some stale/expired/archived, 70 % tagged with an emotional charge that
    has partly faded, 30 % of those reactivated, unit embeddings.
    """
    rng = np.random.default_rng(seed)
    gr = Grimoire(n_golems, cap, dim)
    n = n_golems * cap
    c = gr.cols
    gr.count[:] = cap
    chunk = 1 << 18
    for lo in range(0, n, chunk):  # chunked: no (n, d) float64 temporary
        e = rng.standard_normal((min(chunk, n - lo), dim), dtype=np.float32)
        e /= np.linalg.norm(e, axis=1, keepdims=True)
        gr.emb[lo:lo + e.shape[0]] = e
    c["id"][:] = np.arange(n)
    c["created_ms"][:] = NOW_MS - rng.integers(0, 30 * DAY_MS, n)
    c["last_access_ms"][:] = NOW_MS - rng.integers(0, 10 * DAY_MS, n)
    c["window_ms"][:] = rng.uniform(3, 60, n) * DAY_MS
    c["status"][:] = rng.choice(np.array([0, 1, ARCHIVED], dtype=np.int8), n, p=[0.85, 0.12, 0.03])
    c["importance"][:] = rng.uniform(0, 1, n)
    c["salience"][:] = rng.uniform(0, 1, n)
    c["confidence"][:] = rng.uniform(0.2, 1, n)
    tag = rng.uniform(size=n) < tagged
    c["has_tag"][:] = tag
    for k in "pad":
        c[k][:] = np.where(tag, rng.uniform(-1, 1, n), 0.0)
    c["i0"][:] = np.where(tag, rng.uniform(0.05, 1, n), 0.0)
    c["reactivated"][:] = tag & (rng.uniform(size=n) < 0.3)
    c["last_react_ms"][:] = np.where(c["reactivated"], NOW_MS - rng.integers(0, 5 * DAY_MS, n), -1)
    gr.refresh_scan()            # the columns were written directly
    return gr


def decoded_queries(q: np.ndarray, gr: Grimoire) -> np.ndarray:
    """The queries as the kernel scores them (their int16 codes over the scale), float64."""
    qc, qs = rt.query_codes(q, gr.codes.shape[1])
    return qc[:, :gr.dim] / qs[:, None]


def make_queries(b: int, dim: int, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((b, dim)).astype(np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    pad = rng.uniform(-1, 1, (b, 3))
    return q, pad


# ----------------------------------------------------------------------------- the engine
def kernel(gr: Grimoire, golems: np.ndarray, q: np.ndarray, pad: np.ndarray, now: int, prm,
           threads: int | None = 1) -> rt.RetrievalResult:
    """The engine's retrieval; threads=1 keeps it on the calling thread (the peers are
    single-threaded), None lets a large batch use all of numba's threads as the engine does."""
    if threads is None:
        return rt.retrieve(gr, golems, q, pad, now, prm)
    import numba
    saved = numba.get_num_threads()
    numba.set_num_threads(threads)
    try:
        return rt.retrieve(gr, golems, q, pad, now, prm)
    finally:
        numba.set_num_threads(saved)


# ----------------------------------------------------------------------------- idiomatic numpy
class Idiomatic:
    """First-draft numpy: a loop over Golems, vectorised over each slab, float64, fresh arrays."""

    def __init__(self, gr: Grimoire, prm):
        self.gr, self.prm = gr, prm
        self.emb = gr.emb[:].astype(np.float64)

    def __call__(self, golems, q, pad, now, min_conf: float = 0.0):
        gr, prm = self.gr, self.prm
        c = gr.cols
        q = decoded_queries(q, gr)
        b = len(golems)
        slots = np.full((b, K), -1, np.int64)
        shadow = np.full((b, K), -1, np.int64)
        pool = np.zeros((b, 5))
        w = prm.weights
        hl = prm.half_life_days * DAY_MS
        for i, g in enumerate(golems):
            sl = gr.slab(int(g))
            lo = sl.start
            sem = self.emb[sl] @ q[i]
            age = now - c["last_access_ms"][sl]
            elig = ((c["status"][sl] != ARCHIVED) & (age < 2.0 * c["window_ms"][sl])
                    & (c["confidence"][sl] >= min_conf))
            tmp = prm.temporal_base ** (age / HOUR_MS)
            tag = np.stack([c["p"][sl], c["a"][sl], c["d"][sl]], axis=1).astype(np.float64)
            pc = (tag @ pad[i] / (np.maximum(np.linalg.norm(tag, axis=1), 1e-8) * max(np.linalg.norm(pad[i]), 1e-8))
                  + 1.0) / 2.0
            i0 = c["i0"][sl].astype(np.float64)
            base = i0 * 2.0 ** (-(now - c["created_ms"][sl]) / hl)
            lr = c["last_react_ms"][sl]
            boost = np.where(c["reactivated"][sl] & (lr >= 0), prm.reactivation_boost * 2.0 ** (-(now - lr) / hl), 0.0)
            charge = np.clip(np.minimum(1.0, base + boost) / np.maximum(i0, 1e-8), 0.0, 1.0)
            emo = np.where(c["has_tag"][sl], 0.5 + (pc - 0.5) * charge if prm.charge_fading else pc, 0.5)
            score = w[0] * sem + w[1] * tmp + w[2] * c["importance"][sl] + w[3] * emo
            score = np.where(elig, score, -np.inf)
            sh = score * (1.0 + c["salience"][sl] * prm.salience_cap)
            served = sh if prm.live else score
            slots[i] = lo + _topk(served)
            shadow[i] = lo + _topk(sh)
            pv = np.where(c["has_tag"][sl], c["p"][sl], 0.0)
            nn = np.where(elig & (pv >= 0), score, -np.inf)
            best = int(np.argmax(nn))
            pool[i] = (elig.sum(), emo[elig].sum(), pv[elig].sum(), lo + best if nn[best] > -np.inf else -1, nn[best])
        return slots, shadow, pool


def _topk(score: np.ndarray) -> np.ndarray:
    """Indices of the k best, best first, ties by lower index (argpartition, then a small sort)."""
    idx = np.argpartition(score, -K)[-K:]
    return idx[np.lexsort((idx, -score[idx]))]


# ----------------------------------------------------------------------------- tuned numpy
class Tuned:
    """numpy written for speed: float32, out= buffers, query-independent terms precomputed at insert.

    Precomputed per entry (what a numpy engine would keep up to date at insert/touch time): alive
    (id valid, not archived), expiry time, the temporal exponent ln(base)/h * last_access, the
    charge exponents created/half-life and last_react/half-life and the reactivation gain rb/i0,
    the importance term w2*importance + w3/2, the salience multiplier 1 + cap*salience, the
    valence and the non-negative mask. Per query: one sgemv per slab (one batched np.matmul for
    several Golems), ~20 elementwise passes into reused buffers, argpartition per Golem.
    """

    def __init__(self, gr: Grimoire, prm, epoch_ms: int = 0):
        c = gr.cols
        self.gr, self.prm, self.epoch = gr, prm, epoch_ms
        w = prm.weights
        hl = prm.half_life_days * DAY_MS
        f32 = np.float32
        self.lnb_h = math.log(prm.temporal_base) / HOUR_MS
        self.emb = gr.emb[:]
        self.alive = (c["id"] >= 0) & (c["status"] != ARCHIVED)
        self.expire = c["last_access_ms"] + 2.0 * c["window_ms"]
        self.la_k = ((c["last_access_ms"] - epoch_ms) * self.lnb_h).astype(f32)
        self.cr_h = ((c["created_ms"] - epoch_ms) / hl).astype(f32)
        react = c["reactivated"] & (c["last_react_ms"] >= 0)
        self.lr_h = np.where(react, (c["last_react_ms"] - epoch_ms) / hl, -1e4).astype(f32)
        self.gain = np.where(react, prm.reactivation_boost / np.maximum(c["i0"], 1e-8), 0.0).astype(f32)
        self.up, self.ua, self.ud = (u.astype(f32) for u in gr.unit_pad(np.arange(c["id"].size)).T)
        self.impw = (w[2] * c["importance"].astype(np.float64) + w[3] * 0.5).astype(f32)
        self.salm = (1.0 + prm.salience_cap * c["salience"].astype(np.float64)).astype(f32)
        self.pv = np.where(c["has_tag"], c["p"], 0.0).astype(f32)
        self.neg = self.pv < 0
        self.conf = c["confidence"]
        n = gr.n_golems * gr.capacity
        self.buf = {k: np.empty(n, f32) for k in ("sem", "t1", "t2", "t3", "sc", "sh", "eligf")}
        self.elig = np.empty(n, bool)
        self.nelig = np.empty(n, bool)

    def __call__(self, golems, q, pad, now, min_conf: float = 0.0):
        """Score Golems `golems` (consecutive ids whose slabs tile [lo, hi)) against their queries."""
        gr, prm, B = self.gr, self.prm, self.buf
        w = prm.weights
        b = len(golems)
        cap = gr.capacity
        lo, hi = int(golems[0]) * cap, (int(golems[-1]) + 1) * cap
        assert hi - lo == b * cap, "Tuned scores whole consecutive slabs"
        sl = slice(lo, hi)
        f32 = np.float32
        sem, t1, t2, t3, sc, sh, eligf = (B[k][sl] for k in ("sem", "t1", "t2", "t3", "sc", "sh", "eligf"))
        elig, nelig = self.elig[sl], self.nelig[sl]
        q = decoded_queries(q, gr).astype(f32)
        E = self.emb[sl].reshape(b, cap, gr.dim)
        if b == 1:
            np.matmul(E[0], q[0], out=sem)
        else:
            np.matmul(E, q[:, :, None], out=sem.reshape(b, cap, 1))
        np.greater(self.expire[sl], now, out=elig)
        np.logical_and(elig, self.alive[sl], out=elig)
        if min_conf > 0:
            np.logical_and(elig, self.conf[sl] >= min_conf, out=elig)
        # temporal: exp(ln(base)/h * (now - last_access))
        np.subtract(f32((now - self.epoch) * self.lnb_h), self.la_k[sl], out=t1)
        np.exp(t1, out=t1)
        # charge: min(1, 2^((created - now)/hl) + gain * 2^((last_react - now)/hl))
        now_h = f32((now - self.epoch) / (prm.half_life_days * DAY_MS))
        np.subtract(self.cr_h[sl], now_h, out=t2)
        np.exp2(t2, out=t2)
        np.subtract(self.lr_h[sl], now_h, out=t3)
        np.exp2(t3, out=t3)
        np.multiply(t3, self.gain[sl], out=t3)
        np.add(t2, t3, out=t2)
        np.minimum(t2, f32(1.0), out=t2)
        # (w3/2) * cos(tag, pad) * charge, per Golem's PAD (broadcast over its slab)
        cur = pad / np.maximum(np.linalg.norm(pad, axis=1, keepdims=True), 1e-8) * (w[3] / 2.0)
        cp, ca, cd = (cur[:, j].astype(f32)[:, None] for j in range(3))
        t3b, shb = t3.reshape(b, cap), sh.reshape(b, cap)
        np.multiply(self.up[sl].reshape(b, cap), cp, out=t3b)
        np.multiply(self.ua[sl].reshape(b, cap), ca, out=shb)
        np.add(t3b, shb, out=t3b)
        np.multiply(self.ud[sl].reshape(b, cap), cd, out=shb)
        np.add(t3b, shb, out=t3b)
        if prm.charge_fading:
            np.multiply(t3, t2, out=t3)          # t3 = emotional term minus its neutral part
        # score = w0 sem + w1 temporal + (w2 importance + w3/2) + emotional term
        np.multiply(sem, f32(w[0]), out=sc)
        np.multiply(t1, f32(w[1]), out=t1)
        np.add(sc, t1, out=sc)
        np.add(sc, self.impw[sl], out=sc)
        np.add(sc, t3, out=sc)
        np.logical_not(elig, out=nelig)
        np.copyto(sc, f32(-np.inf), where=nelig)
        np.multiply(sc, self.salm[sl], out=sh)
        served = sh if prm.live else sc
        sh2, sv2 = sh.reshape(b, cap), served.reshape(b, cap)
        slots = np.empty((b, K), np.int64)
        shadow = np.empty((b, K), np.int64)
        for i in range(b):
            base = lo + i * cap
            slots[i] = base + _topk(sv2[i])
            shadow[i] = base + _topk(sh2[i])
        # pool statistics
        np.copyto(eligf, elig)
        pool = np.zeros((b, 5))
        el2, ef2, t32, pv2 = elig.reshape(b, cap), eligf.reshape(b, cap), t3.reshape(b, cap), self.pv[sl].reshape(b, cap)
        pool[:, 0] = np.count_nonzero(el2, axis=1)
        pool[:, 1] = 0.5 * pool[:, 0] + np.einsum("ij,ij->i", t32, ef2) / w[3]
        pool[:, 2] = np.einsum("ij,ij->i", pv2, ef2)
        np.copyto(t1, sc)
        np.copyto(t1, f32(-np.inf), where=self.neg[sl])
        t12 = t1.reshape(b, cap)
        best = np.argmax(t12, axis=1)
        pool[:, 4] = t12[np.arange(b), best]
        pool[:, 3] = np.where(pool[:, 4] > -np.inf, lo + np.arange(b) * cap + best, -1)
        return slots, shadow, pool


# ----------------------------------------------------------------------------- floors
class Floor:
    """The BLAS pass a float32 store must at least make: every float32 embedding of the queried
    slabs read once (the vectors decoded from the codes once, at construction)."""

    def __init__(self, gr: Grimoire, b: int):
        self.gr = gr
        self.emb = gr.emb[:]
        self.out = np.empty(gr.n_golems * gr.capacity, np.float32)
        self.full = None

    def sgemv(self, golems, q):
        """One BLAS matrix-vector product per slab (np.matmul on the stacked slabs for a batch)."""
        gr = self.gr
        cap, b = gr.capacity, len(golems)
        lo = int(golems[0]) * cap
        E = self.emb[lo:lo + b * cap]
        if b == 1:
            return np.matmul(E, q[0], out=self.out[:cap])
        return np.matmul(E.reshape(b, cap, gr.dim), q[:, :, None], out=self.out[:b * cap].reshape(b, cap, 1))

    def full_mm(self, golems, q):
        """One BLAS matrix-matrix product of all queries with all entries of the slabs (b x n)."""
        gr = self.gr
        cap, b = gr.capacity, len(golems)
        lo = int(golems[0]) * cap
        if self.full is None or self.full.shape != (b * cap, b):
            self.full = np.empty((b * cap, b), np.float32)
        return np.matmul(self.emb[lo:lo + b * cap], q.T, out=self.full)


#: the columns the kernel's scan reads for every entry (besides the codes and the scan terms;
#: confidence only under a confidence floor)
SCAN_COLUMNS = ("last_access_ms", "window_ms", "status", "importance", "salience", "has_tag", "p", "a", "d")


def scan_arrays(gr: Grimoire) -> list[np.ndarray]:
    """The arrays the kernel's scan reads, each as one row per slot: the codes, the scan terms
    (`Grimoire.norm2`, `recency`, `charge`) and `SCAN_COLUMNS`."""
    return [gr.codes, gr.norm2, gr.recency, gr.charge] + [gr.cols[k] for k in SCAN_COLUMNS]


def scan_bytes_per_entry(gr: Grimoire) -> int:
    return sum(a.itemsize * (a.shape[1] if a.ndim == 2 else 1) for a in scan_arrays(gr))


@njit(cache=True)
def _stream_u8(a):
    acc = np.uint64(0)
    n8 = a.size // 8
    w = a[:n8 * 8].view(np.uint64)
    for i in range(n8):
        acc ^= w[i]
    for i in range(n8 * 8, a.size):
        acc ^= np.uint64(a[i])
    return acc


@njit(cache=True, parallel=True)
def _stream_pieces(buf, starts, ends):
    """xor of each piece buf[starts[i]:ends[i]], the pieces over numba's threads."""
    acc = np.zeros(starts.size, np.uint64)
    for i in prange(starts.size):
        acc[i] = _stream_u8(buf[starts[i]:ends[i]])
    return acc


#: bytes per piece of the threaded stream read (a multiple of a line, many pieces per thread)
STREAM_PIECE = 1 << 16


def _root(a: np.ndarray) -> np.ndarray:
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


class StreamRead:
    """Plain read of every byte the kernel's scan reads (`scan_arrays`) for the given Golems'
    (consecutive) slabs, or the whole arena: the memory-bandwidth ceiling of a retrieval. Set up
    once, so that a timed call only reads. `one()` on one thread; `threads()` over numba's
    threads: each array's bytes cut into `piece`-byte pieces (a multiple of 8), which one
    parallel call spreads over the threads. The pieces are windows of the one buffer the
    Grimoire's slot arrays share (`grimoire.slot_arrays`), so the threads share no array object.
    Read slab by slab, thirteen short runs a Golem as the kernel walks them, the same bytes take
    far longer (on the Zen 4, 976 slabs of 1,024, two threads: 5.2-5.8 ms, 5.9-6.3 through a
    list of the arrays, whose reference counts the threads share, against 2.9-3.8 ms this way):
    that is the kernel's layout, not the memory's speed."""

    def __init__(self, gr: Grimoire, golems=None, piece: int = STREAM_PIECE):
        cap = gr.capacity
        lo, b = (0, gr.n_golems) if golems is None else (int(golems[0]) * cap, len(golems))
        arrays = scan_arrays(gr)
        flat = [a.reshape(-1).view(np.uint8) for a in arrays]
        widths = [a.itemsize * (a.shape[1] if a.ndim == 2 else 1) for a in arrays]
        self.windows = [a[lo * w:(lo + b * cap) * w] for a, w in zip(flat, widths)]
        base = _root(flat[0])
        if not all(_root(a) is base for a in flat) or not base.flags.c_contiguous:
            raise ValueError("the scan arrays are not views into one buffer (grimoire.slot_arrays)")
        self.buf = base.reshape(-1).view(np.uint8)
        starts = [np.arange(w.ctypes.data - self.buf.ctypes.data, w.ctypes.data - self.buf.ctypes.data + w.size,
                            piece, dtype=np.int64) for w in self.windows]
        self.starts = np.concatenate(starts)
        self.ends = np.concatenate([np.minimum(x + piece, x[0] + w.size) for x, w in zip(starts, self.windows)])

    def one(self) -> int:
        acc = 0
        for w in self.windows:
            acc ^= int(_stream_u8(w))
        return acc

    def threads(self) -> int:
        return int(np.bitwise_xor.reduce(_stream_pieces(self.buf, self.starts, self.ends)))


# ----------------------------------------------------------------------------- checks and timing
def same_results(res: rt.RetrievalResult, other, *, tol_pool: float = 1e-3, near_ties: float = 0.0) -> None:
    """The served top-k, the shadow top-k and the pool statistics of a peer match the kernel's.

    `near_ties`: a float32 peer may order two entries whose scores differ by less than this the
    other way round (with many queries, some row has such a pair); its rows must still hold the
    same entries, and the kernel's served scores where the orders differ must lie within it."""
    slots, shadow, pool = other
    if near_ties:
        for mine, theirs in ((res.slots, slots), (res.shadow, shadow)):
            assert np.array_equal(np.sort(mine, axis=1), np.sort(theirs, axis=1)), (mine, theirs)
        off = res.slots != slots
        for i in np.flatnonzero(off.any(axis=1)):
            sc = res.scores[i][off[i]]
            assert sc.max() - sc.min() < near_ties, (res.scores[i], res.slots[i], slots[i])
    else:
        assert np.array_equal(res.slots, slots), (res.slots, slots)
        assert np.array_equal(res.shadow, shadow), (res.shadow, shadow)
    assert np.array_equal(res.pool[:, 0], pool[:, 0])
    scale = np.maximum(res.pool[:, :1], 1.0)  # sums of n terms in [-1, 1]: compare per term
    assert np.all(np.abs(res.pool[:, 1:3] - pool[:, 1:3]) <= tol_pool * scale), (res.pool, pool)
    assert np.array_equal(res.pool[:, 3], pool[:, 3])


def alternate(fns: dict, rounds: int = 9, min_time: float = 0.0, stat: str = "min",
              clock=time.thread_time) -> dict[str, float]:
    """Seconds per call of each callable, measured round-robin (the host's bandwidth flips between
    modes, so a ratio is only meaningful between measurements taken side by side). `stat` is
    "min" (the least disturbed round) or "median". The default clock is this thread's CPU time:
    everything measured is single-threaded, and CPU time does not count the time other processes
    on a shared machine take the core (pass clock=time.perf_counter for wall time)."""
    for f in fns.values():
        f()
    times = {k: [] for k in fns}
    r = 0
    t_start = time.perf_counter()
    while r < rounds or time.perf_counter() - t_start < min_time:
        for k, f in fns.items():
            t = clock()
            f()
            times[k].append(clock() - t)
        r += 1
    agg = np.min if stat == "min" else np.median
    return {k: float(agg(v)) for k, v in times.items()}
