"""numba kernels for the hot loops; each has a scalar reference it is tested against.

`retrieve_batch` is the four-factor retrieval of SPEC §4.1 fused into one pass over each Golem's
slab: eligibility, semantic factor, temporal decay, charge-faded emotional factor, the served
top-k, the salience-ranked shadow top-k (§4.2), the eligible pool's statistics (§13) and the best
non-negative entry for the anti-rumination guard (§4.3), and the pool's best semantic match (the
novelty test of §5). With `live` the served ranking is the
salience-multiplied one (and equals the shadow).

How it is fast and still exact (docs/performance.md has the measurements and the rejected variants):

- The scan reads 110 bytes per entry at d = 64: 64 of int8 codes, 34 of columns (status,
  last_access_ms, window_ms as float32, has_tag, p, a, d, importance, salience) and 12 of scan terms the
  Grimoire keeps beside them (`Grimoire.refresh_scan`): norm2, the codes' squared norm (int32), and
  recency and charge (float32, `recency_term`, `charge_term`); 4 more when a confidence floor is
  asked for.
- The scan terms take the exponentials out of the scan. temporal_base ** hours since the last
  access is recency * tau, and the charge left min(1, charge * gamma), where tau and gamma are one
  exp2 a query (`golem.retrieval.query_terms`): the exponents count from an epoch (the
  Grimoire's), so a decay common to all entries factors out. An entry's terms change only when
  it is written or recalled, and those writes recompute them. Stored as float32 they are within
  2^-24 of the formulas (what that does to scores: docs/performance.md).
- The semantic factor is the cosine of the stored codes (`golem.grimoire.quantise`) with the
  query rounded to int16 codes (`query_codes`): sem = dot / (scale * sqrt(max(norm2, 1))), where
  dot = sum codes x query codes and norm2 = sum codes^2 are integers, exact in int32 whatever the
  order of the additions (|dot| <= d * 127 * `query_max(d)` < 2^31). So SIMD width, blocking and
  threads cannot change a bit, and `golem.retrieval.semantic` (the scalar reference, Python
  integers) gives the same float64. ROWS rows at a time (`_dots`): each row's codes widened to
  int16 and multiplied in pairs with the query's (`pmaddwd`), then the rows' lane sums folded
  together, so no row pays a horizontal sum; four rows keep the accumulators in AVX2's sixteen
  registers.
- Pass 1 computes the integer dot products of `SUPER` entries at once (a whole slab up to
  capacity 4,096), so the codes stream from memory in one run rather than each block's codes
  waiting on memory behind the arithmetic of the block before (on a Zen 4 EPYC the dot products
  of a 1,000 x 1,024 arena stream in 2.6 ms alone; a block at a time they take ~4.7 ms), each
  row's code line prefetched `PREFETCH_ROWS` rows ahead (the hardware prefetchers stop at every
  4 KB page, which the codes cross every 64 rows at d = 64).
  Then the slab is walked in blocks of `BLOCK` entries: pass 2 eligibility, the factors and the
  scores of every entry in one branch-free vectorised loop (an ineligible entry gets score -inf),
  pass 3 the pool's sums, count, best semantic match and best non-negative entry (four
  interleaved partial sums and maxima), then the two top-k lists: one vectorised loop flags the
  entries that can enter either list (above its k-th at the block's start and, while the list is
  still filling, the slab's first block, not below the k-th best of the block's GROUP group
  maxima: each maximum is a distinct entry, so an entry below that bound has k better ones in the
  block), and the walk visits the flagged entries only: eight flags read as one 64-bit word, its
  set bits taken lowest first. Each visited entry is tested again against the lists as they are
  then (a k-th only rises), so the flags only skip entries that could not enter. Entries are
  offered in slot order, so ties keep the earlier slot. The block's scratch lives on the stack
  (L1-resident, and provably distinct from the inputs, so the compiler vectorises without runtime
  alias checks). The slab is read once. The served entries' four factors are computed again
  once the slab is scanned, k of them, by pass 2's helpers on the same stored values (the dot
  product an exact integer again), rather than stored for every entry and moved at every
  insertion: the same bits.
- The emotional factor: 0.5 untagged, else `padm.pad_cosine_safe(tag, mood)` faded by the charge
  left (`padm.faded_emotional_factor`), their operations in their order (`_emotional`).
- `golem.retrieval.entry_factors` and `reference_retrieve` (Python) and `served_factors_batch`
  compute the same operations on the same stored terms, so kernel and reference agree bit for
  bit, scores included.
- Pool sums (emotional factor, valence) are four interleaved partial sums per block (j mod 4),
  combined pairwise and added block by block: a fixed order, so deterministic on every machine;
  they agree with a sequential sum to ~1e-15 relative.
- `retrieve_batch` is `threaded`: over numba's threads it runs the same function on runs of rows
  (prange over `RUNS` runs: each Golem reads its own slab and writes its own rows, so results do not
  depend on threads or runs).
- Every slot below a slab's count holds an entry (`golem.grimoire`: entries are replaced, never
  removed), so the scan does not read the id column; untagged entries get the emotional factor
  0.5 and valence 0 whatever their p, a, d.

`exp2` is a branch-free 2**x (degree-13 Taylor polynomial by FMA) within 2 ulp of libm, the same
bits on every machine: the scan terms and a query's tau and gamma are made with it.

`threaded` compiles a prange kernel twice: over numba's threads and on the calling thread. A call
chooses by the work it has (`Threaded.on`): waking the threads costs ~0.1-0.2 ms a call (more
while the other core is busy), far more than a dozen Golems' rows take.

`np_sum` is numpy's summation order for kernels elsewhere (the curator's, the appraisal's) that
replace a numpy sum and must give its bits.
"""
from __future__ import annotations

import types as pytypes

import numba
import numpy as np
from llvmlite import binding as llb
from llvmlite import ir
from numba import carray, njit, prange
from numba.core import cgutils, config, types
from numba.cpython.unsafe.numbers import trailing_zeros
from numba.extending import intrinsic

# pool statistics columns
POOL_N, POOL_SUM_EMO, POOL_SUM_VAL, POOL_BEST_NONNEG, POOL_BEST_NONNEG_SCORE, POOL_BEST_SEMANTIC = range(6)
POOL_COLUMNS = 6

#: entries per block (scratch: 6 float64, an int32 and two byte arrays of BLOCK = 13.5 KB, L1-resident)
BLOCK = 256
#: entries whose dot products pass 1 computes in one run (a multiple of BLOCK; 16 KB of int32 on
#: the stack): a whole slab up to this capacity
SUPER = 4096
#: rows whose dot products `_dots` computes together (4: the accumulators stay in AVX2's 16 registers)
ROWS = 4
#: code rows `_dots` fetches ahead of those it multiplies (8 KB at d = 64: one thread 10.07 against 10.60 ms,
#: two 5.58 against 5.82, on the bench arena; 64, 96, 192 and 256 rows gained less)
PREFETCH_ROWS = 128
#: int16 lanes per pmaddwd step (one 256-bit vector)
LANES = 16
#: int8 codes per iteration of `_dots` (two steps; code rows are padded to a multiple of it)
CHUNK = 32
#: interleaved groups whose maxima bound a block's k-th best while a top-k list is filling
GROUP = 32
HOUR_MS = 3_600_000.0
#: runs of rows of near-equal size the retrieval kernel splits a batch into (`_retrieve_rows`):
#: enough for numba's static schedule to give each of 2, 3, 4, 6 or 8 threads an even share, few
#: enough that a run's calls cost nothing (the thread count itself, read in a kernel, would keep
#: numba from caching it)
RUNS = 64
#: a threaded kernel's call with less work than this (entries scanned or written, cells read) runs
#: on the calling thread: numba's threads cost more to wake than they save below it
PARALLEL_MIN_WORK = 1 << 14


class Threaded:
    """A prange kernel compiled twice: `parallel` over numba's threads, `serial` on the calling
    thread. Its rows touch only their own data and nothing is summed across rows, so both give the
    same bits (a run with every call on either is byte-identical: tests/test_kernels.py). Calling
    it runs the parallel one; `on(work)` picks by the call's work."""

    def __init__(self, parallel, serial):
        self.parallel, self.serial = parallel, serial
        self.__doc__, self.__name__ = parallel.__doc__, parallel.__name__

    def __call__(self, *args):
        return self.parallel(*args)

    def on(self, work: int):
        """The compiled kernel for a call of this much work."""
        return self.parallel if work >= PARALLEL_MIN_WORK and numba.get_num_threads() > 1 else self.serial


def threaded(**opts):
    """`@njit(parallel=True, **opts)` and the same function compiled without threads, as a
    `Threaded`. The serial copy has its own name, so numba caches the two apart."""
    def wrap(fn):
        serial = pytypes.FunctionType(fn.__code__, fn.__globals__, fn.__name__ + "_serial", fn.__defaults__,
                                      fn.__closure__)
        serial.__qualname__ = fn.__qualname__ + "_serial"
        return Threaded(njit(parallel=True, **opts)(fn), njit(**opts)(serial))
    return wrap


def query_max(stride: int) -> int:
    """The largest query code for rows of `stride` codes: int16, and small enough that a dot
    product of 127-codes cannot leave int32 (d * 127 * q < 2^31; 32,767 for d <= 516)."""
    return int(min(32767, (2**31 - 1) // (127 * max(stride, 1))))


# ----------------------------------------------------------------------------- intrinsics
def _host_features() -> set[str]:
    feats = config.CPU_FEATURES if config.CPU_FEATURES is not None else llb.get_host_cpu_features().flatten()
    return set(feats.split(","))


#: pmaddwd on 256-bit vectors where the CPU has AVX2 (AVX-512 CPUs have it too), else plain vector
#: IR (the same integers every way)
_FEATURES = _host_features() if not config.CPU_NAME else set()
_PMADD = "avx2" if "+avx2" in _FEATURES else "generic"


def _i32s(*idx):
    return ir.Constant(ir.VectorType(ir.IntType(32), len(idx)), list(idx))


def _pmadd(builder, a, b, how=None):
    """<16 x i16> a, b -> <8 x i32>: lane l = a[2l] * b[2l] + a[2l+1] * b[2l+1] (exact)."""
    how = how or _PMADD
    v16, v8 = ir.VectorType(ir.IntType(16), LANES), ir.VectorType(ir.IntType(32), LANES // 2)
    if how == "avx2":
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(v8, [v16, v16]), "llvm.x86.avx2.pmadd.wd")
        return builder.call(fn, [a, b])
    w = ir.VectorType(ir.IntType(32), LANES)
    prod = builder.mul(builder.sext(a, w), builder.sext(b, w))
    return builder.add(builder.shuffle_vector(prod, prod, _i32s(*range(0, LANES, 2))),
                       builder.shuffle_vector(prod, prod, _i32s(*range(1, LANES, 2))))


def _fold(builder, vs):
    """ROWS vectors of 8 int32 lanes -> one <ROWS x i32> whose lane r is the sum of vs[r]'s lanes:
    adjacent lanes are added level by level, pairs of vectors at a time (so adjacent lanes always
    belong to the same row), and the last level folds the vector onto itself."""
    half = LANES // 2
    ev, od = _i32s(*range(0, 2 * half, 2)), _i32s(*range(1, 2 * half, 2))
    while len(vs) > 1:
        vs = [builder.add(builder.shuffle_vector(x, y, ev), builder.shuffle_vector(x, y, od))
              for x, y in zip(vs[0::2], vs[1::2])]
    v = vs[0]
    n = half                     # lanes: ROWS groups of n // ROWS partial sums each
    while n > ROWS:
        n //= 2
        v = builder.add(builder.shuffle_vector(v, v, _i32s(*range(0, 2 * n, 2))),
                        builder.shuffle_vector(v, v, _i32s(*range(1, 2 * n, 2))))
    return v


def _dots_intrinsic(how=None):
    @intrinsic
    def dots(typingctx, codes, row0, qcodes, qrow, dbuf, j0):
        """dbuf[j0 + r] = sum_t codes[row0 + r, t] * qcodes[qrow, t] for r < ROWS, in int32 (exact).
        codes: C-contiguous (rows, stride) int8, qcodes (queries, stride) int16, stride a
        positive multiple of CHUNK; rows row0 .. row0 + ROWS - 1 must exist; dbuf an int32 buffer."""
        if not (isinstance(codes, types.Array) and codes.dtype == types.int8 and codes.ndim == 2 and codes.layout == "C"
                and isinstance(qcodes, types.Array) and qcodes.dtype == types.int16 and qcodes.ndim == 2):
            return None
        sig = types.void(codes, types.intp, qcodes, types.intp, dbuf, types.intp)

        def codegen(context, builder, signature, args):
            c_arr = context.make_array(signature.args[0])(context, builder, args[0])
            q_arr = context.make_array(signature.args[2])(context, builder, args[2])
            d_arr = context.make_array(signature.args[4])(context, builder, args[4])
            row0, qrow, j0 = args[1], args[3], args[5]
            intp = context.get_value_type(types.intp)
            stride = builder.extract_value(c_arr.shape, 1)
            i8c, i16c = ir.VectorType(ir.IntType(8), LANES), ir.VectorType(ir.IntType(16), LANES)
            v8 = ir.VectorType(ir.IntType(32), LANES // 2)
            zero = ir.Constant(v8, [0] * (LANES // 2))
            cbase = builder.gep(c_arr.data, [builder.mul(row0, stride)])
            qbase = builder.gep(q_arr.data, [builder.mul(qrow, stride)])

            def step(off, acc):
                qv = builder.load(builder.bitcast(builder.gep(qbase, [off]), i16c.as_pointer()), align=2)
                out = []
                for r in range(ROWS):
                    at = builder.add(builder.mul(ir.Constant(intp, r), stride), off)
                    cv = builder.sext(builder.load(builder.bitcast(builder.gep(cbase, [at]), i8c.as_pointer()), align=1), i16c)
                    out.append(builder.add(acc[r], _pmadd(builder, cv, qv, how)))
                return out

            # the code rows PREFETCH_ROWS ahead, one line each: the hardware prefetchers stop at each 4 KB
            # page, every 64 rows here; a prefetch past the arena's end is harmless (it never faults)
            i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
            prefetch = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]), "llvm.prefetch.p0i8")
            for r in range(ROWS):
                ahead = builder.gep(cbase, [builder.mul(ir.Constant(intp, PREFETCH_ROWS + r), stride)])
                builder.call(prefetch, [builder.bitcast(ahead, i8p), ir.Constant(i32, 0), ir.Constant(i32, 3),
                                        ir.Constant(i32, 1)])    # read, keep in all levels, data
            entry = builder.block
            loop = builder.append_basic_block("dots.loop")
            done = builder.append_basic_block("dots.done")
            builder.branch(loop)
            builder.position_at_end(loop)      # CHUNK codes an iteration: two steps of LANES
            off = builder.phi(intp)
            off.add_incoming(ir.Constant(intp, 0), entry)
            acc = [builder.phi(v8) for _ in range(ROWS)]
            for a in acc:
                a.add_incoming(zero, entry)
            mid = step(off, acc)
            out = step(builder.add(off, ir.Constant(intp, LANES)), mid)
            nxt = builder.add(off, ir.Constant(intp, CHUNK))
            off.add_incoming(nxt, builder.block)
            for a, v in zip(acc, out):
                a.add_incoming(v, builder.block)
            builder.cbranch(builder.icmp_signed("<", nxt, stride), loop, done)
            builder.position_at_end(done)
            res = _fold(builder, out)
            builder.store(res, builder.bitcast(builder.gep(d_arr.data, [j0]), res.type.as_pointer()), align=4)
            return context.get_dummy_value()

        return sig, codegen
    return dots


_dots = _dots_intrinsic()
#: the same products in plain vector IR, whatever the CPU (tests compare it with `_dots`)
_dots_generic = _dots_intrinsic("generic")


@intrinsic
def _f64_from_bits(typingctx, bits):
    """Reinterpret an int64 bit pattern as a float64 (vectorisable, unlike ldexp)."""
    if bits != types.int64:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())

    return types.float64(types.int64), codegen


@intrinsic
def _fma(typingctx, a, b, c):
    """a * b + c with one rounding (llvm.fma: one instruction where the CPU has FMA; vectorises)."""
    if not (a == types.float64 and b == types.float64 and c == types.float64):
        return None

    def codegen(context, builder, signature, args):
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.DoubleType(), [ir.DoubleType()] * 3),
                                            "llvm.fma.f64")
        return builder.call(fn, args)

    return types.float64(types.float64, types.float64, types.float64), codegen


def _stack_block(dtype, size: int = BLOCK):
    """An intrinsic returning a pointer to `size` elements of `dtype` on the kernel's stack.

    Scratch on the stack is memory the compiler can prove distinct from every input array, so the
    block loops vectorise without runtime alias checks (heap scratch from np.empty is opaque).
    """
    nb_type = {np.float64: types.float64, np.int32: types.int32, np.bool_: types.boolean, np.uint8: types.uint8}[dtype]

    @intrinsic
    def impl(typingctx):
        def codegen(context, builder, signature, args):
            ty = context.get_data_type(nb_type)
            ptr = cgutils.alloca_once(builder, ty, size=ir.Constant(ir.IntType(64), size))
            ptr.align = 64          # vector stores never straddle a cache line
            return ptr
        return types.CPointer(nb_type)(), codegen
    return impl


_stack_f64 = _stack_block(np.float64)
_stack_i32 = _stack_block(np.int32)
_stack_bool = _stack_block(np.bool_)
_stack_u8 = _stack_block(np.uint8)
_stack_i32_super = _stack_block(np.int32, SUPER)
_stack_f64_group = _stack_block(np.float64, GROUP)
_stack_f64_lanes = _stack_block(np.float64, 8)


# ----------------------------------------------------------------------------- scalar helpers
# 2^f = e^(f ln 2) on |f| <= 1/2: Taylor coefficients ln2^i / i!, i = 0..13 (truncation < 1e-17),
# written out (not computed at import) so no platform's libm can change a bit of them
_EXP2_C = (
    1.0,
    0.6931471805599453,
    0.2402265069591007,
    0.055504108664821576,
    0.009618129107628477,
    0.0013333558146428441,
    0.00015403530393381606,
    1.5252733804059838e-05,
    1.3215486790144305e-06,
    1.0178086009239696e-07,
    7.054911620801121e-09,
    4.44553827187081e-10,
    2.5678435993488196e-11,
    1.3691488853904124e-12,
)
_C0, _C1, _C2, _C3, _C4, _C5, _C6, _C7, _C8, _C9, _C10, _C11, _C12, _C13 = _EXP2_C


@njit(cache=True, inline="always", error_model="numpy")
def exp2(x):
    """2 ** x for finite x, within 2 ulp of libm; branch-free so loops over it vectorise.

    x is clamped to [-1022, 1023] (2^-1022 stands for anything smaller: an absolute error below
    1e-307). exp2(0) is exactly 1.
    """
    x = min(max(x, -1022.0), 1023.0)
    n = np.floor(x + 0.5)
    f = x - n
    p = _C13
    p = _fma(p, f, _C12)
    p = _fma(p, f, _C11)
    p = _fma(p, f, _C10)
    p = _fma(p, f, _C9)
    p = _fma(p, f, _C8)
    p = _fma(p, f, _C7)
    p = _fma(p, f, _C6)
    p = _fma(p, f, _C5)
    p = _fma(p, f, _C4)
    p = _fma(p, f, _C3)
    p = _fma(p, f, _C2)
    p = _fma(p, f, _C1)
    p = _fma(p, f, _C0)
    return p * _f64_from_bits((np.int64(n) + np.int64(1023)) << np.int64(52))


@njit(cache=True)
def exp2_array(x, out):
    """exp2 over an array (for tests and benchmarks)."""
    for i in range(x.size):
        out[i] = exp2(x[i])
    return out


@njit(cache=True, inline="always")
def _dots_scalar(codes, row0, rows, qcodes, qrow, dbuf, j0):
    """`_dots` for the last rows of the arena (fewer than ROWS left), one row at a time."""
    stride = codes.shape[1]
    for r in range(rows):
        dt = 0
        for t in range(stride):
            dt += np.int64(codes[row0 + r, t]) * np.int64(qcodes[qrow, t])
        dbuf[j0 + r] = dt


@njit(cache=True, inline="always")
def _semantic(dot, n2, qscale):
    """The semantic factor from the integer dot product and squared norm (module doc)."""
    return np.float64(dot) / (qscale * np.sqrt(np.float64(max(n2, 1))))


@njit(cache=True)
def dots_rows(codes, row0, qcodes, qrow, generic=False):
    """The dot products of rows row0 .. row0 + ROWS - 1 with query row qrow by `_dots` (or its
    plain-IR twin) and by the scalar loop (for tests): (vector, scalar)."""
    dv = np.zeros(ROWS, np.int32)
    ds = np.zeros(ROWS, np.int32)
    if generic:
        _dots_generic(codes, row0, qcodes, qrow, dv, 0)
    else:
        _dots(codes, row0, qcodes, qrow, dv, 0)
    _dots_scalar(codes, row0, ROWS, qcodes, qrow, ds, 0)
    return dv, ds


@njit(cache=True, inline="always")
def _insert(slots, scores, k, slot, score):
    """Keep (slots, scores) sorted by score descending, ties by earlier slot; size k. Entries are
    offered in slot order, so an equal score never displaces an earlier slot."""
    if score <= scores[k - 1]:
        return -1
    j = k - 1
    while j > 0 and scores[j - 1] < score:
        slots[j] = slots[j - 1]
        scores[j] = scores[j - 1]
        j -= 1
    slots[j] = slot
    scores[j] = score
    return j


# ----------------------------------------------------------------------------- the scan terms
#: float32's smallest normal number: a scan term below it is stored as 0, so the scan never reads
#: a subnormal (which some CPUs convert at a hundred times the cost); the factor it stands for is
#: below 1e-38 then
F32_TINY = 2.0 ** -126
F32_MAX = 3.4028234663852886e38


#: 1.5 * 2^52 and its bits (`_i64_f64`)
_MAGIC = 6755399441055744.0
_MAGIC_BITS = np.int64(0x4338000000000000)


@njit(cache=True, inline="always", error_model="numpy")
def _f32_term(x):
    return np.float32(min(x, F32_MAX)) if x >= F32_TINY else np.float32(0.0)


@njit(cache=True, inline="always", error_model="numpy")
def recency_term(last_access_ms, epoch_ms, lg2_per_ms):
    """An entry's stored recency, float32: 2^(-lg2_per_ms (last_access - epoch)), lg2_per_ms =
    log2(temporal_base) / HOUR_MS. A retrieval at `now` multiplies it by 2^(lg2_per_ms (now -
    epoch)): temporal_base ** hours since the last access, with one exp2 a query, not an entry."""
    return _f32_term(exp2(-lg2_per_ms * np.float64(last_access_ms - epoch_ms)))


@njit(cache=True, inline="always", error_model="numpy")
def charge_term(i0, created_ms, reactivated, last_react_ms, epoch_ms, inv_hl, boost):
    """An entry's stored charge, float32: (i0 2^((created - epoch) / H) + boost 2^((last_react -
    epoch) / H) if reactivated with a time) / max(i0, 1e-8), inv_hl = 1 / H. Times
    2^((epoch - now) / H) and capped at 1 it is SPEC §4.1's charge, intensity_at(now) / max(i0,
    1e-8) clipped to [0, 1] (the min(1, .) of §2.6 folds into that cap, since i0 <= 1)."""
    i = np.float64(i0)
    x = i * exp2(np.float64(created_ms - epoch_ms) * inv_hl)
    if reactivated and last_react_ms >= 0:
        x = x + boost * exp2(np.float64(last_react_ms - epoch_ms) * inv_hl)
    return _f32_term(x / max(i, 1e-8))


@njit(cache=True, inline="always")
def _scan_terms_at(s, codes, last_access_ms, i0, created_ms, reactivated, last_react_ms, epoch_ms, lg2_per_ms,
                   inv_hl, boost, norm2, recency, charge):
    n2 = np.int32(0)
    for t in range(codes.shape[1]):
        c = np.int32(codes[s, t])
        n2 += c * c
    norm2[s] = n2
    recency[s] = recency_term(last_access_ms[s], epoch_ms, lg2_per_ms)
    charge[s] = charge_term(i0[s], created_ms[s], reactivated[s], last_react_ms[s], epoch_ms, inv_hl, boost)


@threaded(cache=True)
def scan_terms(slots, codes, last_access_ms, i0, created_ms, reactivated, last_react_ms, epoch_ms, lg2_per_ms,
               inv_hl, boost, norm2, recency, charge):
    """The scan terms (norm2, recency, charge) of the entries at `slots`, from their columns, over
    numba's threads (a Clade's push wave writes up to a million scattered slots at once)."""
    for t in prange(slots.size):
        _scan_terms_at(slots[t], codes, last_access_ms, i0, created_ms, reactivated, last_react_ms, epoch_ms,
                       lg2_per_ms, inv_hl, boost, norm2, recency, charge)


@threaded(cache=True)
def scan_terms_all(codes, last_access_ms, i0, created_ms, reactivated, last_react_ms, epoch_ms, lg2_per_ms,
                   inv_hl, boost, norm2, recency, charge):
    """`scan_terms` of every slot (a new epoch, new constants, a loaded state), without an index array."""
    for s in prange(norm2.size):
        _scan_terms_at(s, codes, last_access_ms, i0, created_ms, reactivated, last_react_ms, epoch_ms,
                       lg2_per_ms, inv_hl, boost, norm2, recency, charge)


@threaded(cache=True)
def scan_terms_stale(slots, codes, last_access_ms, i0, created_ms, reactivated, last_react_ms, epoch_ms, lg2_per_ms,
                     inv_hl, boost, norm2, recency, charge):
    """How many of `slots` hold scan terms other than their columns give now (0: all current);
    `scan_terms` without writing."""
    bad = 0
    for t in prange(slots.size):
        s = slots[t]
        n2 = np.int32(0)
        for u in range(codes.shape[1]):
            c = np.int32(codes[s, u])
            n2 += c * c
        ok = ((norm2[s] == n2) & (recency[s] == recency_term(last_access_ms[s], epoch_ms, lg2_per_ms))
              & (charge[s] == charge_term(i0[s], created_ms[s], reactivated[s], last_react_ms[s], epoch_ms, inv_hl,
                                          boost)))
        bad += not ok
    return bad


# ----------------------------------------------------------------------------- retrieval
@njit(cache=True, inline="always")
def _tag_valence(s, has_tag, p):
    """A served cell's (tagged, valence): has_tag[s] (False for an empty cell, s = -1) and p[s]
    where tagged, else 0 (exact in float64; stored back in p's dtype by the caller)."""
    tg = s >= 0 and has_tag[max(s, 0)]
    return tg, np.float64(p[s]) if tg else 0.0


@njit(cache=True, inline="always")
def _i64_f64(x):
    """float64(x) for |x| < 2^51 (ages in ms: 71,000 years), exactly as a conversion instruction
    gives it, in two SIMD instructions: AVX2 has no vector int64 -> float64 conversion, and LLVM
    converts such a vector one lane at a time."""
    return _f64_from_bits(x + _MAGIC_BITS) - _MAGIC


@njit(cache=True, inline="always", error_model="numpy")
def _temporal(age_ms, recency, tau):
    """The temporal factor from the stored recency (`recency_term`) and the query's tau: 1 at the
    moment of the last access (0.995^0, whatever float32's rounding of recency), never above.
    Branch-free, so the scan's loop loads recency unconditionally (a conditional load becomes a
    masked load, slow on some CPUs)."""
    return max(min(1.0, np.float64(recency) * tau), 1.0 if age_ms == 0.0 else 0.0)


@njit(cache=True, inline="always", error_model="numpy")
def _emotional(tagged, p, a, d, cp, ca, cd, cn, charge, gamma, fading):
    """The emotional factor (SPEC §4.1) of an entry, `padm.pad_cosine_safe` and
    `padm.faded_emotional_factor` operation for operation (cn is the mood's norm, floored at 1e-8):
    0.5 untagged; tagged, the PAD cosine mapped to [0, 1], pulled toward 0.5 by the charge left,
    min(1, charge * gamma) (`charge_term`), when `fading`. Both values are computed and one is
    selected, so the scan's loop stays branch-free and loads every column unconditionally; the
    columns are finite."""
    tp, ta, td = np.float64(p), np.float64(a), np.float64(d)
    pc = ((tp * cp + ta * ca + td * cd) / (max(np.sqrt(tp * tp + ta * ta + td * td), 1e-8) * cn) + 1.0) / 2.0
    faded = 0.5 + (pc - 0.5) * min(1.0, np.float64(charge) * gamma)
    emo = faded if fading else pc
    return emo if tagged else 0.5


@njit(cache=True, inline="always", error_model="numpy")
def _factors_at(s, qrow, codes, qcodes, qs, norm2, now_ms, last_access_ms, recency, tau, importance, has_tag, p, a, d,
                cp, ca, cd, cn, charge, gamma, fading, dbuf, out):
    """out[:4] = entry s's four factors for query row qrow, by pass 2's operations on the same stored
    values (the same bits; the dot product an exact integer again, into dbuf[0])."""
    _dots_scalar(codes, s, 1, qcodes, qrow, dbuf, 0)
    out[0] = _semantic(dbuf[0], norm2[s], qs)
    out[1] = _temporal(_i64_f64(now_ms - last_access_ms[s]), recency[s], tau)
    out[2] = np.float64(importance[s])
    out[3] = _emotional(has_tag[s], p[s], a[s], d[s], cp, ca, cd, cn, charge[s], gamma, fading)


@njit(cache=True, inline="always")
def _kth(vals, k, tmp):
    """The k-th largest of vals (-inf with fewer than k finite ones)."""
    for i in range(k):
        tmp[i] = -np.inf
    for i in range(vals.size):
        v = vals[i]
        if v > tmp[k - 1]:
            j = k - 1
            while j > 0 and tmp[j - 1] < v:
                tmp[j] = tmp[j - 1]
                j -= 1
            tmp[j] = v
    return tmp[k - 1]


@njit(cache=True, inline="always")
def _lane_maxima(b, m, acc):
    """acc[u] = the maximum of b[u], b[u + L], ... over the whole rows of L = acc.size entries in
    b[:m]. No NaN reaches it, so any order gives the same value; L running maxima selected by
    comparison vectorise, where one chain of scalar maxima (even under fast-math) does not."""
    lanes = acc.size
    for u in range(lanes):
        acc[u] = b[u]
    for j in range(lanes, m - m % lanes, lanes):
        for u in range(lanes):
            x = b[j + u]
            acc[u] = x if x > acc[u] else acc[u]


@njit(cache=True, inline="always")
def _group_bound(buf, m, k, gm, tmp):
    """A lower bound of the k-th best of buf[:m]: the k-th largest of the maxima of GROUP
    interleaved groups (each maximum is a distinct entry's value). -inf where m < GROUP * k."""
    if m < GROUP * k:
        return -np.inf
    _lane_maxima(buf, m, gm)
    return _kth(gm, k, tmp)


@njit(cache=True)
def _pool_sums(emo, pv, m):
    """Sums of emo[:m] and pv[:m] (m a multiple of 4) as four interleaved partial sums (j mod 4),
    added pairwise: a fixed order, which SIMD lanes keep."""
    e0 = e1 = e2 = e3 = 0.0
    v0 = v1 = v2 = v3 = 0.0
    for j in range(0, m, 4):
        e0 += emo[j]
        e1 += emo[j + 1]
        e2 += emo[j + 2]
        e3 += emo[j + 3]
        v0 += pv[j]
        v1 += pv[j + 1]
        v2 += pv[j + 2]
        v3 += pv[j + 3]
    return (e0 + e1) + (e2 + e3), (v0 + v1) + (v2 + v3)


@njit(cache=True)
def _block_max(b, m):
    """max(b[:m]) (m a positive multiple of 8): eight running maxima (`_lane_maxima`), then theirs."""
    acc = carray(_stack_f64_lanes(), 8)
    _lane_maxima(b, m, acc)
    x = acc[0]
    for u in range(1, 8):
        x = acc[u] if acc[u] > x else x
    return x


@njit(cache=True)
def _block_count(ok, m):
    n = 0
    for j in range(m):
        n += ok[j]
    return n


@njit(cache=True, error_model="numpy")
def _retrieve_rows(row0, row1, golems, count, cap, qcodes, qscale, cur_pad, valence_sign, now_ms, tau, gamma,
                   codes, norm2, last_access_ms, window_ms, status, importance, sal, confidence,
                   has_tag, p_tag, a_tag, d_tag, recency, charge,
                   weights, charge_fading, k, sal_cap, min_conf, live,
                   out_slots, out_scores, out_factors, out_shadow, out_pool, out_tagged, out_val):
    """Rows row0 .. row1 - 1 of a batch, one after another: Golem golems[gi]'s slab scored against
    query row gi (see the module doc). min_conf < 0 (or NaN): no confidence floor, and the confidence
    column is not read. A call takes a run of rows, not one, because numba counts a reference to
    each array argument as a call starts and ends (an atomic add and subtract on its meminfo,
    which numba's threads share): some sixty such operations a Golem were ~3 % of the kernel's
    samples under perf, and a call a Golem 3-5 % of its time on one thread."""
    n_rows = codes.shape[0]
    w0, w1, w2, w3 = weights[0], weights[1], weights[2], weights[3]
    # block scratch on this call's stack (per thread when Golems run in parallel; BLOCK is a
    # multiple of 8, so the 8-entry groups of pass 3 stay inside)
    dot_s = carray(_stack_i32_super(), SUPER)
    emo_b = carray(_stack_f64(), BLOCK)
    pv_b = carray(_stack_f64(), BLOCK)
    se_b = carray(_stack_f64(), BLOCK)
    sv_b = carray(_stack_f64(), BLOCK)
    sh_b = carray(_stack_f64(), BLOCK)
    nn_b = carray(_stack_f64(), BLOCK)
    ok_b = carray(_stack_i32(), BLOCK)
    cf_b = carray(_stack_bool(), BLOCK)
    fl_b = carray(_stack_u8(), BLOCK)        # pass 3b's flags, read eight at a time as fl_w
    fl_w = fl_b.view(np.uint64)
    floor = min_conf >= 0.0
    if not floor:
        for j in range(BLOCK):
            cf_b[j] = True
    gm = carray(_stack_f64_group(), GROUP)
    kt = np.empty(k)
    sh_v = np.empty(k)
    for gi in range(row0, row1):
        g = golems[gi]
        lo = g * cap
        n = count[g]
        qs = qscale[gi]
        cp, ca, cd = cur_pad[gi, 0], cur_pad[gi, 1], cur_pad[gi, 2]
        cn = max(np.sqrt(cp * cp + ca * ca + cd * cd), 1e-8)
        vs = valence_sign[gi]
        top_s = out_slots[gi]
        top_v = out_scores[gi]
        sh_s = out_shadow[gi]
        f = out_factors[gi]
        sh_v[:] = -np.inf
        top_s[:] = -1
        top_v[:] = -np.inf
        sh_s[:] = -1
        n_el = 0
        sum_emo = 0.0
        sum_val = 0.0
        best_nn = -1
        best_nn_score = -np.inf
        best_sem = -np.inf          # the best semantic match of the pool (novelty, SPEC §5)
        for b0 in range(0, n, BLOCK):
            m = min(BLOCK, n - b0)
            m8 = (m + 7) // 8 * 8
            s0 = lo + b0
            sup = b0 % SUPER           # this block's place in dot_s
            if sup == 0:
                # pass 1: the integer dot products of the next SUPER entries, ROWS rows at a time
                # (the last rows of the arena, fewer than ROWS, by the scalar loop)
                for j in range(0, min(SUPER, n - b0), ROWS):
                    if s0 + j + ROWS <= n_rows:
                        _dots(codes, s0 + j, qcodes, gi, dot_s, j)
                    else:
                        _dots_scalar(codes, s0 + j, n_rows - s0 - j, qcodes, gi, dot_s, j)
            if floor:
                xconf = confidence[s0:s0 + m]
                for j in range(m):
                    cf_b[j] = np.float64(xconf[j]) >= min_conf
            # pass 2: eligibility, the factors and the scores of the block, branch-free in one
            # vectorised loop; an ineligible entry gets score -inf and emotional factor and valence 0
            xst = status[s0:s0 + m]
            xla = last_access_ms[s0:s0 + m]
            xwin = window_ms[s0:s0 + m]
            xtag = has_tag[s0:s0 + m]
            xp = p_tag[s0:s0 + m]
            xa = a_tag[s0:s0 + m]
            xd = d_tag[s0:s0 + m]
            xn2 = norm2[s0:s0 + m]
            xre = recency[s0:s0 + m]
            xch = charge[s0:s0 + m]
            ximp = importance[s0:s0 + m]
            xsal = sal[s0:s0 + m]
            # this run's dot products as a slice indexed by j alone, one vector load: dot_s[sup + j] is
            # a gather, as numba wraps a negative index and sup + j is not known to be non-negative
            xdot = dot_s[sup:sup + m]
            for j in range(m):
                tg = xtag[j]
                pv = np.float64(xp[j]) * (1.0 if tg else 0.0)      # branch-free: see `_emotional`
                age = _i64_f64(now_ms - xla[j])
                ok = (xst[j] != 3) & (age < 2.0 * xwin[j]) & cf_b[j]
                ok = ok & ((vs == 0) | ((vs > 0) & tg & (pv > 0.0)) | ((vs < 0) & tg & (pv < 0.0)))
                sem = _semantic(xdot[j], xn2[j], qs)
                tmp = _temporal(age, xre[j], tau)
                emo = _emotional(tg, xp[j], xa[j], xd[j], cp, ca, cd, cn, xch[j], gamma, charge_fading)
                score = w0 * sem + w1 * tmp + w2 * np.float64(ximp[j]) + w3 * emo
                sh = score * (1.0 + np.float64(xsal[j]) * sal_cap)
                ok_b[j] = ok
                emo_b[j] = emo if ok else 0.0
                pv_b[j] = pv if ok else 0.0
                se_b[j] = sem if ok else -np.inf
                sv_b[j] = (sh if live else score) if ok else -np.inf
                sh_b[j] = sh if ok else -np.inf
                nn_b[j] = score if ok & (pv >= 0.0) else -np.inf
            for j in range(m, m8):
                ok_b[j] = 0
                emo_b[j] = 0.0
                pv_b[j] = 0.0
                se_b[j] = -np.inf
                sv_b[j] = -np.inf
                sh_b[j] = -np.inf
                nn_b[j] = -np.inf
            # pass 3a: the pool's sums (four interleaved partial sums: a fixed order), its count, best
            # semantic match and best non-negative score
            e, v = _pool_sums(emo_b, pv_b, m8)
            sum_emo += e
            sum_val += v
            best_sem = max(best_sem, _block_max(se_b, m8))
            n_el += _block_count(ok_b, m8)
            bn = _block_max(nn_b, m8)
            if bn > best_nn_score:          # the first entry with the block's best: ties keep the earlier
                for j in range(m):
                    if nn_b[j] == bn:
                        best_nn = s0 + j
                        break
                best_nn_score = bn
            # pass 3b: the two top-k lists, in slot order, offered only the entries that can enter
            # them: above the list's k-th (it only rises) and, while a list is still filling, not
            # below the k-th best of the block's group maxima (`_group_bound`)
            t2 = top_v[k - 1]
            t3 = sh_v[k - 1]
            b2 = _group_bound(sv_b, m, k, gm, kt) if t2 == -np.inf else -np.inf
            b3 = _group_bound(sh_b, m, k, gm, kt) if t3 == -np.inf else -np.inf
            for j in range(m8):
                sv = sv_b[j]
                sh = sh_b[j]
                fl_b[j] = np.uint8(((sv > t2) & (sv >= b2)) | ((sh > t3) & (sh >= b3)))
            for w in range(m8 // 8):
                bits = fl_w[w]
                while bits != 0:
                    j = 8 * w + (trailing_zeros(bits) >> 3)
                    bits &= bits - np.uint64(1)
                    sv = sv_b[j]
                    if (sv > t2) & (sv >= b2):
                        _insert(top_s, top_v, k, s0 + j, sv)
                        t2 = top_v[k - 1]
                    sh = sh_b[j]
                    if (sh > t3) & (sh >= b3):
                        _insert(sh_s, sh_v, k, s0 + j, sh)
                        t3 = sh_v[k - 1]
        # the served entries' factors (`_factors_at`: pass 2's operations, the same bits) and their
        # tags and valences: k entries, read while the slab's columns are still in cache (after the
        # scan they are cache misses)
        for r in range(k):
            sr = top_s[r]
            if sr >= 0:
                _factors_at(sr, gi, codes, qcodes, qs, norm2, now_ms, last_access_ms, recency, tau, importance, has_tag,
                            p_tag, a_tag, d_tag, cp, ca, cd, cn, charge, gamma, charge_fading, dot_s, f[r])
            out_tagged[gi, r], out_val[gi, r] = _tag_valence(sr, has_tag, p_tag)
        out_pool[gi, POOL_N] = n_el
        out_pool[gi, POOL_SUM_EMO] = sum_emo
        out_pool[gi, POOL_SUM_VAL] = sum_val
        out_pool[gi, POOL_BEST_NONNEG] = best_nn
        out_pool[gi, POOL_BEST_NONNEG_SCORE] = best_nn_score
        out_pool[gi, POOL_BEST_SEMANTIC] = best_sem


@threaded(cache=True, error_model="numpy")
def retrieve_batch(golems, count, cap, qcodes, qscale, cur_pad, valence_sign, now_ms, tau, gamma,
                   codes, norm2, last_access_ms, window_ms, status, importance, sal, confidence,
                   has_tag, p_tag, a_tag, d_tag, recency, charge,
                   weights, charge_fading, k, sal_cap, min_conf, live,
                   out_slots, out_scores, out_factors, out_shadow, out_pool, out_tagged, out_val):
    """Four-factor retrieval for a batch of Golems (see the module doc). Each Golem reads only its
    slab and writes only its own output rows, so the result is the same, bit for bit, on one
    thread or spread over numba's (`threaded`)."""
    n = golems.size
    parts = min(n, RUNS)
    for c in prange(parts):
        _retrieve_rows(c * n // parts, (c + 1) * n // parts, golems, count, cap, qcodes, qscale, cur_pad,
                       valence_sign, now_ms, tau, gamma, codes, norm2, last_access_ms, window_ms, status, importance,
                       sal, confidence, has_tag, p_tag, a_tag, d_tag, recency, charge,
                       weights, charge_fading, k, sal_cap, min_conf, live,
                       out_slots, out_scores, out_factors, out_shadow, out_pool, out_tagged, out_val)


# ----------------------------------------------------------------------------- served entries
@njit(cache=True, nogil=True)
def validate_drivers(ix, drove, drove_sign, sgn, ids, confidence, up, down):
    """Confidence propagation for the entries that drove the last decision of each Golem ix[i]
    (row ix[i] of `drove`, slots or -1, with the sign each predicted): where both the prediction and
    the market's move `sgn[i]` are non-zero and the entry still exists, confidence + up if they
    agree, - down if not, clipped to [0, 1] in float32 (the numpy expression's arithmetic: float32
    column + float32 delta, then clip); then the row is cleared (-1). A row's slots are distinct and
    slabs are per Golem, so each entry changes once."""
    up32, down32 = np.float32(up), np.float32(-down)
    for i in range(ix.size):
        g = ix[i]
        for r in range(drove.shape[1]):
            s = drove[g, r]
            drove[g, r] = -1
            if sgn[i] == 0 or s < 0 or drove_sign[g, r] == 0 or ids[s] < 0:
                continue
            x = confidence[s] + (up32 if drove_sign[g, r] == sgn[i] else down32)
            confidence[s] = min(max(x, np.float32(0.0)), np.float32(1.0))


@threaded(cache=True, nogil=True)
def served_valence(slots, has_tag, p):
    """(tagged, valence) of each served cell: has_tag[slot] (False where slot is -1) and p[slot]
    where tagged, else 0, in p's dtype: numpy's `served & has_tag[safe]` and `np.where(tagged,
    p[safe], 0.0)` in one threaded pass (the first reads of the served entries after the scan are
    cache misses; see `recall_served`)."""
    b, k = slots.shape
    tagged = np.empty((b, k), np.bool_)
    val = np.empty((b, k), p.dtype)
    for i in prange(b):
        for r in range(k):
            tagged[i, r], val[i, r] = _tag_valence(slots[i, r], has_tag, p)
    return tagged, val


@njit(cache=True)
def learn_markers(ix, pattern, p, a, target, emotion, lr, som_sum, som_arousal, som_cnt, som_target, som_emotion):
    """The somatic markers of the cohort's patterns learn from the tick (SPEC §2.7), a Golem at a
    time: valence and arousal exponentially weighted (the first episode taken as it is), one more
    episode, the target chosen, the emotion counted. The numpy expressions' arithmetic, in place."""
    for i in range(ix.size):
        g, t = ix[i], pattern[i]
        if som_cnt[g, t] == 0:
            som_sum[g, t], som_arousal[g, t] = p[i], a[i]
        else:
            som_sum[g, t] = som_sum[g, t] + lr * (p[i] - som_sum[g, t])
            som_arousal[g, t] = som_arousal[g, t] + lr * (a[i] - som_arousal[g, t])
        som_cnt[g, t] += 1
        som_target[g, t] = target[i]
        som_emotion[g, t, emotion[i]] += 1


@njit(cache=True)
def query_codes(q, qmax, stride):
    """Each query row as int16 codes round(q * scale) (half to even), scale = qmax / max|q| (1 for
    a zero row), zero-padded to `stride`: numpy's `rint(q * scale)` per element; rows are finite."""
    n, d = q.shape
    codes = np.zeros((n, stride), np.int16)
    scale = np.empty(n)
    for i in range(n):
        top = 0.0
        for j in range(d):
            x = abs(q[i, j])
            if x > top:
                top = x
        sc = qmax / top if top > 0 else 1.0
        scale[i] = sc
        for j in range(d):
            codes[i, j] = np.int16(np.rint(q[i, j] * sc))
    return codes, scale


@njit(cache=True)
def served_summary(slots, scores, ids, shadow, shadow_id, emotional, valence, react, confidence, access_count,
                   low_flag, low_flag_accesses, pool):
    """The per-Golem columns of a `retrievals` row from the served cells, as the array expressions
    give them: ids (-1 where none), scores (NaN where none), shadow ids (-1), the low-confidence ids
    (confidence < low_flag in float32, as numpy compares a float32 column with a Python float, after
    at least low_flag_accesses accesses; -1 elsewhere), the means of the served emotional factors
    and valences (NaN without any; float64 and float32 row sums in numpy's order, `np_sum`), the
    reactivated count, the pool's size and its means."""
    b, k = slots.shape
    o_ids = np.empty((b, k), ids.dtype)
    o_scores = np.empty((b, k))
    o_shadow = np.empty((b, k), shadow_id.dtype)
    o_low = np.empty((b, k), ids.dtype)
    emo_mean, val_mean = np.empty(b), np.empty(b)
    pool_n = np.empty(b, np.int64)
    pool_emo, pool_val = np.empty(b), np.empty(b)
    n_react = np.empty(b, np.int64)
    e = np.empty(k)
    v = np.empty(k, valence.dtype)
    low32 = np.float32(low_flag)
    for i in range(b):
        n, nr = 0, 0
        for r in range(k):
            served = slots[i, r] >= 0
            o_ids[i, r] = ids[i, r] if served else -1
            o_scores[i, r] = scores[i, r] if served else np.nan
            o_shadow[i, r] = shadow_id[i, r] if shadow[i, r] >= 0 else -1
            low = served and confidence[i, r] < low32 and access_count[i, r] >= low_flag_accesses
            o_low[i, r] = ids[i, r] if low else -1
            e[r] = emotional[i, r] if served else 0.0
            v[r] = valence[i, r]
            n += served
            nr += react[i, r]
        emo_mean[i] = np_sum(e, 0, k, 0.0) / np.float64(n) if n > 0 else np.nan
        val_mean[i] = np.float64(np_sum(v, 0, k, np.float32(0.0))) / np.float64(n) if n > 0 else np.nan
        n_react[i] = nr
        pn = pool[i, POOL_N]
        pool_n[i] = np.int64(pn)
        pool_emo[i] = pool[i, POOL_SUM_EMO] / max(pn, 1.0) if pn > 0 else np.nan
        pool_val[i] = pool[i, POOL_SUM_VAL] / max(pn, 1.0) if pn > 0 else np.nan
    return o_ids, o_scores, o_shadow, o_low, emo_mean, val_mean, n_react, pool_n, pool_emo, pool_val


@njit(cache=True)
def memory_signal(ix, slots, scores, has_outcome, confidence, outcome, drove, drove_sign, contrarian_pending):
    """What the served entries with an outcome say (before the reflexes and the contrarian
    section): weights max(score, 0) x confidence, the signal sum(w x outcome) / sum(w) (0 without
    weight), each row summed as numpy sums it (`np_sum`), so the same bits as the array
    expressions. Returns (signal, weight sums, whether a row of `contrarian_pending[ix]` holds a
    slot) and writes the drivers: drove[ix] = the slots with an outcome (-1 elsewhere),
    drove_sign[ix] = their outcomes' signs. The pending check rides along because numpy's
    `.any(axis=1)` over a row of three costs ~15 us a cohort."""
    b, k = slots.shape
    w = np.empty(k)
    wo = np.empty(k)
    mem = np.empty(b)
    wsum = np.empty(b)
    pending = np.zeros(b, np.bool_)
    for i in range(b):
        g = ix[i]
        for r in range(contrarian_pending.shape[1]):
            pending[i] |= contrarian_pending[g, r] >= 0
        for r in range(k):
            s = slots[i, r]
            if s >= 0 and has_outcome[i, r]:
                x = scores[i, r]
                o = outcome[i, r]
                w[r] = np_maximum(x, 0.0) * np.float64(confidence[i, r])
                wo[r] = w[r] * np.float64(o)
                drove[g, r] = s
                drove_sign[g, r] = 1 if o > 0 else (-1 if o < 0 else 0)
            else:
                w[r], wo[r] = 0.0, 0.0
                drove[g, r], drove_sign[g, r] = -1, 0
        ws = np_sum(w, 0, k, 0.0)
        wsum[i] = ws
        mem[i] = np_sum(wo, 0, k, 0.0) / max(ws, 1e-12) if ws > 0 else 0.0
    return mem, wsum, pending


@njit(cache=True)
def rumination_guard(ix, neg_share, threshold):
    """Which Golems `ix` guard against rumination (SPEC §4.3): every share of negative entries in
    their window (a row of `neg_share`) above `threshold`; numpy's `(neg_share[ix] > t).all(axis=1)`."""
    guard = np.empty(ix.size, np.bool_)
    for i in range(ix.size):
        g = True
        for x in neg_share[ix[i]]:
            g = g and x > threshold
        guard[i] = g
    return guard


@njit(cache=True)
def anti_rumination(slots, scores, valence, pool, guard):
    """`retrieval.anti_rumination`'s replacement, row by row: for each guarded row with a served
    entry, none of them non-negative, and a non-negative best in its pool, that entry (its id as
    the pool's float, truncated) and score take the last served position. Returns (rows, positions)."""
    b, k = slots.shape
    rows = np.empty(b, np.int64)
    pos = np.empty(b, np.int64)
    n = 0
    for i in range(b):
        best = np.int64(pool[i, POOL_BEST_NONNEG])
        if not guard[i] or best < 0:
            continue
        last, nonneg = -1, False
        for r in range(k):
            if slots[i, r] >= 0:
                last = r
                nonneg = nonneg or valence[i, r] >= 0
        if last < 0 or nonneg:
            continue
        slots[i, last] = best
        scores[i, last] = pool[i, POOL_BEST_NONNEG_SCORE]
        rows[n], pos[n] = i, last
        n += 1
    return rows[:n].copy(), pos[:n].copy()


@njit(cache=True)
def rumination_window(ix, slots, valence, neg_share):
    """After anti-rumination: entries served per row, the served slots with 0 where none, and this
    retrieval's share of negative served entries (0 without any) appended to each Golem's window
    (a row of `neg_share`, oldest dropped), as the numpy expressions compute them."""
    b, k = slots.shape
    w = neg_share.shape[1]
    nserved = np.empty(b, np.int64)
    safe = np.empty((b, k), np.int64)
    for i in range(b):
        n, neg = 0, 0
        for r in range(k):
            s = slots[i, r]
            safe[i, r] = s if s >= 0 else 0
            if s >= 0:
                n += 1
                neg += valence[i, r] < 0
        nserved[i] = n
        row = neg_share[ix[i]]
        for j in range(w - 1):
            row[j] = row[j + 1]
        row[w - 1] = np.float64(neg) / np.float64(n) if n > 0 else 0.0
    return nserved, safe


@threaded(cache=True, nogil=True)
def recall_served(slots, shadow, now_ms, last_access_ms, access_count, acted_on_count, acted_lo, acted_hi,
                  ids, topic, has_outcome, confidence, outcome,
                  tagged, factors, context_topics, cosine, reactivated, react_count, last_react_ms,
                  recency, charge, i0, created_ms, epoch_ms, lg2_per_ms, inv_hl, boost):
    """What a recall does to the served entries, and the columns `decide` reads of them.

    For every served slot (>= 0; a row's slots are distinct, and slabs are per Golem, so no two
    rows share one): last_access_ms = now, access_count + 1 (the touch), acted_on_count + 1 and
    now into the act-time ring (`Grimoire.acted_lo`/`acted_hi`, at position acted_on_count - 1
    modulo the ring's length); then it returns column[safe]
    for ids, topic, has_outcome, confidence, outcome and access_count, each in its column's dtype,
    safe = the slot or 0 for an empty one (as np.where(slots >= 0, slots, 0) after all the touches:
    empty cells are read in a last serial pass, after the threaded one), and the ids at the shadow
    slots (max(shadow, 0)). A served
    slot's touch and reads come together, while its cache lines are in.

    Reactivation (SPEC §2.6) in the same pass: a served cell that is tagged, whose semantic factor
    (factors[i, r, 0], NaN counted as -1) is >= `cosine` and whose entry's topic is one of row i of
    `context_topics` is re-lived: reactivated[s] = True, react_count[s] + 1, last_react_ms[s] =
    now. The last output is that (Golems x k) mask. The scan terms these change follow: recency
    (`recency_term` of now) for every served entry, charge (`charge_term`) for a re-lived one.

    The served entries lie anywhere in their slabs and are out of cache after the scan, so
    every numpy gather or scatter of them is mostly cache misses, waited for one array after the
    other; here they are issued together, on numba's threads."""
    b, k = slots.shape
    o_id = np.empty((b, k), ids.dtype)
    o_topic = np.empty((b, k), topic.dtype)
    o_has_out = np.empty((b, k), has_outcome.dtype)
    o_conf = np.empty((b, k), confidence.dtype)
    o_out = np.empty((b, k), outcome.dtype)
    o_acc = np.empty((b, k), access_count.dtype)
    o_shadow = np.empty((b, k), ids.dtype)
    o_react = np.zeros((b, k), np.bool_)
    n_topics = context_topics.shape[1]
    ring = acted_lo.shape[1]
    now_lo = np.uint32(now_ms & 0xFFFFFFFF)
    now_hi = np.uint16(now_ms >> 32)
    fresh = recency_term(now_ms, epoch_ms, lg2_per_ms)
    for i in prange(b):
        for r in range(k):
            o_shadow[i, r] = ids[max(shadow[i, r], 0)]
            s = slots[i, r]
            if s < 0:
                continue
            last_access_ms[s] = now_ms
            recency[s] = fresh
            access_count[s] += 1
            acted_on_count[s] += 1
            pos = (acted_on_count[s] - 1) % ring
            acted_lo[s, pos] = now_lo
            acted_hi[s, pos] = now_hi
            o_id[i, r] = ids[s]
            o_topic[i, r] = topic[s]
            o_has_out[i, r] = has_outcome[s]
            o_conf[i, r] = confidence[s]
            o_out[i, r] = outcome[s]
            o_acc[i, r] = access_count[s]
            sem = factors[i, r, 0]
            if tagged[i, r] and (-1.0 if np.isnan(sem) else sem) >= cosine:
                t = topic[s]
                for j in range(n_topics):
                    if context_topics[i, j] == t:
                        reactivated[s] = True
                        react_count[s] += 1
                        last_react_ms[s] = now_ms
                        charge[s] = charge_term(i0[s], created_ms[s], True, now_ms, epoch_ms, inv_hl, boost)
                        o_react[i, r] = True
                        break
    for i in range(b):      # empty cells read slot 0, once every touch is done
        for r in range(k):
            if slots[i, r] < 0:
                o_id[i, r] = ids[0]
                o_topic[i, r] = topic[0]
                o_has_out[i, r] = has_outcome[0]
                o_conf[i, r] = confidence[0]
                o_out[i, r] = outcome[0]
                o_acc[i, r] = access_count[0]
    return o_id, o_topic, o_has_out, o_conf, o_out, o_acc, o_shadow, o_react


@njit(cache=True, inline="always")
def charge_at(i0, created_ms, reactivated, last_react_ms, now_ms, half_life_ms, boost, two):
    """A tag's charge now, `padm.emotional_intensity_at` operation for operation (libm's pow as
    Python's `**`; a reactivation time < 0 is none): what a served entry's emotional factor and
    NREM's ranking read. `two` is 2.0, passed in: with the constant LLVM turns pow(2, x) into
    exp2(x), which differs from pow in the last bit now and then."""
    x = np.float64(i0) * two ** (np.float64(-(now_ms - created_ms)) / half_life_ms)
    x = x + (boost * two ** (np.float64(-(now_ms - last_react_ms)) / half_life_ms)
             if reactivated and last_react_ms >= 0 else 0.0)
    return np.minimum(1.0, x)


@njit(cache=True, error_model="numpy")
def served_factors_batch(slots, qcodes, qscale, cur_pad, now_ms, tau, gamma, codes, norm2, last_access_ms, recency,
                         charge, p, a, d, has_tag, importance, charge_fading, out):
    """out[i] = the four factors of entry slots[i] for query codes row i and cur_pad[i], as the
    retrieval kernel computes them (`_semantic`, `_temporal`, `_emotional`: the same operations,
    so the same bits), for the few entries anti-rumination puts in a served set."""
    dbuf = np.empty(1, np.int32)
    for i in range(slots.size):
        cp, ca, cd = cur_pad[i, 0], cur_pad[i, 1], cur_pad[i, 2]
        cn = max(np.sqrt(cp * cp + ca * ca + cd * cd), 1e-8)
        _factors_at(slots[i], i, codes, qcodes, qscale[i], norm2, now_ms, last_access_ms, recency, tau, importance,
                    has_tag, p, a, d, cp, ca, cd, cn, charge, gamma, charge_fading, dbuf, out[i])
    return out


@njit(cache=True, inline="always")
def np_minimum(x, y):
    """numpy's `minimum` of two floats, for kernels that replace array expressions: a NaN in
    either wins, and of two equal values (0.0 and -0.0) the second."""
    return x if x < y or np.isnan(x) else y


@njit(cache=True, inline="always")
def np_maximum(x, y):
    """numpy's `maximum` of two floats: a NaN in either wins, and of two equal values the second."""
    return x if x > y or np.isnan(x) else y


@njit(cache=True)
def np_sum(a, lo, n, zero):
    """`a[lo:lo + n].sum()` as numpy adds it (contiguous 1-D, in the accumulator type of `zero`):
    the identity plus a pairwise sum, blocks of up to 128 summed with eight interleaved
    accumulators, halves split at a multiple of 8. Kernels that replace a numpy sum use it so their
    figures stay the numpy expression's bit for bit (a plain loop differs in the last bits).
    numpy recurses; this walks the same tree with a stack (a recursive numba function crashes
    when cached and called from another kernel). numba's cache does not notice a change here in
    its callers of other modules (the curator's, the appraisal's); that is harmless as long as it
    stays correct, since every correct version gives numpy's bits."""
    if n <= 128:                                # one block, the common case: no stack to allocate
        return zero + _block_sum(a, lo, n, zero)
    los = np.empty(64, dtype=np.int64)
    ns = np.empty(64, dtype=np.int64)
    stage = np.zeros(64, dtype=np.int8)
    vals = np.full(64, zero)
    top, nv = 0, 0
    los[0], ns[0] = lo, n
    while top >= 0:
        m = ns[top]
        if m <= 128:
            vals[nv] = _block_sum(a, los[top], m, zero)
            nv += 1
            top -= 1
        elif stage[top] < 2:
            half = m // 2
            half -= half % 8
            first = stage[top] == 0
            stage[top] += 1
            los[top + 1] = los[top] if first else los[top] + half
            ns[top + 1] = half if first else m - half
            stage[top + 1] = 0
            top += 1
        else:                                   # both halves summed: left + right
            nv -= 1
            vals[nv - 1] = vals[nv - 1] + vals[nv]
            top -= 1
    return zero + vals[0]


@njit(cache=True, inline="always")
def _block_sum(a, lo, n, zero):
    if n < 8:
        res = zero
        for i in range(lo, lo + n):
            res += a[i]
        return res
    r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
    r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
    i, m = lo + 8, lo + n - n % 8
    while i < m:
        r0 += a[i]
        r1 += a[i + 1]
        r2 += a[i + 2]
        r3 += a[i + 3]
        r4 += a[i + 4]
        r5 += a[i + 5]
        r6 += a[i + 6]
        r7 += a[i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < lo + n:
        res += a[i]
        i += 1
    return res
