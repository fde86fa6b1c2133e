"""numba kernels for the hot loops; each has a scalar reference it is tested against.

`retrieve_batch` is the four-factor retrieval of SPEC §4.1 fused into one pass over each Golem's
slab: eligibility, semantic dot product, temporal decay, charge-faded emotional factor, the served
top-k, the salience-ranked shadow top-k (§4.2), the eligible pool's statistics (§13) and the best
non-negative entry for the anti-rumination guard (§4.3). With `live` the served ranking is the
salience-multiplied one (and equals the shadow). Arithmetic is float64 in a fixed order so
the scalar reference in `golem.retrieval` agrees to rounding.
"""
from __future__ import annotations

import numpy as np
from numba import njit

# pool statistics columns
POOL_N, POOL_SUM_EMO, POOL_SUM_VAL, POOL_BEST_NONNEG, POOL_BEST_NONNEG_SCORE = range(5)


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


@njit(cache=True)
def retrieve_batch(golems, count, cap, queries, cur_pad, valence_sign, now_ms,
                   ids, emb, last_access_ms, window_ms, status, importance, sal, confidence,
                   has_tag, p_tag, up, ua, ud, i0, created_ms, reactivated, last_react_ms,
                   weights, temporal_base, half_life_ms, react_boost, charge_fading,
                   k, sal_cap, min_conf, live,
                   out_slots, out_scores, out_factors, out_shadow, out_pool):
    b = golems.size
    d = queries.shape[1]
    for gi in range(b):
        g = golems[gi]
        lo = g * cap
        n = count[g]
        q = queries[gi]
        cp, ca, cd = cur_pad[gi, 0], cur_pad[gi, 1], cur_pad[gi, 2]
        cn = max(np.sqrt(cp * cp + ca * ca + cd * cd), 1e-8)
        cp /= cn
        ca /= cn
        cd /= cn
        vs = valence_sign[gi]
        top_s = out_slots[gi]
        top_v = out_scores[gi]
        sh_s = out_shadow[gi]
        sh_v = np.full(k, -np.inf)
        top_s[:] = -1
        top_v[:] = -np.inf
        sh_s[:] = -1
        n_el = 0
        sum_emo = 0.0
        sum_val = 0.0
        best_nn = -1
        best_nn_score = -np.inf
        for j in range(n):
            s = lo + j
            if ids[s] < 0 or status[s] == 3:
                continue
            age = now_ms - last_access_ms[s]
            if age >= 2.0 * window_ms[s]:
                continue  # expired: not retrievable
            if confidence[s] < min_conf:
                continue
            pv = p_tag[s] if has_tag[s] else 0.0
            if vs > 0 and not (has_tag[s] and pv > 0.0):
                continue
            if vs < 0 and not (has_tag[s] and pv < 0.0):
                continue
            e = emb[s]
            sem = 0.0
            for t in range(d):
                sem += np.float64(e[t]) * np.float64(q[t])
            tmp = temporal_base ** (age / 3_600_000.0)
            pc = ((up[s] * cp + ua[s] * ca + ud[s] * cd) + 1.0) / 2.0
            emo = pc
            if charge_fading and has_tag[s]:
                base = i0[s] * 2.0 ** (-(now_ms - created_ms[s]) / half_life_ms)
                boost = 0.0
                if reactivated[s] and last_react_ms[s] >= 0:
                    boost = react_boost * 2.0 ** (-(now_ms - last_react_ms[s]) / half_life_ms)
                inten = min(1.0, base + boost)
                ch = min(1.0, max(0.0, inten / max(np.float64(i0[s]), 1e-8)))
                emo = 0.5 + (pc - 0.5) * ch
            imp = np.float64(importance[s])
            score = weights[0] * sem + weights[1] * tmp + weights[2] * imp + weights[3] * emo
            n_el += 1
            sum_emo += emo
            sum_val += pv
            if pv >= 0.0 and score > best_nn_score:
                best_nn_score = score
                best_nn = s
            shadow_score = score * (1.0 + np.float64(sal[s]) * sal_cap)
            pos = _insert(top_s, top_v, k, s, shadow_score if live else score)
            if pos >= 0:
                # keep the factors aligned with the served order
                f = out_factors[gi]
                for m in range(k - 1, pos, -1):
                    f[m, 0] = f[m - 1, 0]
                    f[m, 1] = f[m - 1, 1]
                    f[m, 2] = f[m - 1, 2]
                    f[m, 3] = f[m - 1, 3]
                f[pos, 0] = sem
                f[pos, 1] = tmp
                f[pos, 2] = imp
                f[pos, 3] = emo
            _insert(sh_s, sh_v, k, s, shadow_score)
        out_pool[gi, POOL_N] = n_el
        out_pool[gi, POOL_SUM_EMO] = sum_emo
        out_pool[gi, POOL_SUM_VAL] = sum_val
        out_pool[gi, POOL_BEST_NONNEG] = best_nn
        out_pool[gi, POOL_BEST_NONNEG_SCORE] = best_nn_score
