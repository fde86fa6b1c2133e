"""Appraisal (SPEC §2.1): what a tick's observation means to each Golem, as a PAD stimulus, and the
two levels of affect it moves (emotion in minutes, mood in hours), vectorised over a cohort.

The scalar formulas are `golem.pad.emotion_step` / `mood_step`; these twins apply them to arrays.
Every term of the stimulus is a state of the market or of the Golem's book measured in simulated
time (a rate, an exponentially weighted estimate with a half-life in seconds, a window), so the same
market appraised at another cadence gives the same stimulus. The why of each constant is in
docs/decisions.md ("Appraisal").
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit, prange

from golem import pad as padm
from golem.kernels import _block_max, _fma, np_maximum, np_sum, threaded

#: buckets of the outlook window (its return and high are kept per bucket: a day each at 30 days)
OUTLOOK_BUCKETS = 30


def decay(dt_s, half_life_s) -> np.ndarray:
    """rho = 2^(-dt / H): the share of the previous state left after dt seconds."""
    return np.exp2(-np.asarray(dt_s, dtype=np.float64) / half_life_s)


@dataclass(frozen=True)
class Outlook:
    """How the Golem's book has done over the outlook window (default 30 days)."""

    window_return: np.ndarray   #: value / value at the window's start - 1
    drawdown: np.ndarray        #: 1 - value / the window's high, in [0, 1]


def outlook(pop, ix: np.ndarray, value: np.ndarray, now_ms: int, window_s: float) -> Outlook:
    """Update each Golem's outlook ring with its value now and read the window's start and high.

    The window is OUTLOOK_BUCKETS buckets of window_s / OUTLOOK_BUCKETS; a bucket keeps the first
    value seen in it and its highest. Before a Golem has lived a whole window, the buckets it has not
    seen hold its starting capital (it had that money before the run). The rings are updated in
    place, a row at a time (`_outlook_rows`)."""
    width_ms = window_s * 1000.0 / OUTLOOK_BUCKETS
    value = np.asarray(value, dtype=np.float64)
    start, high = _outlook_rows(np.asarray(ix, dtype=np.int64), value, int(now_ms // width_ms), pop.value0,
                                pop.out_open, pop.out_high, pop.out_bucket)
    v = np.maximum(value, 0.0)
    return Outlook(window_return=v / np.maximum(start, 1e-12) - 1.0,
                   drawdown=np.clip(1.0 - v / np.maximum(high, 1e-12), 0.0, 1.0))


@njit(cache=True)
def _outlook_rows(ix, value, b, value0, out_open, out_high, out_bucket):
    """`outlook`'s ring update for the rows `ix` (bucket `b` now), in place; returns each row's window
    start (the oldest bucket's first value) and high. A fresh ring (bucket -1) is filled with the
    starting capital; every bucket entered since the last tick starts at the current value."""
    nb = out_open.shape[1]
    start = np.empty(ix.size)
    high = np.empty(ix.size)
    cur = b % nb
    oldest = (b + 1) % nb
    for r in range(ix.size):
        g = ix[r]
        v = value[r]
        last = out_bucket[g]
        if last < 0:
            last = b
            for s in range(nb):
                out_open[g, s] = value0[g]
                out_high[g, s] = value0[g]
        gap = min(b - last, nb)
        top = -np.inf
        for s in range(nb):
            back = cur - s if s <= cur else cur - s + nb     # (b - s) mod nb, without a division
            if back < gap:            # entered now: buckets b - gap + 1 .. b
                out_open[g, s] = v
                out_high[g, s] = v
            if s == cur and v > out_high[g, s]:
                out_high[g, s] = v
            top = max(top, out_high[g, s])
        out_bucket[g] = b
        start[r] = out_open[g, oldest]
        high[r] = top
    return start, high


def price_history(ix, tick, price, lr, dt_s, first, now_ms, vol_window_ms, min_returns, ref, stop_window_ms,
                  price_hist, r2_hist, dt_hist, t_hist, trade_ms):
    """Record the tick in each Golem's price history ring (slot tick % HIST: price, squared log
    return, the seconds it spans, when; a Golem's first tick has seen no return) and read the ring
    once for two figures per row:

    - the realised volatility against the asset's normal `ref` (per sqrt(second)): sqrt(sum r2 /
      sum dt) / ref over the returns of the last vol_window_ms, and at least the last `min_returns`
      ones; 1 (the normal) where none spans any time, as on a Golem's first tick;
    - the peak price seen within stop_window_ms since the position was last changed (`trade_ms`),
      -inf when none, for the stop.

    The sums are numpy's of the masked rows (`kernels.np_sum`) and the peak a maximum in eight lanes
    (no NaN reaches it, so any order gives it; the ring's length, HIST, is a multiple of 8), so the
    figures are those of the array expressions bit for bit. Rows touch only their own rings (2 KB
    each, out of cache after the scan), so a cohort's are spread over numba's threads
    (`kernels.threaded`)."""
    ix = np.asarray(ix, dtype=np.int64)
    run = _price_history.on(ix.size * price_hist.shape[1])     # work: the ring slots read
    return run(ix, tick[ix], np.asarray(price, dtype=np.float64), np.asarray(lr, dtype=np.float64),
               np.asarray(dt_s, dtype=np.float64), np.asarray(first, dtype=np.bool_), int(now_ms),
               float(now_ms - vol_window_ms), int(min_returns), np.asarray(ref, dtype=np.float64),
               float(now_ms - stop_window_ms), price_hist, r2_hist, dt_hist, t_hist, trade_ms)


@threaded(cache=True, error_model="numpy")
def _price_history(ix, tick, price, lr, dt_s, first, now_ms, vol_cut_ms, min_returns, ref, stop_cut_ms, price_hist,
                   r2_hist, dt_hist, t_hist, trade_ms):
    hist = price_hist.shape[1]
    vol = np.empty(ix.size)
    peak = np.empty(ix.size)
    for r in prange(ix.size):
        dts = np.empty(hist)
        r2s = np.empty(hist)
        tops = np.empty(hist)
        g, t = ix[r], tick[r]
        slot = t % hist
        price_hist[g, slot] = price[r]
        r2_hist[g, slot] = 0.0 if first[r] else lr[r] * lr[r]
        dt_hist[g, slot] = 0.0 if first[r] else dt_s[r]
        t_hist[g, slot] = now_ms
        tr = trade_ms[g]
        for j in range(hist):     # branch-free, so it vectorises; the peak is the maximum after it
            seen_t = t_hist[g, j]
            back = slot - j if j <= slot else slot - j + hist      # (t - j) mod hist, without a division
            recent = (seen_t > vol_cut_ms) | (back < min_returns)   # j is one of the last returns
            dts[j] = dt_hist[g, j] if recent else 0.0
            r2s[j] = r2_hist[g, j] if recent else 0.0
            ph = price_hist[g, j]
            tops[j] = ph if (seen_t > stop_cut_ms) & (seen_t >= tr) & (ph == ph) else -np.inf   # ph == ph: not NaN
        top = _block_max(tops, hist)
        seen = np_sum(dts, 0, hist, 0.0)
        var = np_sum(r2s, 0, hist, 0.0) / max(seen, 1e-12) if seen > 0 else ref[r] * ref[r]
        vol[r] = np.sqrt(var) / ref[r]
        peak[r] = top
    return vol, peak


@njit(cache=True)
def what_happened(ix, close, asset_col, last_price, cash, units, last_value, interval_s, last_ms, last_regime, tick,
                  regime_seen, danger_ms, probe_sev, now_ms, regime, lookback_ticks, cooloff_ms):
    """What happened to each Golem ix[i] since its last awake tick, the start of SENSING in one
    pass (the cohort's array expressions, op for op; tests/test_affect.py holds them): its asset and
    price now; whether this is its first tick; the move price / last price (1 on a first tick), as
    a return and as the ratio whose log the caller takes; its book's value and the tick's P&L (0
    first); the seconds since (the cadence first; at least 1 ms); a regime shift (one seen before
    and another now) and whether the regime is new to it (unseen for more than lookback_ticks); the
    probe's severity; danger (a high probe now, which `danger_ms` remembers, or one within
    cooloff_ms); the move's sign. Returns (asset, price, first, ratio, ret, value, tick_pnl, dt_s,
    regime_shift, new_regime, sev, danger, sign)."""
    n = ix.size
    asset = np.empty(n, np.int64)
    price = np.empty(n)
    first = np.empty(n, np.bool_)
    ratio = np.empty(n)
    ret = np.empty(n)
    value = np.empty(n)
    tick_pnl = np.empty(n)
    dt_s = np.empty(n)
    shift = np.empty(n, np.bool_)
    new = np.empty(n, np.bool_)
    sev = np.empty(n, np.int64)
    danger = np.empty(n, np.bool_)
    sign = np.empty(n, np.int64)
    for i in range(n):
        g = ix[i]
        a = np.int64(asset_col[g])
        p = close[a]
        f = np.isnan(last_price[g])
        q = p / (p if f else last_price[g])
        r = q - 1.0
        v = cash[g] + units[g] * p
        asset[i], price[i], first[i], ratio[i], ret[i], value[i] = a, p, f, q, r, v
        tick_pnl[i] = 0.0 if f else v - last_value[g]
        dt = interval_s[g] if f else (now_ms - last_ms[g]) / 1000.0
        dt_s[i] = np_maximum(dt, 1e-3)
        lr = last_regime[g]
        shift[i] = (lr >= 0) & (lr != regime)
        new[i] = shift[i] & (tick[g] - regime_seen[g, regime] > lookback_ticks)
        sv = np.int64(probe_sev[i])
        sev[i] = sv
        if sv >= 3:
            danger_ms[g] = now_ms
        danger[i] = (sv >= 3) | (now_ms - danger_ms[g] < cooloff_ms)
        sign[i] = np.int64(np.sign(r))
    return asset, price, first, ratio, ret, value, tick_pnl, dt_s, shift, new, sev, danger, sign


def impulse(charge: np.ndarray, new: np.ndarray, dt_s: np.ndarray, half_life_s: float) -> tuple[np.ndarray, np.ndarray]:
    """A discrete happening (a regime shift, a trade) as a stimulus that fades with `half_life_s`:
    (its mean over the interval just past, the charge left at its end). It is taken to have happened
    at the start of the interval (since the last look); what is left carries over to the next one.
    Summed over ticks the stimulus is charge x H / ln 2 at any cadence, where a one-tick value would
    last as long as the heartbeat."""
    rho = decay(dt_s, half_life_s)
    start = charge + new
    return start * half_life_s * (1.0 - rho) / (np.maximum(dt_s, 1e-9) * np.log(2.0)), start * rho


def outcome(ap, pnl_rate, look: Outlook) -> np.ndarray:
    """The outcome part of P (before its final tanh): tanh(k_p * tick P&L per reference interval /
    value) + tanh(tanh(k_return * R) + tanh(k_drawdown * (outlook_free - drawdown))), R the window
    return with its everyday fluctuation (|R| <= outlook_free) taken out. It is also the ground truth
    a harsh self-evaluation is checked against (SPEC §5)."""
    free = ap.outlook_free
    shrunk = np.sign(look.window_return) * np.maximum(np.abs(look.window_return) - free, 0.0)
    return np.tanh(ap.k_p * pnl_rate) + np.tanh(np.tanh(ap.k_return * shrunk) + np.tanh(ap.k_drawdown * (free - look.drawdown)))


def stimulus(ap, *, outcome, prediction, contradicted, vol_ratio, probe_sev, impulse_a, impulse_d, control, worked,
             shock, recalled=None):
    """(P, A, D) stimulus arrays (SPEC §2.1), each the tanh of its terms' sum: within (-1, 1), linear for
    everyday values and saturating softly when several signals agree, so that a sustained crisis
    approaches the clamp without sitting on it.

    A's sum enters its tanh times `arousal_gain` (< 1): a crisis arouses a Golem to about 0.8, not to
    the edge, so a sibling's alarm arriving on top of it still moves it (SPEC §2.8).

    P (outcome): `outcome` (the tick's P&L, the window's return and drawdown: this module's `outcome`,
       which the caller keeps as the ground truth too) + prediction hit/miss * bonus - contradiction -
       the threat of a probe on the Golem's asset + recall_gain * the recalled feeling's P (`recalled`
       (n, 2): what the entries considered in the Golem's last DECIDING evoke, `recalled_rows`).
    A (intensity): tanh(k_a * (realised vol / reference vol - 1)) + probe severity + `impulse_a` (regime
       shifts and large own position changes, fading: `impulse`) + recall_gain * the recalled feeling's
       A (inside `arousal_gain`, as every term of A).
    D (control): `impulse_d` (deliberate trades that filled (+) or failed (-), fading), tanh(k_control * exposure * trend)
       (holding what rises is control, riding what falls is none), how well the last trade has worked
       since (`worked`), tanh(k_turmoil * (1 - realised vol / reference vol)) (a market wilder than
       normal is out of the Golem's hands, a calmer one in them), minus the worst shock to a held
       position (exploit or rug pull, liquidation, stop breached).
    """
    probe_p = np.array([ap.probe_threat.get(k, 0.0) for k in ("none", "low", "medium", "high")])
    sp = outcome + ap.prediction_bonus * prediction - ap.contradiction_penalty * contradicted - probe_p[probe_sev]
    probe_a = np.array([ap.probe_arousal.get(k, 0.0) for k in ("none", "low", "medium", "high")])
    sa = np.tanh(ap.k_a * (vol_ratio - 1.0)) + probe_a[probe_sev] + impulse_a
    if recalled is not None and ap.recall_gain != 0.0:
        sp = sp + ap.recall_gain * recalled[:, 0]
        sa = sa + ap.recall_gain * recalled[:, 1]
    sd = impulse_d + np.tanh(ap.k_control * control) + worked + np.tanh(ap.k_turmoil * (1.0 - vol_ratio)) - shock
    return np.tanh(sp), np.tanh(ap.arousal_gain * sa), np.tanh(sd)


@njit(cache=True)
def recalled_rows(ix, slots, scores, pending, has_tag, tp, ta, i0, created_ms, reactivated, last_react_ms, entry_id,
                  now_ms, half_life_ms, boost, out):
    """The recalled feeling of each Golem ix[i] (SPEC §2.1; scalar reference `pad.recalled_feeling` with
    `pad.recall_charge`): over the served cells slots[i] (scores[i]) and, where row i has a pending contrarian
    section (`pending[ix[i]]`, live slots), those entries at the served entries' mean score (the weight DECIDING
    gives the section, `contrarian.weigh`): w = max(score, 0) * intensity_at(now) / i0 for each tagged entry,
    out[i] = (sum w p / sum w, sum w a / sum w), (0, 0) without weight. Writes out (n, 2); returns it."""
    for i in range(slots.shape[0]):
        sw = 0.0
        sp = 0.0
        sa = 0.0
        ssum = 0.0
        nserved = 0
        for j in range(slots.shape[1]):
            s = slots[i, j]
            if s < 0:
                continue
            nserved += 1
            ssum += scores[i, j]
            if has_tag[s]:
                w = max(scores[i, j], 0.0) * _charge(s, i0, created_ms, reactivated, last_react_ms, now_ms,
                                                     half_life_ms, boost)
                sw += w
                sp += w * tp[s]
                sa += w * ta[s]
        if nserved > 0 and pending.shape[0] > 0:
            mean = max(ssum / nserved, 0.0)
            g = ix[i]
            for j in range(pending.shape[1]):
                s = pending[g, j]
                if s < 0 or entry_id[s] < 0 or not has_tag[s]:
                    continue
                w = mean * _charge(s, i0, created_ms, reactivated, last_react_ms, now_ms, half_life_ms, boost)
                sw += w
                sp += w * tp[s]
                sa += w * ta[s]
        if sw > 0.0:
            out[i, 0] = sp / sw
            out[i, 1] = sa / sw
        else:
            out[i, 0] = 0.0
            out[i, 1] = 0.0
    return out


@njit(cache=True, inline="always")
def _charge(s, i0, created_ms, reactivated, last_react_ms, now_ms, half_life_ms, boost):
    """`pad.recall_charge` of slot s at now_ms."""
    e0 = np.float64(i0[s])
    if e0 <= 1e-8:
        return 0.0
    base = e0 * 2.0 ** (-(now_ms - created_ms[s]) / half_life_ms)
    if reactivated[s] and last_react_ms[s] >= 0:
        base += boost * 2.0 ** (-(now_ms - last_react_ms[s]) / half_life_ms)
    return min(1.0, base) / e0


def risk_table(risk_by_emotion) -> np.ndarray:
    """(1 + len(EMOTIONS), 3) the risk channel's changes by emotion code (0 neutral) and intensity band."""
    t = np.zeros((len(padm.EMOTION_CODES), 3))
    for code, name in enumerate(padm.EMOTION_CODES):
        if name in risk_by_emotion:
            t[code] = risk_by_emotion[name]
    return t


def risk_multiplier_batch(mood: np.ndarray, proto_unit: np.ndarray, table: np.ndarray, max_boost: float,
                          neutral_norm: float) -> np.ndarray:
    """Vectorised `pad.risk_multiplier` over (n, 3) moods: 1 + table[label, band], within [0, 1 + max_boost]."""
    p, a, d = mood[:, 0], mood[:, 1], mood[:, 2]
    code = classify_batch(p, a, d, proto_unit, neutral_norm)
    i = intensity_batch(p, a, d)
    band = (i >= padm.RISK_BANDS[0]).astype(np.int64) + (i >= padm.RISK_BANDS[1])
    return np.minimum(np.maximum(1.0 + table[code, band], 0.0), 1.0 + max_boost)


def emotion_update(emotion: np.ndarray, stim: np.ndarray, dt_s: np.ndarray, half_life_s: float) -> np.ndarray:
    """Vectorised `pad.emotion_step` over (n, 3) rows with one dt per row."""
    rho = decay(dt_s, half_life_s)[:, None]
    return np.clip(rho * emotion + (1.0 - rho) * stim, -1.0, 1.0)


def mood_update(mood: np.ndarray, emotion: np.ndarray, baseline: np.ndarray, dt_s: np.ndarray,
                half_life_s: float) -> np.ndarray:
    """Vectorised `pad.mood_step` over (n, 3) rows with one dt per row."""
    rho = decay(dt_s, half_life_s)[:, None]
    return np.clip(baseline + (rho * (mood - baseline) + (1.0 - rho) * emotion), -1.0, 1.0)


def prototype_matrix(prototypes=None) -> np.ndarray:
    protos = prototypes or padm.load_prototypes()
    m = np.array([protos[e] for e in padm.EMOTIONS], dtype=np.float64)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def classify_batch(p, a, d, proto_unit: np.ndarray, neutral_norm: float = 0.05) -> np.ndarray:
    """Emotion codes (index into pad.EMOTION_CODES; 0 = neutral) by nearest prototype cosine
    (`_classify_rows`)."""
    p, a, d = (np.asarray(x, dtype=np.float64) for x in (p, a, d))
    out = np.empty(p.shape, np.int8)
    _classify_rows(p.ravel(), a.ravel(), d.ravel(), np.ascontiguousarray(proto_unit, dtype=np.float64),
                   float(neutral_norm), out.reshape(-1))
    return out


@njit(cache=True)
def _classify_rows(p, a, d, proto_unit, neutral_norm, out):
    """out[i] = 0 (neutral) where the PAD's norm sqrt(p^2 + a^2 + d^2) < neutral_norm, else 1 + the
    prototype with the largest cosine (the first on a tie, SPEC order; the first NaN, as argmax).
    The cosine is fma(d, u_d, fma(a, u_a, p u_p)) / max(norm, 1e-8): the operations OpenBLAS's
    dgemm performs for a cohort of more rows than one on the machines measured (docs/decisions.md,
    "Emotion codes"), written out so that a code depends on the Golem's PAD alone, not on how many
    Golems share the call (a lone row went through gemv, summed in another order), and so that it
    costs no BLAS call (~60 us after the scan, even for three rows)."""
    for i in range(out.size):
        n = np.sqrt(p[i] * p[i] + a[i] * a[i] + d[i] * d[i])
        if n < neutral_norm:
            out[i] = 0
            continue
        m = np_maximum(n, 1e-8)
        best, code = -np.inf, 0
        for e in range(proto_unit.shape[0]):
            c = _fma(d[i], proto_unit[e, 2], _fma(a[i], proto_unit[e, 1], p[i] * proto_unit[e, 0])) / m
            if np.isnan(c):
                code = e + 1
                break
            if code == 0 or c > best:
                best, code = c, e + 1
        out[i] = code


def intensity_batch(p, a, d) -> np.ndarray:
    return np.sqrt(p * p + a * a + d * d) / np.sqrt(3.0)


def arousal_factor_batch(a, peak: float = 0.3, width: float = 0.6) -> np.ndarray:
    """Vectorised `pad.arousal_encoding_factor`: exp(-(a - peak)^2 / (2 width^2))."""
    return np.exp(-((a - peak) ** 2) / (2 * width**2))


@njit(cache=True)
def label_marker_tier(ix, p, a, tick_pnl, sev, regime, sgn, window, loss_min, success_after, risk_arousal,
                      high_arousal, marker_regimes, min_strength, negative_valence, positive_valence, loss_bits,
                      failed_attempts, high_a_run, som_cnt, som_sum, som_target):
    """The end of SENSING for each Golem ix[i] of the cohort, in one pass (SPEC §5): its losing
    ticks (the tick enters the `window`-tick bit mask `loss_bits`; recent = the losses in it), the
    label ([S] codes into grimoire.LABELS, the first that holds: frustration = P < 0 with at least
    loss_min recent losses, success = P > 0 after more than success_after failed attempts (losing
    ticks in a row, counted before this tick's), risk = A > risk_arousal with P < 0 or a high probe),
    the failed attempts and the run of ticks with A > high_arousal carried on; the somatic marker of
    the tick's pattern ((min(regime, marker_regimes - 1) x 3 + sign + 1) x 4 + severity): its
    strength and valence, strong (> min_strength) and negative (< negative_valence) or positive
    (> positive_valence, with a cached target); and the inference tier: T1 for a medium probe or a
    negative marker, T2 for a high probe, T0 for a positive marker below a medium probe.
    Returns (label, recent losses, pattern, strength, valence, negative, positive, tier)."""
    n = ix.size
    mask = (1 << window) - 1
    label = np.empty(n, np.int8)
    recent = np.empty(n, np.int64)
    pattern = np.empty(n, np.int64)
    strength = np.empty(n, som_cnt.dtype)
    valence = np.empty(n, som_sum.dtype)
    neg = np.empty(n, np.bool_)
    pos = np.empty(n, np.bool_)
    tier = np.empty(n, np.int64)
    for i in range(n):
        g = ix[i]
        loss = tick_pnl[i] < 0
        bits = ((loss_bits[g] << 1) | (1 if loss else 0)) & mask
        loss_bits[g] = bits
        r = 0
        while bits:
            bits &= bits - 1
            r += 1
        recent[i] = r
        fa = failed_attempts[g]
        if p[i] < 0 and r >= loss_min:
            label[i] = 1
        elif p[i] > 0 and fa > success_after:
            label[i] = 2
        elif (a[i] > risk_arousal and p[i] < 0) or sev[i] >= 3:
            label[i] = 3
        else:
            label[i] = 0
        failed_attempts[g] = fa + 1 if loss else (0 if tick_pnl[i] > 0 else fa)
        high_a_run[g] = high_a_run[g] + 1 if a[i] > high_arousal else 0
        t = (min(regime[i], marker_regimes - 1) * 3 + (sgn[i] + 1)) * 4 + sev[i]
        pattern[i] = t
        st, va = som_cnt[g, t], som_sum[g, t]
        strength[i], valence[i] = st, va
        neg[i] = (st > min_strength) & (va < negative_valence)
        pos[i] = (st > min_strength) & (va > positive_valence) & (not np.isnan(som_target[g, t]))
        tr = 1 if (sev[i] >= 2) | neg[i] else 0
        tr = 2 if sev[i] >= 3 else tr
        tier[i] = 0 if pos[i] & (sev[i] < 2) else tr
    return label, recent, pattern, strength, valence, neg, pos, tier
