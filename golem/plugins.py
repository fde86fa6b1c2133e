"""Plug-ins: the researcher's own code inside a tick (strategies, appraisal hooks), and the view it reads.

A plug-in is a plain function over a cohort, vectorised like the rest of the mind:
`fn(view, **params) -> array`, where `view` is a `CohortView` (one row per Golem of the cohort,
read-only) and `params` are the keyword parameters the scenario gives it. The engine calls it
through `call`, which checks what comes back (shape, numbers, finite) and turns any failure into
one `PluginError` line naming the plug-in and the scenario key that chose it.

The mind never loads code: the world resolves names and files into `Plugin`s (`sim.plugins`) and
hands them over. Built-ins are plug-ins too (`golem.strategies`, `golem.hooks`).
"""
from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping

import numpy as np

from golem import mortality
from golem.population import HIST, PHASES

#: the factors of a served entry's score, in `CohortView.served_factors[..., i]` order (SPEC §4.1)
FACTORS = ("semantic", "temporal", "importance", "emotional")


class PluginError(Exception):
    """A plug-in raised, or returned something that is not what its role asks for (one line)."""


@dataclass(frozen=True)
class Plugin:
    """A resolved plug-in: the function, its scenario parameters, and names for messages."""

    name: str                          # as the scenario wrote it ("momentum", "mod:fn", "file.py:fn")
    fn: Callable[..., Any]
    params: Mapping[str, Any] = field(default_factory=dict)
    where: str = ""                    # "<scenario file>: golems.0.strategy", for error lines
    role: str = "strategy"             # "strategy" | "appraisal hook"

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", MappingProxyType(dict(self.params)))


def call(plugin: Plugin, view: "CohortView", columns: int | None = None) -> np.ndarray:
    """Call `plugin` on `view`; the result as float64 of shape (n,) (columns None) or (n, columns).

    Raising, a wrong shape, non-numbers, NaN or infinity each give one `PluginError` line; the
    original exception is chained for a debugger or a notebook's traceback."""
    n = view.n
    expected = (n,) if columns is None else (n, columns)
    what = "target exposures" if plugin.role == "strategy" else "an additive (P, A, D) stimulus"
    at = f"at t={view.now_ms / 3_600_000:g} h"
    view = view.with_params(plugin.params)
    try:
        out = plugin.fn(view, **plugin.params)
    except Exception as exc:   # the researcher's code: any failure is reported, never swallowed
        raise PluginError(f"{plugin.where}: {plugin.role} {plugin.name!r} raised {_one_line(exc)}"
                          f"{_origin(exc, plugin.fn)} {at}") from exc
    try:
        arr = np.asarray(out, dtype=np.float64)
    except (TypeError, ValueError):
        raise PluginError(f"{plugin.where}: {plugin.role} {plugin.name!r} returned {type(out).__name__} {at}; "
                          f"expected {what}: an array of numbers of shape {expected}") from None
    if arr.shape != expected:
        raise PluginError(f"{plugin.where}: {plugin.role} {plugin.name!r} returned shape {arr.shape} for {n} Golems "
                          f"{at}; expected {what} of shape {expected}")
    bad = ~np.isfinite(arr) if columns is None else ~np.isfinite(arr).all(axis=1)
    if bad.any():
        rows = np.flatnonzero(bad)
        more = f" (and {rows.size - 1} more)" if rows.size > 1 else ""
        kind = "NaN" if np.isnan(arr[rows[0]]).any() else "infinity"
        raise PluginError(f"{plugin.where}: {plugin.role} {plugin.name!r} returned {kind} for Golem "
                          f"{int(view.golem_id[rows[0]])}{more} {at}; expected finite {what}")
    return arr


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _origin(exc: BaseException, fn) -> str:
    """' (file.py:12)': the innermost frame in the plug-in's own file (else the innermost frame),
    so an error raised inside numpy still points at the plug-in's line that called it."""
    frames = traceback.extract_tb(exc.__traceback__)[1:]   # [0] is `call` itself
    if not frames:
        return ""
    own = getattr(getattr(fn, "__code__", None), "co_filename", None)
    f = next((f for f in reversed(frames) if f.filename == own), frames[-1])
    return f" ({f.filename.rsplit('/', 1)[-1]}:{f.lineno})"


def mood_of(pop) -> np.ndarray:
    """(n, 3) the population's slow mood (SPEC §2.1): the one place plug-ins and the Python API read it."""
    return pop.mood


def _subset(v, rows):
    """Rows of a memory column (an array, or a function making one), as a function computed when
    first read: a strategy reads few of them."""
    return (lambda: v()[rows]) if callable(v) else (lambda: v[rows])


def _ro(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a)
    a.flags.writeable = False
    return a


class CohortView:
    """What a plug-in may read about its cohort: one row per Golem, every array read-only.

    Built lazily: an attribute is gathered from the population the first time it is read, so a
    strategy that reads three columns pays for three. In an appraisal hook (SENSING) the affect is
    the previous tick's and the memory attributes are absent; in a strategy (DECIDING) the affect
    already holds this tick's news and the memory attributes describe this tick's recall.

    Identity and time
        n, golem_id (n,), clade_id (n,), tick (n,) the Golem's tick counter, now_ms (int, sim clock)
    Affect (SPEC §2.1)
        pad (n, 3) the emotion (P, A, D); mood (n, 3) the slow mood; temperament (n, 3) the baseline
    Market, for each Golem's asset
        price (n,) this tick's close; price_ago(k) (n,) the price k ticks ago (NaN before the first
        tick); price_history (n, 64) the last 64 tick prices, oldest first, column -1 = now (NaN
        before the first tick); bars(column, lookback=1) (n, lookback) the tape's bars known now
        (open, high, low, close, volume, tvl, gas, funding_rate), oldest first, NaN before the tape;
        regime (int) and regime_name; probe (n,) safety probe severity 0..3; held (n,) bool
    Portfolio and life
        cash, units, value (n,) at this price; exposure (n,) before this tick's trade;
        budget, budget0, value0, vitality (n,); phase (n,) codes into PHASES (last tick's phase)
    The Golem's parameters (individual differences, drawn per Golem)
        trend_scale, memory_weight, risk (n,)
    Memory (strategies only: the recall of this tick, SPEC §4-5)
        memory_signal (n,) what the served memories say about outcomes in this context, in [-1, 1];
        served_ids (n, k) entry ids, -1 where nothing was served; served_scores (n, k) (NaN there);
        served_factors (n, k, 4) semantic, temporal, importance, emotional (FACTORS);
        served_valence (n, k) the tags' P (0 untagged); served_outcome (n, k) (NaN without one);
        served_confidence (n, k)
    Run
        params (the plug-in's scenario parameters), config (the run's frozen config)
    """

    PHASES = PHASES
    FACTORS = FACTORS

    def __init__(self, mind, ix: np.ndarray, obs, memory: Mapping[str, Any] | None = None,
                 params: Mapping[str, Any] | None = None):
        self._mind, self._ix, self._obs = mind, ix, obs
        self._memory = memory
        self._cache: dict[str, np.ndarray] = {}
        self.params = MappingProxyType(dict(params or {}))

    # -------------------------------------------------------------- plumbing
    def take(self, rows: np.ndarray) -> "CohortView":
        """The view of a subset of the rows (a mask or indices), e.g. the Golems of one strategy."""
        mem = None if self._memory is None else {k: _subset(v, rows) for k, v in self._memory.items()}
        sub = CohortView(self._mind, self._ix[rows], self._obs, mem, self.params)
        sub._cache = {k: _ro(v[rows]) for k, v in self._cache.items()}
        return sub

    def with_memory(self, memory_signal: np.ndarray) -> "CohortView":
        """The same view with another memory signal (the decision without the contrarian section)."""
        sub = CohortView(self._mind, self._ix, self._obs, {**self._memory, "memory_signal": memory_signal}, self.params)
        sub._cache = {k: v for k, v in self._cache.items() if k != "memory:memory_signal"}
        return sub

    def with_params(self, params: Mapping[str, Any]) -> "CohortView":
        sub = CohortView(self._mind, self._ix, self._obs, self._memory, params)
        sub._cache = self._cache
        return sub

    def _get(self, name: str, make: Callable[[], np.ndarray]) -> np.ndarray:
        a = self._cache.get(name)
        if a is None:
            a = self._cache[name] = _ro(make())
        return a

    def _pop(self, name: str) -> np.ndarray:
        return self._get(name, lambda: getattr(self._mind.pop, name)[self._ix])

    def _mem(self, name: str) -> np.ndarray:
        if self._memory is None:
            raise AttributeError(f"{name} is known in DECIDING only (strategies), not in appraisal hooks")
        v = self._memory[name]
        return self._get("memory:" + name, lambda: np.array(v() if callable(v) else v))

    @property
    def n(self) -> int:
        return int(self._ix.size)

    @property
    def config(self):
        return self._mind.cfg

    @property
    def now_ms(self) -> int:
        return int(self._obs.now_ms)

    # -------------------------------------------------------------- identity
    golem_id = property(lambda self: self._get("golem_id", lambda: self._ix.astype(np.int64)))
    clade_id = property(lambda self: self._pop("clade"))
    tick = property(lambda self: self._pop("tick"))

    # -------------------------------------------------------------- affect
    pad = property(lambda self: self._pop("pad"))
    temperament = property(lambda self: self._pop("baseline"))

    mood = property(lambda self: self._get("mood", lambda: mood_of(self._mind.pop)[self._ix]))

    # -------------------------------------------------------------- market
    @property
    def _asset(self) -> np.ndarray:
        return self._get("_asset", lambda: self._mind.pop.asset[self._ix].astype(np.int64))

    price = property(lambda self: self._get("price", lambda: self._obs.close[self._asset]))

    def price_ago(self, k: int) -> np.ndarray:
        """(n,) the price the Golem saw k ticks ago (0 = now, k < 64); NaN before its first tick."""
        if not 0 <= k < HIST:
            raise ValueError(f"price_ago: k = {k}; expected 0 <= k < {HIST} (the history the mind keeps)")
        pop, t = self._mind.pop, self.tick
        return self._get(f"price_ago:{k}", lambda: np.where(t < k, np.nan, pop.price_hist[self._ix, (t - k) % HIST]))

    @property
    def price_history(self) -> np.ndarray:
        pop, t = self._mind.pop, self.tick
        lags = np.arange(HIST - 1, -1, -1)

        def make():
            h = pop.price_hist[self._ix[:, None], (t[:, None] - lags[None, :]) % HIST]
            return np.where(lags[None, :] > t[:, None], np.nan, h)
        return self._get("price_history", make)

    def bars(self, column: str, lookback: int = 1) -> np.ndarray:
        """(n, lookback) the tape's `column` over the last `lookback` bars known now (no
        look-ahead), oldest first; per Golem's asset for per-asset columns; NaN before the tape."""
        bars = getattr(self._obs, "bars", None) or {}
        if column not in bars:
            raise KeyError(f"bars: no column {column!r}; expected one of {sorted(bars)}")
        if lookback < 1:
            raise ValueError(f"bars: lookback = {lookback}; expected >= 1")

        def make():
            col = bars[column]
            steps = self._obs.step - np.arange(lookback - 1, -1, -1)
            vals = col[np.maximum(steps, 0)]
            if col.ndim == 2:
                vals = vals[:, self._asset].T
            else:
                vals = np.broadcast_to(vals, (self.n, lookback))
            return np.where(steps[None, :] < 0, np.nan, vals)
        return self._get(f"bars:{column}:{lookback}", make)

    @property
    def regime(self) -> int:
        return int(self._obs.regime)

    @property
    def regime_name(self) -> str:
        names = self._mind.regime_names
        return names[self.regime] if 0 <= self.regime < len(names) else str(self.regime)

    probe = property(lambda self: self._get("probe", lambda: np.asarray(self._obs.probe_sev).astype(np.int64)))
    held = property(lambda self: self._get("held", lambda: self.units > 1e-12))

    # -------------------------------------------------------------- portfolio and life
    cash = property(lambda self: self._pop("cash"))
    units = property(lambda self: self._pop("units"))
    budget = property(lambda self: self._pop("budget"))
    budget0 = property(lambda self: self._pop("budget0"))
    value0 = property(lambda self: self._pop("value0"))
    phase = property(lambda self: self._pop("phase"))
    value = property(lambda self: self._get("value", lambda: self.cash + self.units * self.price))

    @property
    def exposure(self) -> np.ndarray:
        v = self.value
        return self._get("exposure", lambda: np.where(v > 0, self.units * self.price / np.maximum(v, 1e-12), 0.0))

    @property
    def vitality(self) -> np.ndarray:
        return self._get("vitality", lambda: mortality.vitality(self.budget, self.budget0, self.value, self.value0))

    # -------------------------------------------------------------- the Golem's parameters
    trend_scale = property(lambda self: self._pop("trend_scale"))
    memory_weight = property(lambda self: self._pop("memory_weight"))
    risk = property(lambda self: self._pop("risk"))

    # -------------------------------------------------------------- memory (DECIDING)
    memory_signal = property(lambda self: self._mem("memory_signal"))
    served_ids = property(lambda self: self._mem("served_ids"))
    served_scores = property(lambda self: self._mem("served_scores"))
    served_factors = property(lambda self: self._mem("served_factors"))
    served_valence = property(lambda self: self._mem("served_valence"))
    served_outcome = property(lambda self: self._mem("served_outcome"))
    served_confidence = property(lambda self: self._mem("served_confidence"))

    def __repr__(self) -> str:
        stage = "DECIDING" if self._memory is not None else "SENSING"
        return f"CohortView({self.n} Golems, {stage}, t={self.now_ms / 3_600_000:g} h)"
