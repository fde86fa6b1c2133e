"""Appraisal (SPEC §2.1): observation -> PAD stimulus -> PAD, vectorised over a cohort.

The scalar formula is `golem.pad.appraise`; these twins apply it to arrays of Golems at once.
"""
from __future__ import annotations

import numpy as np

from golem import pad as padm


def stimulus(cfg, tick_pnl, value, prediction, contradicted, vol_ratio, regime_shift, probe_sev,
             position_change, action_result, shock):
    """(P, A, D) stimulus arrays, each clipped to [-1, 1].

    P: tanh(k_p * pnl / value) + prediction (+1 hit, -1 miss, 0 none) * bonus - contradiction.
    A: tanh(k_a * (vol / ref - 1)) + regime shift + probe severity + large own position change.
    D: success of own deliberate actions (+1 filled, -1 failed) minus external shocks.
    """
    ap = cfg.appraisal
    sp = np.tanh(ap.k_p * tick_pnl / np.maximum(value, 1e-9)) + ap.prediction_bonus * prediction
    sp -= ap.contradiction_penalty * contradicted
    probe_a = np.array([ap.probe_arousal.get(k, 0.0) for k in ("none", "low", "medium", "high")])
    sa = (np.tanh(ap.k_a * (vol_ratio - 1.0)) + ap.regime_shift_arousal * regime_shift
          + probe_a[probe_sev] + ap.position_change_arousal * position_change)
    sd = np.where(action_result > 0, ap.action_success, 0.0) - np.where(action_result < 0, ap.failed_transaction, 0.0)
    sd = sd - shock
    return np.clip(sp, -1, 1), np.clip(sa, -1, 1), np.clip(sd, -1, 1)


def update(prev, stim, baseline, persistence, gain):
    """pad_t = clamp(baseline + persistence * (pad_{t-1} - baseline) + gain * stimulus)."""
    return np.clip(baseline + persistence * (prev - baseline) + gain * stim, -1.0, 1.0)


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
