"""Strategies (SPEC §5 DECIDING): a cohort's view in, target exposures out.

A strategy is `fn(view, **params) -> (n,) target exposures` over a `golem.plugins.CohortView`; a
scenario names one per Golem group (`strategy: momentum`, `strategy: package.module:function`,
`strategy: my_file.py:function`) with `strategy_params:`. The built-ins below are written exactly
that way, so a researcher's strategy is a peer of ours, not a patch.

What the mind does with the targets (the same for every strategy, `Mind.decide`): clip to
[0, decision.max_exposure] (long-only, no borrowing); a Golem with a strong positive somatic marker
serves its cached response instead; a high-severity probe on a held asset exits (0); the mortality
phase caps it (conservation halves it, ...). The mood's risk multiplier (`decision.risk_by_emotion`,
SPEC §5) is the strategy's to apply: the built-ins do (`blend`), a plug-in reads it in its view.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from golem.config import RANGES
from golem.plugins import CohortView, Plugin, call

Strategy = Callable[..., np.ndarray]


def blend(view: CohortView, base_signal) -> np.ndarray:
    """The built-ins' decision (SPEC §5): half the base signal plus what memory says, around a
    neutral 0.5 exposure, clipped to [0, max_exposure] and scaled by the Golem's risk appetite:
    `clip(0.5 + 0.5 * base + memory_weight * golem.memory_weight * memory_signal, 0, max) * min(risk, 1 / max)`,
    times the mood's risk multiplier (SPEC §5 risk channel: affect sets risk)."""
    dc = view.config.decision
    signal = 0.5 * base_signal + dc.memory_weight * view.memory_weight * view.memory_signal
    return (np.clip(0.5 + signal, 0.0, dc.max_exposure) * np.minimum(view.risk, 1.0 / dc.max_exposure)
            * view.risk_multiplier)


def _in_range(value, key: str, kind: type):
    """`value` as a `kind` within the range of config key `key` (golem.config.RANGES), else a
    ValueError saying what was expected."""
    lim = RANGES[key]
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and \
        lim["ge"] <= value <= lim["le"] and (kind is float or float(value).is_integer())
    if not ok:
        what = "an integer" if kind is int else "a finite number"
        text = repr(value) if len(repr(value)) <= 60 else f"a {type(value).__name__}"
        raise ValueError(f"{key.split('.')[-1]}: {text}; expected {what} from {lim['ge']:g} to {lim['le']:g} "
                         f"(as {key})")
    return kind(value)


def check_trend_params(trend_window=None, trend_scale=None) -> tuple[int | None, float | None]:
    """The trend parameters of the built-ins, checked as their config keys are (decision.trend_window,
    decision.trend_scale): a scenario's `strategy_params` is checked by this before a run starts
    (sim.plugins) and the strategies read their parameters through it."""
    return (None if trend_window is None else _in_range(trend_window, "decision.trend_window", int),
            None if trend_scale is None else _in_range(trend_scale, "decision.trend_scale", float))


def trend(view: CohortView, trend_window: int | None = None, trend_scale: float | None = None) -> np.ndarray:
    """tanh(trend_scale * golem.trend_scale * momentum), momentum = price / price `trend_window`
    ticks ago - 1 (0 until the Golem has seen that many ticks). Defaults: `decision.*`."""
    trend_window, trend_scale = check_trend_params(trend_window, trend_scale)
    dc = view.config.decision
    w = dc.trend_window if trend_window is None else trend_window
    k = dc.trend_scale if trend_scale is None else trend_scale
    past = view.price_ago(w)
    mom = np.where(np.isnan(past), 0.0, view.price / past - 1.0)
    return np.tanh(k * view.trend_scale * mom)


def momentum(view: CohortView, trend_window: int | None = None, trend_scale: float | None = None) -> np.ndarray:
    """Follow the trend: base signal +trend."""
    return blend(view, trend(view, trend_window, trend_scale))


def mean_reversion(view: CohortView, trend_window: int | None = None, trend_scale: float | None = None) -> np.ndarray:
    """Fade the trend: base signal -trend."""
    return blend(view, -trend(view, trend_window, trend_scale))


def hodl(view: CohortView) -> np.ndarray:
    """Hold on: base signal +1 (memory can still talk the Golem down)."""
    return blend(view, 1.0)


momentum.check_params = mean_reversion.check_params = check_trend_params

#: registered names a scenario may use for a strategy; `register` adds to it
BUILTINS: dict[str, Strategy] = {"momentum": momentum, "mean_reversion": mean_reversion, "hodl": hodl}
REGISTRY: dict[str, Strategy] = dict(BUILTINS)


def register(name: str, fn: Strategy | None = None):
    """Register `fn` as strategy `name` (also usable as a decorator: `@register("fearful")`).

    A name registered at run time lives in this process only: the run's manifest records the
    function's import path, which is what a replay in another process loads."""
    def add(f: Strategy) -> Strategy:
        if not callable(f):
            raise TypeError(f"register({name!r}): expected a function, got {type(f).__name__}")
        REGISTRY[name] = f
        return f
    return add if fn is None else add(fn)


class StrategyTable:
    """The run's strategies; a Golem's `pop.strategy` code indexes `plugins`."""

    def __init__(self, plugins: Sequence[Plugin]):
        self.plugins = tuple(plugins)

    @classmethod
    def builtins(cls) -> "StrategyTable":
        """Codes 0, 1, 2 = momentum, mean_reversion, hodl (a Mind built without a world)."""
        return cls([Plugin(name, fn, where="strategy") for name, fn in BUILTINS.items()])

    def targets(self, view: CohortView, codes: np.ndarray, max_exposure: float) -> np.ndarray:
        """Target exposures of the cohort, each Golem by its own strategy, clipped to [0, max]."""
        first = codes[0] if codes.size else 0
        if codes.size == 0 or (codes == first).all():
            out = call(self.plugins[int(first)], view)
        else:
            out = np.empty(view.n)
            for code in np.unique(codes):
                rows = codes == code
                out[rows] = call(self.plugins[int(code)], view.take(rows))
        return np.clip(out, 0.0, max_exposure)
