"""numba kernels for the hot loops; each has a scalar reference it is tested against.

`retrieve_batch` is the four-factor retrieval of SPEC §4.1 fused into one pass over each Golem's
slab: eligibility, semantic dot product, temporal decay, charge-faded emotional factor, the served
top-k, the salience-ranked shadow top-k (§4.2), the eligible pool's statistics (§13) and the best
non-negative entry for the anti-rumination guard (§4.3), and the pool's best semantic match (the
novelty test of §5). With `live` the served ranking is the
salience-multiplied one (and equals the shadow).

How it is fast and still exact (docs/performance.md has the measurements and the rejected variants):

- The slab is walked in blocks of `BLOCK` entries. Per block, pass 1 computes the dot products
  (SIMD within each embedding row; the row `PREFETCH_BYTES` ahead and the next block's entry
  columns are prefetched, so loads stay in flight while the CPU computes), pass 2 the other
  factors and the score of every entry of the block at once (SIMD across entries, branch-free:
  an ineligible entry gets score -inf; the exponentials by `exp2` below instead of scalar libm
  calls), pass 3 the pool sums and, for the few entries that beat a current best, the top-k
  insertions (a SIMD test skips the scalar walk for blocks with none, i.e. almost all of them).
  The block's scratch lives on the stack (L1-resident, and provably distinct from the inputs, so
  the compiler vectorises without runtime alias checks). The slab is read once.
- The semantic dot product is accumulated in float64 (a float32 x float32 product is exact in
  float64, so a fused multiply-add adds it without rounding) over 32 lanes, lane = t mod 32, each
  lane in increasing t, combined in a fixed pairwise order, then the d mod 32 tail in order. The
  order is written out as explicit vector IR (`_dot_lanes_row`), not left to the compiler or the
  CPU's vector width, so results are the same on every machine, and
  `golem.retrieval.semantic_dot` (the scalar reference) does exactly these additions in Python:
  the semantic factors agree bit for bit.
- `exp2` is a branch-free 2**x (round-to-nearest range reduction, degree-13 Taylor polynomial by
  FMA, exponent from bits) that vectorises; it is within 1 ulp of libm, so the temporal factor
  (0.995 ** hours = exp2(hours * log2 0.995)) and the charge decay differ from the reference's
  `**` by ~1e-16 relative, far inside the 1e-9 the reference API promises.
- Pool sums (emotional factor, valence) are four interleaved partial sums per block (j mod 4),
  combined pairwise and added block by block: a fixed order, so deterministic on every machine;
  they agree with a sequential sum to ~1e-15 relative.
- `retrieve_batch_parallel` runs the same per-Golem function over numba's threads (prange over
  Golems: each reads its own slab and writes its own rows, so results do not depend on threads).
- Untagged entries have unit PAD 0, so their emotional factor is 0.5 without a branch; the kernel
  still forces 0.5 for them so a stale unit vector could not make it disagree with the reference.
"""
from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import carray, njit, prange
from numba.core import cgutils, types
from numba.extending import intrinsic

# pool statistics columns
POOL_N, POOL_SUM_EMO, POOL_SUM_VAL, POOL_BEST_NONNEG, POOL_BEST_NONNEG_SCORE, POOL_BEST_SEMANTIC = range(6)
POOL_COLUMNS = 6

#: lanes of the semantic dot product (4 vectors of 8 float64)
LANES = 32
#: entries per block (scratch: 7 float64 + 1 bool arrays of BLOCK = 14.6 KB, L1-resident)
BLOCK = 256
#: how far ahead of the row being scored its embedding is prefetched (keeps ~4 KB of loads in
#: flight: bandwidth x latency; without it the dot-product pass reads at ~88 % of a plain stream)
PREFETCH_BYTES = 4096
HOUR_MS = 3_600_000.0


# ----------------------------------------------------------------------------- intrinsics
def _i32s(*idx):
    return ir.Constant(ir.VectorType(ir.IntType(32), len(idx)), list(idx))


def _emit_row_s8(context, builder, eptr, qptr, dm):
    """Emit the lane loop for one row: returns its <8 x double> s8 = (v0 + v1) + (v2 + v3), where
    lane l of v_c holds the sum over t = 8c + l (mod 32), t < dm, in increasing t.

    dm == 64 (the default embedding size) takes a straight-line copy of the same two steps."""
    intp = context.get_value_type(types.intp)
    f64v = ir.VectorType(ir.DoubleType(), 8)
    f32v = ir.VectorType(ir.FloatType(), 8)
    zero = ir.Constant(f64v, [0.0] * 8)
    fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(f64v, [f64v, f64v, f64v]), "llvm.fma.v8f64")

    def step(i, accs):
        out = []
        for c, acc in enumerate(accs):
            off = builder.add(i, ir.Constant(intp, 8 * c))
            ve = builder.load(builder.bitcast(builder.gep(eptr, [off]), f32v.as_pointer()), align=4)
            vq = builder.load(builder.bitcast(builder.gep(qptr, [off]), f64v.as_pointer()), align=8)
            # fma(e, q, acc) == acc + e*q exactly: a float32 x float32 product is exact in float64
            out.append(builder.call(fma, [builder.fpext(ve, f64v), vq, acc]))
        return out

    fast = builder.append_basic_block("dotl.d64")
    check = builder.append_basic_block("dotl.check")
    loop = builder.append_basic_block("dotl.loop")
    done = builder.append_basic_block("dotl.done")
    builder.cbranch(builder.icmp_signed("==", dm, ir.Constant(intp, 64)), fast, check)
    builder.position_at_end(fast)
    r64 = step(ir.Constant(intp, 32), step(ir.Constant(intp, 0), [zero] * 4))
    fast_end = builder.block
    builder.branch(done)
    builder.position_at_end(check)
    builder.cbranch(builder.icmp_signed(">", dm, ir.Constant(intp, 0)), loop, done)
    builder.position_at_end(loop)
    i = builder.phi(intp)
    i.add_incoming(ir.Constant(intp, 0), check)
    accs = [builder.phi(f64v) for _ in range(4)]
    for acc in accs:
        acc.add_incoming(zero, check)
    news = step(i, accs)
    nxt = builder.add(i, ir.Constant(intp, LANES))
    i.add_incoming(nxt, loop)
    for acc, new in zip(accs, news):
        acc.add_incoming(new, loop)
    builder.cbranch(builder.icmp_signed("<", nxt, dm), loop, done)
    builder.position_at_end(done)
    r = [builder.phi(f64v) for _ in news]
    for ph, new, v64 in zip(r, news, r64):
        ph.add_incoming(zero, check)
        ph.add_incoming(new, loop)
        ph.add_incoming(v64, fast_end)
    return builder.fadd(builder.fadd(r[0], r[1]), builder.fadd(r[2], r[3]))


def _dot_typing(emb, q64):
    return (isinstance(emb, types.Array) and emb.dtype == types.float32 and emb.ndim == 2 and emb.layout == "C"
            and isinstance(q64, types.Array) and q64.dtype == types.float64 and q64.ndim == 1 and q64.layout == "C")


@intrinsic
def _dot_lanes_row(typingctx, emb, row, q64, dm):
    """float64 sum over t < dm of emb[row, t] * q64[t] in 32 lanes (t mod 32), combined pairwise.

    Emitted as explicit <8 x double> vector IR, so the order of every addition is fixed here and
    not left to the compiler: s8 = (v0 + v1) + (v2 + v3) (see `_emit_row_s8`), then
    s4[l] = s8[l] + s8[l + 4], s2[l] = s4[l] + s4[l + 2], result s2[0] + s2[1].
    `emb` is a C-contiguous 2-D float32 array, `q64` a contiguous float64 array, dm a multiple of 32.
    """
    if not _dot_typing(emb, q64):
        return None
    sig = types.float64(emb, types.intp, q64, types.intp)

    def codegen(context, builder, signature, args):
        e_arr = context.make_array(signature.args[0])(context, builder, args[0])
        q_arr = context.make_array(signature.args[2])(context, builder, args[2])
        row, dm = args[1], args[3]
        ncols = builder.extract_value(e_arr.shape, 1)
        s8 = _emit_row_s8(context, builder, builder.gep(e_arr.data, [builder.mul(row, ncols)]), q_arr.data, dm)
        s4 = builder.fadd(builder.shuffle_vector(s8, s8, _i32s(0, 1, 2, 3)), builder.shuffle_vector(s8, s8, _i32s(4, 5, 6, 7)))
        s2 = builder.fadd(builder.shuffle_vector(s4, s4, _i32s(0, 1)), builder.shuffle_vector(s4, s4, _i32s(2, 3)))
        i32 = ir.IntType(32)
        return builder.fadd(builder.extract_element(s2, ir.Constant(i32, 0)),
                            builder.extract_element(s2, ir.Constant(i32, 1)))

    return sig, codegen


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
    nb_type = types.float64 if dtype == np.float64 else types.boolean

    @intrinsic
    def impl(typingctx):
        def codegen(context, builder, signature, args):
            ty = context.get_data_type(nb_type)
            return cgutils.alloca_once(builder, ty, size=ir.Constant(ir.IntType(64), BLOCK))
        return types.CPointer(nb_type)(), codegen
    return impl


_stack_f64 = _stack_block(np.float64)
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


@njit(cache=True)
def dot_lanes(emb, row, q64):
    """The semantic dot product of `retrieve_batch` for one row (for tests): lanes, then the tail."""
    d = emb.shape[1]
    dm = d - d % LANES
    s = _dot_lanes_row(emb, row, q64, dm)
    e = emb[row]
    for t in range(dm, d):
        s += np.float64(e[t]) * q64[t]
    return s


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


@njit(cache=True, error_model="numpy")
def _retrieve_golem(gi, golems, count, cap, queries, cur_pad, valence_sign, now_ms,
                    ids, emb, last_access_ms, window_ms, status, importance, sal, confidence,
                    has_tag, p_tag, up, ua, ud, i0, created_ms, reactivated, last_react_ms,
                    weights, temporal_base, half_life_ms, react_boost, charge_fading,
                    k, sal_cap, min_conf, live,
                    out_slots, out_scores, out_factors, out_shadow, out_pool, out_tagged, out_val):
    """Row gi of a batch: Golem golems[gi]'s slab scored against queries[gi] (see the module doc)."""
    d = queries.shape[1]
    dm = d - d % LANES
    lg2_per_ms = math.log2(temporal_base) / HOUR_MS
    inv_hl = 1.0 / half_life_ms
    w0, w1, w2, w3 = weights[0], weights[1], weights[2], weights[3]
    # block scratch on this call's stack (per thread when Golems run in parallel)
    sem_b = carray(_stack_f64(), BLOCK)
    tmp_b = carray(_stack_f64(), BLOCK)
    emo_b = carray(_stack_f64(), BLOCK)
    pv_b = carray(_stack_f64(), BLOCK)
    sc_b = carray(_stack_f64(), BLOCK)
    sh_b = carray(_stack_f64(), BLOCK)
    nn_b = carray(_stack_f64(), BLOCK)
    ok_b = carray(_stack_bool(), BLOCK)
    q64 = np.empty(d)
    pd = max(1, PREFETCH_BYTES // (4 * d))   # rows of prefetch distance
    sh_v = np.empty(k)
    g = golems[gi]
    lo = g * cap
    n = count[g]
    for t in range(d):
        q64[t] = np.float64(queries[gi, t])
    cp, ca, cd = cur_pad[gi, 0], cur_pad[gi, 1], cur_pad[gi, 2]
    cn = max(np.sqrt(cp * cp + ca * ca + cd * cd), 1e-8)
    cp /= cn
    ca /= cn
    cd /= cn
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
        # pass 1: semantic dot products (SIMD within each row), reading ahead
        for j in range(m):
            if b0 + j + pd < n:
                x = (s0 + j + pd) * d
                for t in range(0, d, 16):
                    _prefetch(emb, x + t)
            sem_b[j] = _dot_lanes_row(emb, s0 + j, q64, dm)
            # the next block's entry columns, one line per column as j crosses it
            if b0 + BLOCK + j < n:
                x = s0 + BLOCK + j
                if x % 8 == 0:
                    _prefetch(ids, x)
                    _prefetch(last_access_ms, x)
                    _prefetch(window_ms, x)
                    _prefetch(up, x)
                    _prefetch(ua, x)
                    _prefetch(ud, x)
                    _prefetch(created_ms, x)
                    _prefetch(last_react_ms, x)
                if x % 16 == 0:
                    _prefetch(confidence, x)
                    _prefetch(p_tag, x)
                    _prefetch(i0, x)
                    _prefetch(importance, x)
                    _prefetch(sal, x)
                if x % 64 == 0:
                    _prefetch(status, x)
                    _prefetch(has_tag, x)
                    _prefetch(reactivated, x)
        if dm < d:
            for j in range(m):
                e = emb[s0 + j]
                sem = sem_b[j]
                for t in range(dm, d):
                    sem += np.float64(e[t]) * q64[t]
                sem_b[j] = sem
        # pass 2: eligibility and the other factors for the whole block, branch-free, one
        # vectorised loop (the scratch is on the stack, so no runtime alias checks). An
        # ineligible entry gets score -inf and emotional factor and valence 0, so pass 3
        # needs no test for it.
        xid = ids[s0:s0 + m]
        xst = status[s0:s0 + m]
        xla = last_access_ms[s0:s0 + m]
        xwin = window_ms[s0:s0 + m]
        xconf = confidence[s0:s0 + m]
        xtag = has_tag[s0:s0 + m]
        xp = p_tag[s0:s0 + m]
        xup = up[s0:s0 + m]
        xua = ua[s0:s0 + m]
        xud = ud[s0:s0 + m]
        xi0 = i0[s0:s0 + m]
        xcr = created_ms[s0:s0 + m]
        xre = reactivated[s0:s0 + m]
        xlr = last_react_ms[s0:s0 + m]
        ximp = importance[s0:s0 + m]
        xsal = sal[s0:s0 + m]
        for j in range(m):
            tg = xtag[j]
            pv = np.float64(xp[j]) if tg else 0.0
            age = np.float64(now_ms - xla[j])
            ok = (xid[j] >= 0) & (xst[j] != 3) & (age < 2.0 * xwin[j]) & (np.float64(xconf[j]) >= min_conf)
            ok = ok & ((vs == 0) | ((vs > 0) & tg & (pv > 0.0)) | ((vs < 0) & tg & (pv < 0.0)))
            pc = ((xup[j] * cp + xua[j] * ca + xud[j] * cd) + 1.0) / 2.0
            if charge_fading:
                i0j = np.float64(xi0[j])
                base = i0j * exp2(np.float64(xcr[j] - now_ms) * inv_hl)
                rboost = react_boost * exp2(np.float64(xlr[j] - now_ms) * inv_hl)
                inten = min(1.0, base + (rboost if (xre[j] & (xlr[j] >= 0)) else 0.0))
                ch = min(1.0, max(0.0, inten / max(i0j, 1e-8)))
                pc = 0.5 + (pc - 0.5) * ch
            emo = pc if tg else 0.5
            tmp = exp2(age * lg2_per_ms)
            score = w0 * sem_b[j] + w1 * tmp + w2 * np.float64(ximp[j]) + w3 * emo
            ok_b[j] = ok
            pv_b[j] = pv if ok else 0.0
            emo_b[j] = emo if ok else 0.0
            tmp_b[j] = tmp
            sc_b[j] = score if ok else -np.inf
            sh_b[j] = score * (1.0 + np.float64(xsal[j]) * sal_cap) if ok else -np.inf
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
        sv_b = sh_b if live else sc_b
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
def retrieve_batch(golems, count, cap, queries, cur_pad, valence_sign, now_ms,
                   ids, emb, last_access_ms, window_ms, status, importance, sal, confidence,
                   has_tag, p_tag, up, ua, ud, i0, created_ms, reactivated, last_react_ms,
                   weights, temporal_base, half_life_ms, react_boost, charge_fading,
                   k, sal_cap, min_conf, live,
                   out_slots, out_scores, out_factors, out_shadow, out_pool, out_tagged, out_val):
    """Four-factor retrieval for a batch of Golems, one after the other (see the module doc)."""
    for gi in range(golems.size):
        _retrieve_golem(gi, golems, count, cap, queries, cur_pad, valence_sign, now_ms,
                        ids, emb, last_access_ms, window_ms, status, importance, sal, confidence,
                        has_tag, p_tag, up, ua, ud, i0, created_ms, reactivated, last_react_ms,
                        weights, temporal_base, half_life_ms, react_boost, charge_fading,
                        k, sal_cap, min_conf, live,
                        out_slots, out_scores, out_factors, out_shadow, out_pool, out_tagged, out_val)


@njit(cache=True, error_model="numpy", parallel=True)
def retrieve_batch_parallel(golems, count, cap, queries, cur_pad, valence_sign, now_ms,
                            ids, emb, last_access_ms, window_ms, status, importance, sal, confidence,
                            has_tag, p_tag, up, ua, ud, i0, created_ms, reactivated, last_react_ms,
                            weights, temporal_base, half_life_ms, react_boost, charge_fading,
                            k, sal_cap, min_conf, live,
                            out_slots, out_scores, out_factors, out_shadow, out_pool, out_tagged, out_val):
    """`retrieve_batch` with the Golems spread over numba's threads (NUMBA_NUM_THREADS).

    Each Golem reads only its slab and writes only its own output rows, so the result is the
    same, bit for bit, whatever the number of threads or their scheduling.
    """
    for gi in prange(golems.size):
        _retrieve_golem(gi, golems, count, cap, queries, cur_pad, valence_sign, now_ms,
                        ids, emb, last_access_ms, window_ms, status, importance, sal, confidence,
                        has_tag, p_tag, up, ua, ud, i0, created_ms, reactivated, last_react_ms,
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


@njit(cache=True, parallel=True, nogil=True)
def recall_served(slots, shadow, now_ms, last_access_ms, access_count, acted_on_count, last_acted_ms,
                  ids, topic, has_outcome, confidence, outcome):
    """What a recall does to the served entries, and the columns `decide` reads of them.

    For every served slot (>= 0; a row's slots are distinct, and slabs are per Golem, so no two
    rows share one): last_access_ms = now, access_count + 1 (the touch), acted_on_count + 1,
    last_acted_ms = now; then it returns column[safe] for ids, topic, has_outcome, confidence,
    outcome and access_count, each in its column's dtype, safe = the slot or 0 for an empty one (as
    np.where(slots >= 0, slots, 0) after all the touches: empty cells are read in a last serial
    pass, after the threaded one), and the ids at the shadow slots (max(shadow, 0)). A served
    slot's touch and reads come together, while its cache lines are in.

    The served entries lie anywhere in their slabs and are no longer in cache after the scan, so
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
    for i in prange(b):
        for r in range(k):
            o_shadow[i, r] = ids[max(shadow[i, r], 0)]
            s = slots[i, r]
            if s < 0:
                continue
            last_access_ms[s] = now_ms
            access_count[s] += 1
            acted_on_count[s] += 1
            last_acted_ms[s] = now_ms
            o_id[i, r] = ids[s]
            o_topic[i, r] = topic[s]
            o_has_out[i, r] = has_outcome[s]
            o_conf[i, r] = confidence[s]
            o_out[i, r] = outcome[s]
            o_acc[i, r] = access_count[s]
    for i in range(b):      # empty cells read slot 0, once every touch is done
        for r in range(k):
            if slots[i, r] < 0:
                o_id[i, r] = ids[0]
                o_topic[i, r] = topic[0]
                o_has_out[i, r] = has_outcome[0]
                o_conf[i, r] = confidence[0]
                o_out[i, r] = outcome[0]
                o_acc[i, r] = access_count[0]
    return o_id, o_topic, o_has_out, o_conf, o_out, o_acc, o_shadow


@njit(cache=True, error_model="numpy")
def served_factors_batch(slots, queries, cur_pad, now_ms, emb, last_access_ms, p, a, d, i0, created_ms,
                         last_react_ms, reactivated, has_tag, importance, temporal_base, half_life_ms,
                         react_boost, charge_fading, two, out):
    """out[i] = the four factors of entry slots[i] for queries[i] and cur_pad[i], the operations of
    `golem.retrieval.entry_factors` in its order (so the same bits): the semantic dot product in the
    kernel's lane order, powers by libm's pow as Python's `**` computes them, np.maximum/np.minimum
    where the reference uses them. For the few entries anti-rumination puts in a served set.
    `two` is 2.0, passed in: with the constant LLVM turns pow(2, x) into exp2(x), which differs
    from pow in the last bit now and then."""
    dim = queries.shape[1]
    dm = dim - dim % LANES
    q64 = np.empty(dim)
    for i in range(slots.size):
        s = slots[i]
        for t in range(dim):
            q64[t] = np.float64(queries[i, t])
        sem = _dot_lanes_row(emb, s, q64, dm)
        for t in range(dm, dim):
            sem = sem + np.float64(emb[s, t]) * q64[t]
        temporal = temporal_base ** (np.float64(now_ms - last_access_ms[s]) / HOUR_MS)
        ps, as_, ds = np.float64(p[s]), np.float64(a[s]), np.float64(d[s])
        cp, ca, cd = cur_pad[i, 0], cur_pad[i, 1], cur_pad[i, 2]
        dot = ps * cp + as_ * ca + ds * cd
        emo = (dot / (np.maximum(np.sqrt(ps * ps + as_ * as_ + ds * ds), 1e-8)
                      * np.maximum(np.sqrt(cp * cp + ca * ca + cd * cd), 1e-8)) + 1.0) / 2.0
        if charge_fading:
            i0s = np.float64(i0[s])
            now_i = i0s * two ** (np.float64(-(now_ms - created_ms[s])) / half_life_ms)
            lr = last_react_ms[s]
            boost = react_boost * two ** (np.float64(-(now_ms - lr)) / half_life_ms) if reactivated[s] and lr >= 0 else 0.0
            now_i = np.minimum(1.0, now_i + boost)
            emo = 0.5 + (emo - 0.5) * np.minimum(1.0, np.maximum(0.0, now_i / np.maximum(i0s, 1e-8)))
        out[i, 0] = sem
        out[i, 1] = temporal
        out[i, 2] = np.float64(importance[s])
        out[i, 3] = emo if has_tag[s] else 0.5
    return out
