"""Curator (SPEC §7): counter emotional lock-in by rebalancing, re-evaluating and consolidating.

The pass itself is in `golem.curation`; this module holds the formulas of the spec.
"""
from __future__ import annotations

from collections.abc import Sequence


def emotional_balance(pleasures: Sequence[float], arousals: Sequence[float], n_total: int,
                      valence_gain: float = 0.4, arousal_floor: float = 0.3,
                      arousal_gain: float = 0.3) -> tuple[float, float]:
    """(valence_correction, arousal_correction) over the entries since the last pass.

    Only tagged entries contribute P and A, but every entry counts in n: untagged ones dilute the
    mean toward neutral. valence_correction = -mean_valence * 0.4;
    arousal_correction = max(mean_arousal - 0.3, 0) * -0.3.
    """
    n = max(n_total, 1)
    mean_valence = sum(pleasures) / n
    mean_arousal = sum(arousals) / n
    return -mean_valence * valence_gain, max(mean_arousal - arousal_floor, 0.0) * -arousal_gain


def curator_weights(pleasures: Sequence[float], arousals: Sequence[float], tagged: Sequence[bool],
                    mean_valence: float, valence_correction: float, arousal_correction: float,
                    minority_threshold: float = 0.5, high_arousal: float = 0.5) -> list[float]:
    """Per-entry curator weight: minority-sign entries 1 + |valence_correction| when the batch is
    lopsided (|mean valence| > 0.5); entries with A > 0.5 get 1 + arousal_correction (< 1)."""
    out = []
    lopsided = abs(mean_valence) > minority_threshold
    for p, a, t in zip(pleasures, arousals, tagged):
        w = 1.0
        if t and lopsided and p != 0 and (p > 0) != (mean_valence > 0):
            w *= 1.0 + abs(valence_correction)
        if t and a > high_arousal:
            w *= 1.0 + arousal_correction
        out.append(w)
    return out
