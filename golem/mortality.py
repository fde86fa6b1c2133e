"""Mortality (SPEC §10): vitality, phases, terminal equanimity and the death reflection."""
from __future__ import annotations

import numpy as np

#: The nine categories of a death reflection; the starred ones (3, 4, 5) weigh most.
DEATH_CATEGORIES = (
    "what I did well", "what worked by luck", "what I got wrong", "what confused me",
    "what I suspect but can't prove", "what I would tell a sibling", "which memories misled me",
    "how I felt at the end", "what the market taught me",
)
HEAVY = (2, 3, 4)


def vitality(budget, budget0, value, value0) -> np.ndarray:
    return np.minimum(budget / budget0, value / value0)


def phase_of(v, cfg) -> np.ndarray:
    """0 thriving > 0.7, 1 stable > 0.4, 2 conservation > 0.2, 3 declining > 0.1, 4 terminal."""
    m = cfg.mortality
    return np.where(v > m.thriving, 0, np.where(v > m.stable, 1, np.where(v > m.conservation, 2,
                    np.where(v > m.declining, 3, 4)))).astype(np.int8)   # the first band that holds


#: exposure scale per phase: conservation halves risk, declining quarters it, terminal stops trading
PHASE_EXPOSURE = np.array([1.0, 1.0, 0.5, 0.25, 0.0, 0.0])


def terminal_drift(pad: np.ndarray, drift: float) -> np.ndarray:
    """Equanimity: A and D move toward 0, P rises a little (no anxiety at the end)."""
    out = pad.copy()
    out[:, 1] *= 1.0 - drift
    out[:, 2] *= 1.0 - drift
    out[:, 0] = np.minimum(1.0, out[:, 0] + drift * (1.0 - out[:, 0]) * 0.2)
    return out


def death_reflection(golem_id: int, cause: str, pnl: float, flashbulbs: int, emotions: dict[str, int],
                     worst_regime: str) -> dict[str, str]:
    """The nine-category reflection a dying Golem writes (text per category, deterministic)."""
    top = max(emotions, key=lambda k: (emotions[k], k)) if emotions else "neutral"
    return {
        DEATH_CATEGORIES[0]: f"kept trading for the whole life; P&L {pnl:+.2f}",
        DEATH_CATEGORIES[1]: "gains in calm regimes came from drift, not skill",
        DEATH_CATEGORIES[2]: f"held exposure into {worst_regime}; died of {cause}",
        DEATH_CATEGORIES[3]: "why similar contexts gave opposite outcomes",
        DEATH_CATEGORIES[4]: "my fearful memories were recalled more than they deserved",
        DEATH_CATEGORIES[5]: f"cut exposure when {worst_regime} begins",
        DEATH_CATEGORIES[6]: f"{flashbulbs} flashbulb memories dominated recall",
        DEATH_CATEGORIES[7]: f"mostly {top}",
        DEATH_CATEGORIES[8]: "volatility clusters; losses come in runs",
    }
