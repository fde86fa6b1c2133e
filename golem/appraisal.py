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

from golem import pad as padm

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
    seen hold its starting capital (it had that money before the run)."""
    width_ms = window_s * 1000.0 / OUTLOOK_BUCKETS
    b = np.full(ix.size, int(now_ms // width_ms), dtype=np.int64)
    last = pop.out_bucket[ix]
    fresh = last < 0
    last = np.where(fresh, b, last)
    gap = np.minimum(b - last, OUTLOOK_BUCKETS)          # buckets entered since the last tick
    opens, highs = pop.out_open[ix], pop.out_high[ix]     # copies (fancy indexing)
    if fresh.any():
        opens[fresh] = pop.value0[ix[fresh], None]
        highs[fresh] = pop.value0[ix[fresh], None]
    slot = np.arange(OUTLOOK_BUCKETS)[None, :]
    # a bucket entered now (k = b - gap + 1 .. b) starts at the current value
    age = (b[:, None] - slot) % OUTLOOK_BUCKETS           # buckets back from b, per ring slot
    entered = age < gap[:, None]
    cur = (b % OUTLOOK_BUCKETS)[:, None] == slot
    opens = np.where(entered, value[:, None], opens)
    highs = np.where(entered, value[:, None], highs)
    highs = np.where(cur, np.maximum(highs, value[:, None]), highs)
    pop.out_open[ix] = opens
    pop.out_high[ix] = highs
    pop.out_bucket[ix] = b
    start = opens[np.arange(ix.size), (b + 1) % OUTLOOK_BUCKETS]   # the oldest bucket of the window
    high = highs.max(axis=1)
    v = np.maximum(value, 0.0)
    return Outlook(window_return=v / np.maximum(start, 1e-12) - 1.0,
                   drawdown=np.clip(1.0 - v / np.maximum(high, 1e-12), 0.0, 1.0))


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


def stimulus(ap, *, pnl_rate, prediction, contradicted, look: Outlook, vol_ratio, probe_sev, impulse_a, impulse_d,
             control, worked, shock):
    """(P, A, D) stimulus arrays (SPEC §2.1), each the tanh of its terms' sum: within (-1, 1), linear for
    everyday values and saturating softly when several signals agree, so that a sustained crisis
    approaches the clamp without sitting on it.

    A's sum enters its tanh times `arousal_gain` (< 1): a crisis arouses a Golem to about 0.8, not to
    the edge, so a sibling's alarm arriving on top of it still moves it (SPEC §2.8).

    P (outcome): `outcome` (the tick's P&L, the window's return and drawdown) + prediction hit/miss
       * bonus - contradiction - the threat of a probe on the Golem's asset.
    A (intensity): tanh(k_a * (realised vol / reference vol - 1)) + probe severity + `impulse_a` (regime
       shifts and large own position changes, fading: `impulse`).
    D (control): `impulse_d` (deliberate trades that filled (+) or failed (-), fading), tanh(k_control * exposure * trend)
       (holding what rises is control, riding what falls is none), how well the last trade has worked
       since (`worked`), tanh(k_turmoil * (1 - realised vol / reference vol)) (a market wilder than
       normal is out of the Golem's hands, a calmer one in them), minus the worst shock to a held
       position (exploit or rug pull, liquidation, stop breached).
    """
    probe_p = np.array([ap.probe_threat.get(k, 0.0) for k in ("none", "low", "medium", "high")])
    sp = (outcome(ap, pnl_rate, look) + ap.prediction_bonus * prediction - ap.contradiction_penalty * contradicted
          - probe_p[probe_sev])
    probe_a = np.array([ap.probe_arousal.get(k, 0.0) for k in ("none", "low", "medium", "high")])
    sa = np.tanh(ap.k_a * (vol_ratio - 1.0)) + probe_a[probe_sev] + impulse_a
    sd = impulse_d + np.tanh(ap.k_control * control) + worked + np.tanh(ap.k_turmoil * (1.0 - vol_ratio)) - shock
    return np.tanh(sp), np.tanh(ap.arousal_gain * sa), np.tanh(sd)


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
    """Emotion codes (index into pad.EMOTION_CODES; 0 = neutral) by nearest prototype cosine."""
    v = np.stack([p, a, d], axis=1)
    n = np.linalg.norm(v, axis=1)
    cos = (v @ proto_unit.T) / np.maximum(n, 1e-8)[:, None]
    code = np.argmax(cos, axis=1) + 1  # argmax takes the first maximum: SPEC order on ties
    return np.where(n < neutral_norm, 0, code).astype(np.int8)


def intensity_batch(p, a, d) -> np.ndarray:
    return np.sqrt(p * p + a * a + d * d) / np.sqrt(3.0)


def arousal_factor_batch(a, peak: float = 0.3, width: float = 0.6) -> np.ndarray:
    """Vectorised `pad.arousal_encoding_factor`: exp(-(a - peak)^2 / (2 width^2))."""
    return np.exp(-((a - peak) ** 2) / (2 * width**2))


def label_batch(cfg, p, a, recent_losses, failed_attempts, probe_high) -> np.ndarray:
    """[S] labels as codes into grimoire.LABELS: neutral, frustration, success, risk."""
    e = cfg.emotion
    frustration = (p < 0) & (recent_losses >= e.recurring_loss_min)
    success = (p > 0) & (failed_attempts > e.success_after_failures)
    risk = ((a > e.risk_arousal) & (p < 0)) | probe_high
    return np.where(frustration, 1, np.where(success, 2, np.where(risk, 3, 0))).astype(np.int8)   # first that holds
