"""numba kernels for the hot loops; each has a scalar reference it is tested against.

`retrieve_batch` is the four-factor retrieval of SPEC §4.1 fused into one pass over each Golem's
slab: eligibility, semantic factor, temporal decay, charge-faded emotional factor, the served
top-k, the salience-ranked shadow top-k (§4.2), the eligible pool's statistics (§13) and the best
non-negative entry for the anti-rumination guard (§4.3), and the pool's best semantic match (the
novelty test of §5). With `live` the served ranking is the
salience-multiplied one (and equals the shadow).

How it is fast and still exact (docs/performance.md has the measurements and the rejected variants):

- The scan reads 123 bytes per entry at d = 64 (64 of int8 codes, 59 of columns; 4 more when a
  confidence floor is asked for), the memory floor it runs against.
- The semantic factor is the cosine of the stored codes (`golem.grimoire.quantise`) with the
  query rounded to int16 codes (`query_codes`): sem = dot / (scale * sqrt(max(norm2, 1))), where
  dot = sum codes x query codes and norm2 = sum codes^2 are integers, exact in int32 whatever the
  order of the additions (|dot| <= d * 127 * `query_max(d)` < 2^31). So SIMD width, blocking and
  threads cannot change a bit, and `golem.retrieval.semantic` (the scalar reference, Python
  integers) gives the same float64. 16 rows at a time (`_dots16`): each row's codes widened to
  int16 and multiplied in pairs (`pmaddwd`, fused into `vpdpwssd` where the CPU has it), then the
  16 rows' lane sums reduced together by a transposing tree, so no row pays a horizontal sum.
- The slab is walked in blocks of `BLOCK` entries. Per block, pass 1 computes the integer dot
  products and norms (the codes `PREFETCH_BYTES` ahead and the next block's entry columns are
  prefetched, so loads stay in flight while the CPU computes; at a slab's end, the next Golem's
  first rows and columns, because at 1,024 entries a slab is only four blocks and each Golem's scan
  would otherwise start cold), pass 2 the factors and the score
  of every entry of the block at once (SIMD across entries, branch-free: an ineligible entry gets
  score -inf; the exponentials by `exp2` below instead of scalar libm calls), pass 3 the pool sums
  and, for the few entries that beat a current best, the top-k insertions (a SIMD test skips the
  scalar walk for blocks with none, i.e. almost all of them). The block's scratch lives on the
  stack (L1-resident, and provably distinct from the inputs, so the compiler vectorises without
  runtime alias checks). The slab is read once.
- The emotional factor is `padm.pad_cosine_safe(tag, pad)`'s operations in its order (the tag's
  norm per entry; nothing derived is stored), so it equals the reference bit for bit; charge
  fading as in `padm.emotional_intensity_at`, by `exp2`. Only tagged entries need it (an untagged
  one's is 0.5), and a prefilled Grimoire is mostly untagged (the bench's after one day: 12 %
  tagged): a block with fewer than a quarter tagged computes it for those only, gathered; a
  block with more, for all its entries in one vectorised loop, which costs less per entry than
  the gathered loop, and without the reactivation boost's `exp2`, which the few reactivated
  entries (3 % after ten days) then get in a second, gathered pass. Either way each entry gets
  the reference's operations (a boost of 0 is added as 0.0), so the same bits.
- `exp2` is a branch-free 2**x (round-to-nearest range reduction, degree-13 Taylor polynomial by
  FMA, exponent from bits) that vectorises; it is within 1 ulp of libm, so the temporal factor
  (0.995 ** hours = exp2(hours * log2 0.995)) and the charge decay differ from the reference's
  `**` by ~1e-16 relative, far inside the 1e-9 the reference API promises.
- Pool sums (emotional factor, valence) are four interleaved partial sums per block (j mod 4),
  combined pairwise and added block by block: a fixed order, so deterministic on every machine;
  they agree with a sequential sum to ~1e-15 relative.
- `retrieve_batch_parallel` runs the same per-Golem function over numba's threads (prange over
  Golems: each reads its own slab and writes its own rows, so results do not depend on threads).
- Every slot below a slab's count holds an entry (`golem.grimoire`: entries are replaced, never
  removed), so the scan does not read the id column; untagged entries get the emotional factor
  0.5 and valence 0 whatever their p, a, d.

`np_sum` is numpy's summation order for kernels elsewhere (the curator's, the appraisal's) that
replace a numpy sum and must give its bits.
"""
from __future__ import annotations

import math

import numpy as np
from llvmlite import binding as llb
from llvmlite import ir
from numba import carray, njit, prange
from numba.core import cgutils, config, types
from numba.extending import intrinsic

# pool statistics columns
POOL_N, POOL_SUM_EMO, POOL_SUM_VAL, POOL_BEST_NONNEG, POOL_BEST_NONNEG_SCORE, POOL_BEST_SEMANTIC = range(6)
POOL_COLUMNS = 6

#: entries per block (scratch: 7 float64, 2 int32 and 2 bool arrays of BLOCK = 16.9 KB, L1-resident)
BLOCK = 256
#: rows whose dot products `_dots16` computes together
ROWS = 16
#: how far ahead of the row being scored its codes are prefetched (bandwidth x latency)
PREFETCH_BYTES = 8192
HOUR_MS = 3_600_000.0
#: int8 codes per step of `_dots16` (one 64-byte vector of int16 after widening)
CHUNK = 32


def query_max(stride: int) -> int:
    """The largest query code for rows of `stride` codes: int16, and small enough that a dot
    product of 127-codes cannot leave int32 (d * 127 * q < 2^31; 32,767 for d <= 516)."""
    return int(min(32767, (2**31 - 1) // (127 * max(stride, 1))))


# ----------------------------------------------------------------------------- intrinsics
def _host_features() -> set[str]:
    feats = config.CPU_FEATURES if config.CPU_FEATURES is not None else llb.get_host_cpu_features().flatten()
    return set(feats.split(","))


#: pmaddwd on 512-bit vectors where the CPU has AVX-512 BW, on two 256-bit halves with AVX2, else
#: plain vector IR (the same integers every way)
_FEATURES = _host_features() if not config.CPU_NAME else set()
_PMADD = "avx512" if "+avx512bw" in _FEATURES else ("avx2" if "+avx2" in _FEATURES else "generic")


def _i32s(*idx):
    return ir.Constant(ir.VectorType(ir.IntType(32), len(idx)), list(idx))


def _pmadd(builder, a, b, how=None):
    """<32 x i16> a, b -> <16 x i32>: lane l = a[2l] * b[2l] + a[2l+1] * b[2l+1] (exact)."""
    how = how or _PMADD
    i16 = ir.IntType(16)
    if how == "avx512":
        v = ir.VectorType(i16, 32)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VectorType(ir.IntType(32), 16), [v, v]),
                                            "llvm.x86.avx512.pmaddw.d.512")
        return builder.call(fn, [a, b])
    if how == "avx2":
        v = ir.VectorType(i16, 16)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VectorType(ir.IntType(32), 8), [v, v]),
                                            "llvm.x86.avx2.pmadd.wd")
        lo, hi = _i32s(*range(16)), _i32s(*range(16, 32))
        r0 = builder.call(fn, [builder.shuffle_vector(a, a, lo), builder.shuffle_vector(b, b, lo)])
        r1 = builder.call(fn, [builder.shuffle_vector(a, a, hi), builder.shuffle_vector(b, b, hi)])
        return builder.shuffle_vector(r0, r1, _i32s(*range(16)))
    w = ir.VectorType(ir.IntType(32), 32)
    prod = builder.mul(builder.sext(a, w), builder.sext(b, w))
    return builder.add(builder.shuffle_vector(prod, prod, _i32s(*range(0, 32, 2))),
                       builder.shuffle_vector(prod, prod, _i32s(*range(1, 32, 2))))


def _tree(builder, vs):
    """ROWS vectors of 16 int32 lanes -> one vector whose lane r is the sum of vs[r]'s lanes: pairs
    of vectors are folded level by level (adjacent lanes always belong to the same row)."""
    ev, od = _i32s(*range(0, 32, 2)), _i32s(*range(1, 32, 2))
    while len(vs) > 1:
        vs = [builder.add(builder.shuffle_vector(x, y, ev), builder.shuffle_vector(x, y, od))
              for x, y in zip(vs[0::2], vs[1::2])]
    return vs[0]


def _dots_intrinsic(how=None):
    @intrinsic
    def dots16(typingctx, codes, row0, qcodes, qrow, dbuf, nbuf, j0):
        """dbuf[j0 + r] = sum_t codes[row0 + r, t] * qcodes[qrow, t] and nbuf[j0 + r] = sum_t
        codes[row0 + r, t]^2 for r < ROWS, in int32 (exact). codes: C-contiguous (rows, stride)
        int8, qcodes (queries, stride) int16, stride a multiple of CHUNK; rows row0 .. row0 + 15
        must exist; dbuf and nbuf int32 buffers."""
        if not (isinstance(codes, types.Array) and codes.dtype == types.int8 and codes.ndim == 2 and codes.layout == "C"
                and isinstance(qcodes, types.Array) and qcodes.dtype == types.int16 and qcodes.ndim == 2):
            return None
        sig = types.void(codes, types.intp, qcodes, types.intp, dbuf, nbuf, types.intp)

        def codegen(context, builder, signature, args):
            c_arr = context.make_array(signature.args[0])(context, builder, args[0])
            q_arr = context.make_array(signature.args[2])(context, builder, args[2])
            d_arr = context.make_array(signature.args[4])(context, builder, args[4])
            n_arr = context.make_array(signature.args[5])(context, builder, args[5])
            row0, qrow, j0 = args[1], args[3], args[6]
            intp = context.get_value_type(types.intp)
            stride = builder.extract_value(c_arr.shape, 1)
            i8c, i16c = ir.VectorType(ir.IntType(8), CHUNK), ir.VectorType(ir.IntType(16), CHUNK)
            v32 = ir.VectorType(ir.IntType(32), 16)
            zero = ir.Constant(v32, [0] * 16)
            cbase = builder.gep(c_arr.data, [builder.mul(row0, stride)])
            qbase = builder.gep(q_arr.data, [builder.mul(qrow, stride)])

            def step(off, dacc, nacc):
                qv = builder.load(builder.bitcast(builder.gep(qbase, [off]), i16c.as_pointer()), align=2)
                nd, nn = [], []
                for r in range(ROWS):
                    at = builder.add(builder.mul(ir.Constant(intp, r), stride), off)
                    cv = builder.sext(builder.load(builder.bitcast(builder.gep(cbase, [at]), i8c.as_pointer()), align=1), i16c)
                    nd.append(builder.add(dacc[r], _pmadd(builder, cv, qv, how)))
                    nn.append(builder.add(nacc[r], _pmadd(builder, cv, cv, how)))
                return nd, nn

            fast = builder.append_basic_block("dots.d64")
            check = builder.append_basic_block("dots.check")
            loop = builder.append_basic_block("dots.loop")
            done = builder.append_basic_block("dots.done")
            builder.cbranch(builder.icmp_signed("==", stride, ir.Constant(intp, 2 * CHUNK)), fast, check)
            builder.position_at_end(fast)          # d = 64 (the default): straight-line, two steps
            fd, fn_ = step(ir.Constant(intp, 0), [zero] * ROWS, [zero] * ROWS)
            fd, fn_ = step(ir.Constant(intp, CHUNK), fd, fn_)
            fast_end = builder.block
            builder.branch(done)
            builder.position_at_end(check)
            builder.cbranch(builder.icmp_signed(">", stride, ir.Constant(intp, 0)), loop, done)
            builder.position_at_end(loop)
            off = builder.phi(intp)
            off.add_incoming(ir.Constant(intp, 0), check)
            dacc = [builder.phi(v32) for _ in range(ROWS)]
            nacc = [builder.phi(v32) for _ in range(ROWS)]
            for ph in dacc + nacc:
                ph.add_incoming(zero, check)
            ld, ln = step(off, dacc, nacc)
            nxt = builder.add(off, ir.Constant(intp, CHUNK))
            off.add_incoming(nxt, loop)
            for ph, v in zip(dacc + nacc, ld + ln):
                ph.add_incoming(v, loop)
            builder.cbranch(builder.icmp_signed("<", nxt, stride), loop, done)
            builder.position_at_end(done)
            outs = []
            for fv, lv in zip(fd + fn_, ld + ln):
                ph = builder.phi(v32)
                ph.add_incoming(fv, fast_end)
                ph.add_incoming(zero, check)
                ph.add_incoming(lv, loop)
                outs.append(ph)
            td, tn = _tree(builder, outs[:ROWS]), _tree(builder, outs[ROWS:])
            builder.store(td, builder.bitcast(builder.gep(d_arr.data, [j0]), v32.as_pointer()), align=4)
            builder.store(tn, builder.bitcast(builder.gep(n_arr.data, [j0]), v32.as_pointer()), align=4)
            return context.get_dummy_value()

        return sig, codegen
    return dots16


_dots16 = _dots_intrinsic()
#: the same products in plain vector IR, whatever the CPU (tests compare it with `_dots16`)
_dots16_generic = _dots_intrinsic("generic")


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


@intrinsic
def _prefetch(typingctx, arr, idx):
    """Hint the CPU to start loading the cache line holding the flat element idx of arr."""
    if not isinstance(arr, types.Array):
        return None

    def codegen(context, builder, signature, args):
        a = context.make_array(signature.args[0])(context, builder, args[0])
        ptr = builder.bitcast(builder.gep(a.data, [args[1]]), ir.IntType(8).as_pointer())
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [ir.IntType(8).as_pointer(), ir.IntType(32), ir.IntType(32), ir.IntType(32)]),
            "llvm.prefetch.p0")
        builder.call(fn, [ptr, ir.Constant(ir.IntType(32), 0), ir.Constant(ir.IntType(32), 3), ir.Constant(ir.IntType(32), 1)])
        return context.get_dummy_value()

    return types.void(arr, types.intp), codegen


def _stack_block(dtype):
    """An intrinsic returning a pointer to BLOCK elements of `dtype` on the kernel's stack.

    Scratch on the stack is memory the compiler can prove distinct from every input array, so the
    block loops vectorise without runtime alias checks (heap scratch from np.empty is opaque).
    """
    nb_type = {np.float64: types.float64, np.int32: types.int32, np.bool_: types.boolean}[dtype]

    @intrinsic
    def impl(typingctx):
        def codegen(context, builder, signature, args):
            ty = context.get_data_type(nb_type)
            return cgutils.alloca_once(builder, ty, size=ir.Constant(ir.IntType(64), BLOCK))
        return types.CPointer(nb_type)(), codegen
    return impl


_stack_f64 = _stack_block(np.float64)
_stack_i32 = _stack_block(np.int32)
_stack_bool = _stack_block(np.bool_)


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
def _dots_scalar(codes, row0, rows, qcodes, qrow, dbuf, nbuf, j0):
    """`_dots16` for the last rows of the arena (fewer than ROWS left), one row at a time."""
    stride = codes.shape[1]
    for r in range(rows):
        dt = 0
        n2 = 0
        for t in range(stride):
            c = np.int64(codes[row0 + r, t])
            dt += c * np.int64(qcodes[qrow, t])
            n2 += c * c
        dbuf[j0 + r] = dt
        nbuf[j0 + r] = n2


@njit(cache=True, inline="always")
def _semantic(dot, n2, qscale):
    """The semantic factor from the integer dot product and squared norm (module doc)."""
    return np.float64(dot) / (qscale * np.sqrt(np.float64(max(n2, 1))))


@njit(cache=True)
def dots16(codes, row0, qcodes, qrow, generic=False):
    """(dot, norm2) int32 of rows row0 .. row0 + ROWS - 1 against query row qrow by `_dots16`
    (or its plain-IR twin) and by the scalar loop (for tests): (vector, vector, scalar, scalar)."""
    dv = np.zeros(ROWS, np.int32)
    nv = np.zeros(ROWS, np.int32)
    ds = np.zeros(ROWS, np.int32)
    ns = np.zeros(ROWS, np.int32)
    if generic:
        _dots16_generic(codes, row0, qcodes, qrow, dv, nv, 0)
    else:
        _dots16(codes, row0, qcodes, qrow, dv, nv, 0)
    _dots_scalar(codes, row0, ROWS, qcodes, qrow, ds, ns, 0)
    return dv, nv, ds, ns


@njit(cache=True, inline="always")
def _insert(slots, scores, k, slot, score):
    """Keep (slots, scores) sorted by score descending, ties by earlier slot; size k."""
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


# ----------------------------------------------------------------------------- retrieval
@njit(cache=True, inline="always")
def _tag_valence(s, has_tag, p):
    """A served cell's (tagged, valence): has_tag[s] (False for an empty cell, s = -1) and p[s]
    where tagged, else 0 (exact in float64; stored back in p's dtype by the caller)."""
    tg = s >= 0 and has_tag[max(s, 0)]
    return tg, np.float64(p[s]) if tg else 0.0


@njit(cache=True, inline="always", error_model="numpy")
def _emotional(p, a, d, cp, ca, cd, cn, i0, created_ms, boosted, last_react_ms, now_ms, inv_hl, react_boost,
               charge_fading):
    """A tagged entry's emotional factor: padm.pad_cosine_safe(tag, pad) operation for operation
    (cn: the current PAD's norm, floored), faded by the charge left (padm.emotional_intensity_at
    / i0) when charge_fading; `boosted`: reactivated with a time, so the boost's exp2 is only
    evaluated then (base + 0.0 otherwise, as the reference adds a boost of 0)."""
    tp, ta, td = np.float64(p), np.float64(a), np.float64(d)
    dt = tp * cp + ta * ca + td * cd
    pc = (dt / (max(np.sqrt(tp * tp + ta * ta + td * td), 1e-8) * cn) + 1.0) / 2.0
    if charge_fading:
        i0j = np.float64(i0)
        base = i0j * exp2(np.float64(created_ms - now_ms) * inv_hl)
        boost = react_boost * exp2(np.float64(last_react_ms - now_ms) * inv_hl) if boosted else 0.0
        inten = min(1.0, base + boost)
        pc = 0.5 + (pc - 0.5) * min(1.0, max(0.0, inten / max(i0j, 1e-8)))
    return pc


@njit(cache=True, error_model="numpy")
def _retrieve_golem(gi, golems, count, cap, qcodes, qscale, cur_pad, valence_sign, now_ms,
                    codes, last_access_ms, window_ms, status, importance, sal, confidence,
                    has_tag, p_tag, a_tag, d_tag, i0, created_ms, reactivated, last_react_ms,
                    weights, temporal_base, half_life_ms, react_boost, charge_fading,
                    k, sal_cap, min_conf, live,
                    out_slots, out_scores, out_factors, out_shadow, out_pool, out_tagged, out_val):
    """Row gi of a batch: Golem golems[gi]'s slab scored against query row gi (see the module doc).
    min_conf < 0 (or NaN): no confidence floor, and the confidence column is not read."""
    stride = codes.shape[1]
    n_rows = codes.shape[0]
    lg2_per_ms = math.log2(temporal_base) / HOUR_MS
    inv_hl = 1.0 / half_life_ms
    w0, w1, w2, w3 = weights[0], weights[1], weights[2], weights[3]
    # block scratch on this call's stack (per thread when Golems run in parallel)
    dot_b = carray(_stack_i32(), BLOCK)
    nrm_b = carray(_stack_i32(), BLOCK)
    sem_b = carray(_stack_f64(), BLOCK)
    tmp_b = carray(_stack_f64(), BLOCK)
    emo_b = carray(_stack_f64(), BLOCK)
    pv_b = carray(_stack_f64(), BLOCK)
    sv_b = carray(_stack_f64(), BLOCK)
    sh_b = carray(_stack_f64(), BLOCK)
    nn_b = carray(_stack_f64(), BLOCK)
    ix_b = carray(_stack_i32(), BLOCK)
    ir_b = carray(_stack_i32(), BLOCK)
    ok_b = carray(_stack_bool(), BLOCK)
    cf_b = carray(_stack_bool(), BLOCK)
    floor = min_conf >= 0.0
    if not floor:
        for j in range(BLOCK):
            cf_b[j] = True
    pd_rows = max(ROWS, PREFETCH_BYTES // stride)   # rows of prefetch distance
    sh_v = np.empty(k)
    g = golems[gi]
    lo = g * cap
    n = count[g]
    # the next Golem of the batch (the next this thread scans), prefetched at this slab's end
    nxt_lo = golems[gi + 1] * cap if gi + 1 < golems.size else 0
    nxt_n = count[golems[gi + 1]] if gi + 1 < golems.size else 0
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
        mpad = (m + 3) // 4 * 4
        s0 = lo + b0
        # pass 1: integer dot products and norms, ROWS rows at a time, reading ahead
        for j in range(0, m, ROWS):
            r0 = s0 + j
            ahead = b0 + j + pd_rows
            if ahead < n:
                x = (r0 + pd_rows) * stride
                for t in range(0, ROWS * stride, 64):
                    _prefetch(codes, x + t)
            elif ahead - n < nxt_n:
                # past this slab's end: the next Golem's first rows, so its scan starts warm
                x = (nxt_lo + ahead - n) * stride
                for t in range(0, ROWS * stride, 64):
                    _prefetch(codes, x + t)
            if r0 + ROWS <= n_rows:
                _dots16(codes, r0, qcodes, gi, dot_b, nrm_b, j)
            else:
                _dots_scalar(codes, r0, n_rows - r0, qcodes, gi, dot_b, nrm_b, j)
            # the next block's entry columns: the lines of its rows j .. j + ROWS - 1 (64-byte
            # lines: 8 int64 / float64, 16 float32 and 64 one-byte values each)
            x = -1
            if b0 + BLOCK + j < n:
                x = s0 + BLOCK + j
            elif j < nxt_n:
                x = nxt_lo + j        # past this slab's end: the next Golem's first block
            if x >= 0:
                for u in range(0, ROWS, 8):
                    _prefetch(last_access_ms, x + u)
                    _prefetch(window_ms, x + u)
                    _prefetch(created_ms, x + u)
                    _prefetch(last_react_ms, x + u)
                _prefetch(p_tag, x)
                _prefetch(a_tag, x)
                _prefetch(d_tag, x)
                _prefetch(i0, x)
                _prefetch(importance, x)
                _prefetch(sal, x)
                if floor:
                    _prefetch(confidence, x)
                if j % 64 == 0:
                    _prefetch(status, x)
                    _prefetch(has_tag, x)
                    _prefetch(reactivated, x)
        if floor:
            xconf = confidence[s0:s0 + m]
            for j in range(m):
                cf_b[j] = np.float64(xconf[j]) >= min_conf
        # pass 2: eligibility and the factors for the whole block, branch-free, one vectorised
        # loop (the scratch is on the stack, so no runtime alias checks). An ineligible entry gets
        # score -inf and emotional factor and valence 0, so pass 3 needs no test for it.
        xst = status[s0:s0 + m]
        xla = last_access_ms[s0:s0 + m]
        xwin = window_ms[s0:s0 + m]
        xtag = has_tag[s0:s0 + m]
        xp = p_tag[s0:s0 + m]
        xa = a_tag[s0:s0 + m]
        xd = d_tag[s0:s0 + m]
        xi0 = i0[s0:s0 + m]
        xcr = created_ms[s0:s0 + m]
        xre = reactivated[s0:s0 + m]
        xlr = last_react_ms[s0:s0 + m]
        ximp = importance[s0:s0 + m]
        xsal = sal[s0:s0 + m]
        # 2a: eligibility and the temporal factor
        for j in range(m):
            tg = xtag[j]
            pv = np.float64(xp[j]) if tg else 0.0
            age = np.float64(now_ms - xla[j])
            ok = (xst[j] != 3) & (age < 2.0 * xwin[j]) & cf_b[j]
            ok_b[j] = ok & ((vs == 0) | ((vs > 0) & tg & (pv > 0.0)) | ((vs < 0) & tg & (pv < 0.0)))
            pv_b[j] = pv
            tmp_b[j] = exp2(age * lg2_per_ms)
        # 2b: the emotional factor (`_emotional`; an untagged entry's is 0.5 whatever its p, a, d
        # and charge). Most entries of a prefilled Grimoire are untagged: where fewer than a
        # quarter of the block's are tagged, their positions are gathered branch-free and only
        # they are computed, the boost's exp2 only for the reactivated; otherwise every entry in
        # one vectorised loop without the boost (the gathered loop does not vectorise and costs
        # more per entry), then the few reactivated again with it
        nt = 0
        nr = 0
        for j in range(m):
            ix_b[nt] = j
            nt += xtag[j]
            ir_b[nr] = j
            nr += xtag[j] & xre[j] & (xlr[j] >= 0) & charge_fading
        if 4 * nt >= m:
            for j in range(m):
                e = _emotional(xp[j], xa[j], xd[j], cp, ca, cd, cn, xi0[j], xcr[j], False, 0, now_ms,
                               inv_hl, react_boost, charge_fading)
                emo_b[j] = e if xtag[j] else 0.5
            for t in range(nr):
                j = ir_b[t]
                emo_b[j] = _emotional(xp[j], xa[j], xd[j], cp, ca, cd, cn, xi0[j], xcr[j], True, xlr[j], now_ms,
                                      inv_hl, react_boost, charge_fading)
        else:
            for j in range(m):
                emo_b[j] = 0.5
            for t in range(nt):
                j = ix_b[t]
                emo_b[j] = _emotional(xp[j], xa[j], xd[j], cp, ca, cd, cn, xi0[j], xcr[j],
                                      xre[j] & (xlr[j] >= 0), xlr[j], now_ms, inv_hl, react_boost, charge_fading)
        # 2c: semantic and emotional factors, the scores
        for j in range(m):
            ok = ok_b[j]
            pv = pv_b[j]
            sem = _semantic(dot_b[j], nrm_b[j], qs)
            emo = emo_b[j]
            score = w0 * sem + w1 * tmp_b[j] + w2 * np.float64(ximp[j]) + w3 * emo
            sh = score * (1.0 + np.float64(xsal[j]) * sal_cap)
            sem_b[j] = sem
            pv_b[j] = pv if ok else 0.0
            emo_b[j] = emo if ok else 0.0
            sv_b[j] = (sh if live else score) if ok else -np.inf
            sh_b[j] = sh if ok else -np.inf
            nn_b[j] = score if ok & (pv >= 0.0) else -np.inf
        # pass 3a: pool sums, four interleaved partial sums per block (fixed order)
        for j in range(m, mpad):
            emo_b[j] = 0.0
            pv_b[j] = 0.0
            ok_b[j] = False
        e0 = e1 = e2 = e3 = 0.0
        v0 = v1 = v2 = v3 = 0.0
        for j in range(0, mpad, 4):
            e0 += emo_b[j]
            e1 += emo_b[j + 1]
            e2 += emo_b[j + 2]
            e3 += emo_b[j + 3]
            v0 += pv_b[j]
            v1 += pv_b[j + 1]
            v2 += pv_b[j + 2]
            v3 += pv_b[j + 3]
        sum_emo += (e0 + e1) + (e2 + e3)
        sum_val += (v0 + v1) + (v2 + v3)
        for j in range(m):
            n_el += ok_b[j]
            best_sem = max(best_sem, sem_b[j] if ok_b[j] else -np.inf)
        # pass 3b: best non-negative entry and the two top-k lists, in slot order; one branch
        # per entry, taken only by entries that beat a current best (rare, predictable)
        t1 = best_nn_score
        t2 = top_v[k - 1]
        t3 = sh_v[k - 1]
        # thresholds only rise: an entry that does not beat them now never will in this
        # block, and after the first blocks most blocks have no such entry at all (SIMD test)
        hits = 0
        for j in range(m):
            hits += (nn_b[j] > t1) | (sv_b[j] > t2) | (sh_b[j] > t3)
        if hits == 0:
            continue
        for j in range(m):
            nn = nn_b[j]
            sv = sv_b[j]
            sh = sh_b[j]
            if (nn > t1) | (sv > t2) | (sh > t3):
                if nn > t1:
                    best_nn_score = nn
                    best_nn = s0 + j
                    t1 = nn
                if sv > t2:
                    pos = _insert(top_s, top_v, k, s0 + j, sv)
                    # keep the factors aligned with the served order
                    for r in range(k - 1, pos, -1):
                        f[r, 0] = f[r - 1, 0]
                        f[r, 1] = f[r - 1, 1]
                        f[r, 2] = f[r - 1, 2]
                        f[r, 3] = f[r - 1, 3]
                    f[pos, 0] = sem_b[j]
                    f[pos, 1] = tmp_b[j]
                    f[pos, 2] = np.float64(ximp[j])
                    f[pos, 3] = emo_b[j]
                    t2 = top_v[k - 1]
                if sh > t3:
                    _insert(sh_s, sh_v, k, s0 + j, sh)
                    t3 = sh_v[k - 1]
    # the served entries' tags and valences, read while the slab's columns are still in cache
    # (read after the scan, they are cache misses; see `served_valence`)
    for r in range(k):
        out_tagged[gi, r], out_val[gi, r] = _tag_valence(top_s[r], has_tag, p_tag)
    out_pool[gi, POOL_N] = n_el
    out_pool[gi, POOL_SUM_EMO] = sum_emo
    out_pool[gi, POOL_SUM_VAL] = sum_val
    out_pool[gi, POOL_BEST_NONNEG] = best_nn
    out_pool[gi, POOL_BEST_NONNEG_SCORE] = best_nn_score
    out_pool[gi, POOL_BEST_SEMANTIC] = best_sem


@njit(cache=True, error_model="numpy")
def retrieve_batch(golems, count, cap, qcodes, qscale, cur_pad, valence_sign, now_ms,
                   codes, last_access_ms, window_ms, status, importance, sal, confidence,
                   has_tag, p_tag, a_tag, d_tag, i0, created_ms, reactivated, last_react_ms,
                   weights, temporal_base, half_life_ms, react_boost, charge_fading,
                   k, sal_cap, min_conf, live,
                   out_slots, out_scores, out_factors, out_shadow, out_pool, out_tagged, out_val):
    """Four-factor retrieval for a batch of Golems, one after the other (see the module doc)."""
    for gi in range(golems.size):
        _retrieve_golem(gi, golems, count, cap, qcodes, qscale, cur_pad, valence_sign, now_ms,
                        codes, last_access_ms, window_ms, status, importance, sal, confidence,
                        has_tag, p_tag, a_tag, d_tag, i0, created_ms, reactivated, last_react_ms,
                        weights, temporal_base, half_life_ms, react_boost, charge_fading,
                        k, sal_cap, min_conf, live,
                        out_slots, out_scores, out_factors, out_shadow, out_pool, out_tagged, out_val)


@njit(cache=True, error_model="numpy", parallel=True)
def retrieve_batch_parallel(golems, count, cap, qcodes, qscale, cur_pad, valence_sign, now_ms,
                            codes, last_access_ms, window_ms, status, importance, sal, confidence,
                            has_tag, p_tag, a_tag, d_tag, i0, created_ms, reactivated, last_react_ms,
                            weights, temporal_base, half_life_ms, react_boost, charge_fading,
                            k, sal_cap, min_conf, live,
                            out_slots, out_scores, out_factors, out_shadow, out_pool, out_tagged, out_val):
    """`retrieve_batch` with the Golems spread over numba's threads (NUMBA_NUM_THREADS).

    Each Golem reads only its slab and writes only its own output rows, so the result is the
    same, bit for bit, whatever the number of threads or their scheduling.
    """
    for gi in prange(golems.size):
        _retrieve_golem(gi, golems, count, cap, qcodes, qscale, cur_pad, valence_sign, now_ms,
                        codes, last_access_ms, window_ms, status, importance, sal, confidence,
                        has_tag, p_tag, a_tag, d_tag, i0, created_ms, reactivated, last_react_ms,
                        weights, temporal_base, half_life_ms, react_boost, charge_fading,
                        k, sal_cap, min_conf, live,
                        out_slots, out_scores, out_factors, out_shadow, out_pool, out_tagged, out_val)


# ----------------------------------------------------------------------------- served entries
@njit(cache=True, nogil=True)
def validate_drivers(drove, drove_sign, sgn, ids, confidence, up, down):
    """Confidence propagation for the entries that drove each Golem's last decision (row i of
    `drove`, slots or -1, with the sign each predicted): where both the prediction and the market's
    move `sgn[i]` are non-zero and the entry still exists, confidence + up if they agree, - down if
    not, clipped to [0, 1] in float32 (the numpy expression's arithmetic: float32 column + float32
    delta, then clip). A row's slots are distinct and slabs are per Golem, so each entry changes once."""
    up32, down32 = np.float32(up), np.float32(-down)
    for i in range(drove.shape[0]):
        if sgn[i] == 0:
            continue
        for r in range(drove.shape[1]):
            s = drove[i, r]
            if s < 0 or drove_sign[i, r] == 0 or ids[s] < 0:
                continue
            x = confidence[s] + (up32 if drove_sign[i, r] == sgn[i] else down32)
            confidence[s] = min(max(x, np.float32(0.0)), np.float32(1.0))


@njit(cache=True, parallel=True, nogil=True)
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
def memory_signal(ix, slots, scores, has_outcome, confidence, outcome, drove, drove_sign):
    """What the served entries with an outcome say (before the reflexes and the contrarian
    section): weights max(score, 0) x confidence, the signal sum(w x outcome) / sum(w) (0 without
    weight), each row summed as numpy sums it (`np_sum`), so the same bits as the array
    expressions. Returns (signal, weight sums) and writes the drivers: drove[ix] = the slots with
    an outcome (-1 elsewhere), drove_sign[ix] = their outcomes' signs."""
    b, k = slots.shape
    w = np.empty(k)
    wo = np.empty(k)
    mem = np.empty(b)
    wsum = np.empty(b)
    for i in range(b):
        g = ix[i]
        for r in range(k):
            s = slots[i, r]
            if s >= 0 and has_outcome[i, r]:
                x = scores[i, r]
                o = outcome[i, r]
                w[r] = (x if x >= 0.0 or np.isnan(x) else 0.0) * np.float64(confidence[i, r])
                wo[r] = w[r] * np.float64(o)
                drove[g, r] = s
                drove_sign[g, r] = 1 if o > 0 else (-1 if o < 0 else 0)
            else:
                w[r], wo[r] = 0.0, 0.0
                drove[g, r], drove_sign[g, r] = -1, 0
        ws = np_sum(w, 0, k, 0.0)
        wsum[i] = ws
        mem[i] = np_sum(wo, 0, k, 0.0) / max(ws, 1e-12) if ws > 0 else 0.0
    return mem, wsum


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


@njit(cache=True, parallel=True, nogil=True)
def recall_served(slots, shadow, now_ms, last_access_ms, access_count, acted_on_count, acted_lo, acted_hi,
                  ids, topic, has_outcome, confidence, outcome,
                  tagged, factors, context_topics, cosine, reactivated, react_count, last_react_ms):
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
    now. The last output is that (Golems x k) mask.

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
    for i in prange(b):
        for r in range(k):
            o_shadow[i, r] = ids[max(shadow[i, r], 0)]
            s = slots[i, r]
            if s < 0:
                continue
            last_access_ms[s] = now_ms
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
def served_factors_batch(slots, qcodes, qscale, cur_pad, now_ms, codes, last_access_ms, p, a, d, i0, created_ms,
                         last_react_ms, reactivated, has_tag, importance, temporal_base, half_life_ms,
                         react_boost, charge_fading, two, out):
    """out[i] = the four factors of entry slots[i] for query codes row i and cur_pad[i], the
    operations of `golem.retrieval.entry_factors` in its order (so the same bits): the semantic
    factor from the exact integer products, powers by libm's pow as Python's `**` computes them,
    np.maximum/np.minimum where the reference uses them. For the few entries anti-rumination puts
    in a served set. `two` is 2.0, passed in: with the constant LLVM turns pow(2, x) into exp2(x),
    which differs from pow in the last bit now and then."""
    dbuf = np.empty(1, np.int32)
    nbuf = np.empty(1, np.int32)
    for i in range(slots.size):
        s = slots[i]
        _dots_scalar(codes, s, 1, qcodes, i, dbuf, nbuf, 0)
        sem = _semantic(dbuf[0], nbuf[0], qscale[i])
        temporal = temporal_base ** (np.float64(now_ms - last_access_ms[s]) / HOUR_MS)
        ps, as_, ds = np.float64(p[s]), np.float64(a[s]), np.float64(d[s])
        cp, ca, cd = cur_pad[i, 0], cur_pad[i, 1], cur_pad[i, 2]
        dot = ps * cp + as_ * ca + ds * cd
        emo = (dot / (np.maximum(np.sqrt(ps * ps + as_ * as_ + ds * ds), 1e-8)
                      * np.maximum(np.sqrt(cp * cp + ca * ca + cd * cd), 1e-8)) + 1.0) / 2.0
        if charge_fading:
            i0s = np.float64(i0[s])
            now_i = charge_at(i0[s], created_ms[s], reactivated[s], last_react_ms[s], now_ms, half_life_ms,
                              react_boost, two)
            emo = 0.5 + (emo - 0.5) * np.minimum(1.0, np.maximum(0.0, now_i / np.maximum(i0s, 1e-8)))
        out[i, 0] = sem
        out[i, 1] = temporal
        out[i, 2] = np.float64(importance[s])
        out[i, 3] = emo if has_tag[s] else 0.5
    return out


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
