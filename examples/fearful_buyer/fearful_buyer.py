"""A strategy plug-in: Golems that buy when they are afraid.

The hypothesis: fear marks the moments others sell, so a Golem that raises its exposure when its
own emotion is fearful (displeased and aroused, -P +A) buys the dip. Calm, it holds a middle
exposure and lets its memories move it a little. The engine calls it once per heartbeat for all
the Golems of a cohort that use it (`golem.plugins.CohortView` documents `view`), and trades
toward what it returns; docs/api.md says what the mind does after (probe exits, mortality).
"""
import numpy as np


def fear(view) -> np.ndarray:
    """Fear in [0, 1]: displeasure times arousal of the current emotion."""
    p, a = view.pad[:, 0], view.pad[:, 1]
    return np.clip(-p, 0.0, 1.0) * np.clip(a, 0.0, 1.0)


def fearful_buyer(view, fear_threshold: float = 0.2, buy: float = 1.0, calm: float = 0.5,
                  memory: float = 0.3) -> np.ndarray:
    """Target exposure `buy` while fear exceeds `fear_threshold`; otherwise `calm` plus `memory`
    times what the served memories say (memory_signal in [-1, 1]), within [0, 1]."""
    steady = np.clip(calm + memory * view.memory_signal, 0.0, 1.0)
    return np.where(fear(view) > fear_threshold, buy, steady)
