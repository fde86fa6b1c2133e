"""Appraisal hooks (SPEC §2.1): the researcher's additions to a tick's stimulus.

A hook is `fn(view, **params) -> (n, 3)`: an additive (P, A, D) term per Golem, read from a
`golem.plugins.CohortView` in SENSING (the affect there is still the previous tick's). A scenario
lists hooks per Golem group (`appraisal_hooks: [funding_sentiment, {hook: mod:fn, params: {...}}]`);
the mind adds every hook's term to the stimulus it computed and clips the sum to [-1, 1], so the
emotion and mood updates see one stimulus whatever its sources. Without hooks the stimulus is
untouched.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from golem.plugins import CohortView, Plugin, call

Hook = Callable[..., np.ndarray]


def funding_sentiment(view: CohortView, scale: float = 0.001, pleasure: float = 0.3, arousal: float = 0.2) -> np.ndarray:
    """The crowd's mood from the tape's funding rate (perpetual futures): longs paying shorts is
    greed, shorts paying longs is fear. P += pleasure * tanh(funding / scale), A += arousal *
    tanh(|funding| / scale); 0 where the tape has no funding rate (generated markets)."""
    f = np.nan_to_num(view.bars("funding_rate")[:, 0], nan=0.0)
    out = np.zeros((view.n, 3))
    out[:, 0] = pleasure * np.tanh(f / scale)
    out[:, 1] = arousal * np.tanh(np.abs(f) / scale)
    return out


#: registered names a scenario may use for a hook; `register` adds to it
BUILTINS: dict[str, Hook] = {"funding_sentiment": funding_sentiment}
REGISTRY: dict[str, Hook] = dict(BUILTINS)


def register(name: str, fn: Hook | None = None):
    """Register `fn` as appraisal hook `name` (also a decorator), in this process only."""
    def add(f: Hook) -> Hook:
        if not callable(f):
            raise TypeError(f"register({name!r}): expected a function, got {type(f).__name__}")
        REGISTRY[name] = f
        return f
    return add if fn is None else add(fn)


class HookTable:
    """The run's hooks, each with the mask of the Golems (population rows) it applies to."""

    def __init__(self, hooks: Sequence[tuple[Plugin, np.ndarray]] = ()):
        self.hooks = tuple(hooks)

    def __bool__(self) -> bool:
        return bool(self.hooks)

    def add(self, mind, ix: np.ndarray, obs, stim: np.ndarray) -> np.ndarray:
        """stimulus + every applicable hook's term, clipped to [-1, 1] (the stimulus itself when
        the run has no hooks)."""
        if not self.hooks:
            return stim
        view = CohortView(mind, ix, obs)
        total = np.zeros_like(stim)
        hooked = np.zeros(ix.size, dtype=bool)
        for plugin, golems in self.hooks:
            rows = golems[ix]
            if rows.all():
                total += call(plugin, view, columns=3)
            elif rows.any():
                total[rows] += call(plugin, view.take(rows), columns=3)
            hooked |= rows
        if not hooked.any():
            return stim
        out = stim.copy()   # rows no hook applies to keep their stimulus bit for bit
        out[hooked] = np.clip(stim[hooked] + total[hooked], -1.0, 1.0)
        return out
