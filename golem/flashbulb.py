"""Flashbulb memories (SPEC §6): what triggers them and the rolling 24 h budget."""
from __future__ import annotations

import numpy as np

DAY_MS = 86_400_000
TRIGGERS = ("arousal", "pnl", "new_regime", "probe_high")


def required_arousal(n_in_window: int, base: float = 0.7, max_per_24h: int = 3, step: float = 0.1) -> float:
    """Arousal a further flashbulb needs when n are already in the window.

    Below the budget the base threshold applies (0.7); the 4th needs A > 0.8, the 5th A > 0.9, and
    a 6th would need A > 1.0, which no clamped arousal can clear.
    """
    if n_in_window < max_per_24h:
        return base
    return round(base + step * (n_in_window - (max_per_24h - 1)), 12)   # 0.7 + 0.1 is 0.8, not 0.7999...


def allowed(arousal: float, n_in_window: int, trigger: str, base: float = 0.7, max_per_24h: int = 3,
            step: float = 0.1) -> bool:
    """Within budget any trigger fires; beyond it, only if arousal clears the raised threshold."""
    if n_in_window < max_per_24h:
        return True
    return arousal > required_arousal(n_in_window, base, max_per_24h, step)


def triggers(cfg, arousal, high_a_run, tick_pnl, value, new_regime, probe_sev) -> np.ndarray:
    """(n, 4) boolean matrix of the four triggers (order of TRIGGERS).

    The arousal trigger fires on the tick a run of A > 0.7 reaches `consecutive_ticks`, not on
    every later tick of the same run: one sustained surge is one flashbulb moment.
    """
    f = cfg.flashbulb
    return np.stack([
        high_a_run == f.consecutive_ticks,   # fires once, when the run reaches its length
        np.abs(tick_pnl) > f.pnl_fraction * np.maximum(value, 1e-9),
        new_regime,
        probe_sev >= 3,
    ], axis=1)


def any_trigger(trig: np.ndarray) -> np.ndarray:
    """Per row of `triggers`, whether one holds: the four columns or-ed as rows (numpy's reduction
    along a row of four costs ~15 us a cohort, three ors of contiguous rows ~3)."""
    return np.logical_or.reduce(np.ascontiguousarray(trig.T), axis=0)


def in_window(fb_times: np.ndarray, now_ms: int) -> np.ndarray:
    return ((fb_times > now_ms - DAY_MS) & (fb_times <= now_ms)).sum(axis=1)
