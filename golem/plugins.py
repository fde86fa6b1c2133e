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
from contextlib import nullcontext
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, ContextManager, Mapping

import numpy as np

from golem import mortality
from golem.grimoire import CATEGORIES
from golem.memory_writer import KINDS
from golem.population import HIST, PHASES

#: the factors of a served entry's score, in `CohortView.served_factors[..., i]` order (SPEC §4.1)
FACTORS = ("semantic", "temporal", "importance", "emotional")


class PluginError(Exception):
    """A plug-in raised, or returned something that is not what its role asks for (one line)."""


class PluginTimeout(BaseException):
    """Raised inside a plug-in call that ran past its time limit (see `Plugin.guard`). A
    BaseException, so a plug-in's own `except Exception` cannot swallow it."""

    def __init__(self, seconds: float):
        super().__init__(f"{seconds:g} s")
        self.seconds = seconds


@dataclass(frozen=True)
class Plugin:
    """A resolved plug-in: the function, its scenario parameters, and names for messages.

    `guard(seconds)` is a context manager the world supplies (sim.plugins.time_limit): it raises
    PluginTimeout in a call that runs longer than `seconds` (the run's plugins.call_timeout_s).
    The mind only calls it; arming timers is the world's business."""

    name: str                          # as the scenario wrote it ("momentum", "mod:fn", "file.py:fn")
    fn: Callable[..., Any]
    params: Mapping[str, Any] = field(default_factory=dict)
    where: str = ""                    # "<scenario file>: golems.0.strategy", for error lines
    role: str = "strategy"             # "strategy" | "appraisal hook"
    guard: Callable[[float], ContextManager] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", MappingProxyType(dict(self.params)))


def _time_limit_s(view: "CohortView") -> float | None:
    plugins = getattr(view.config, "plugins", None)
    return getattr(plugins, "call_timeout_s", None)


def call(plugin: Plugin, view: "CohortView", columns: int | None = None) -> np.ndarray:
    """Call `plugin` on `view`; the result as float64 of shape (n,) (columns None) or (n, columns).

    Raising (any exception, SystemExit and GeneratorExit included: a plug-in cannot end the
    process or pass for the engine), running past the time limit, a wrong shape, non-numbers
    (a result whose `__array__` raises included), NaN or infinity each give one `PluginError`
    line; the original exception is chained for a debugger or a notebook's traceback.
    KeyboardInterrupt passes: it cannot be told from a real Ctrl-C, so the run is interrupted."""
    n = view.n
    expected = (n,) if columns is None else (n, columns)
    what = "target exposures" if plugin.role == "strategy" else "an additive (P, A, D) stimulus"
    at = f"at t={view.now_ms / 3_600_000:g} h"
    who = f"{plugin.where}: {plugin.role} {plugin.name!r}"
    view = view.with_params(plugin.params)
    limit = _time_limit_s(view) if plugin.guard is not None else None
    try:
        with plugin.guard(limit) if limit else nullcontext():
            try:
                out = plugin.fn(view, **plugin.params)
            except (PluginTimeout, KeyboardInterrupt):
                raise
            except BaseException as exc:   # the researcher's code: any failure is reported, never swallowed
                raise PluginError(f"{who} raised {_one_line(exc)}{_origin(exc, plugin.fn)} {at}") from exc
            try:   # a result's own __array__ / __len__ / __float__ is the plug-in's code too (and timed)
                arr = np.asarray(out, dtype=np.float64)
            except (PluginTimeout, KeyboardInterrupt):
                raise
            except BaseException as exc:
                raise PluginError(f"{who} returned {_type_name(out)} {at}, which is not an array of numbers "
                                  f"({_one_line(exc)}); expected {what}: an array of numbers of shape {expected}"
                                  ) from None
    except PluginTimeout:
        raise PluginError(f"{who} ran longer than its time limit of {limit:g} s in one call {at} "
                          "(plugins.call_timeout_s); expected a faster plug-in or a larger limit") from None
    if arr.shape != expected:
        raise PluginError(f"{who} returned shape {arr.shape} for {n} Golems {at}; expected {what} of shape {expected}")
    bad = ~np.isfinite(arr) if columns is None else ~np.isfinite(arr).all(axis=1)
    if bad.any():
        rows = np.flatnonzero(bad)
        more = f" (and {rows.size - 1} more)" if rows.size > 1 else ""
        kind = "NaN" if np.isnan(arr[rows[0]]).any() else "infinity"
        raise PluginError(f"{who} returned {kind} for Golem {int(view.golem_id[rows[0]])}{more} {at}; "
                          f"expected finite {what}")
    return arr


def _type_name(obj: Any) -> str:
    try:
        return type(obj).__name__
    except Exception:   # noqa: BLE001 - a hostile metaclass
        return "an object"


def _one_line(exc: BaseException) -> str:
    try:
        text = " ".join(str(exc).split())
    except Exception:   # noqa: BLE001 - an exception whose __str__ raises is still named
        text = ""
    text = text if len(text) <= 300 else text[:297] + "..."
    return f"{_type_name(exc)}: {text}" if text else _type_name(exc)


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


_CONFIG_COPY: list = [None, None]


def _config_copy(cfg):
    """A deep copy of the run's (frozen) config, made once per config: its tables are dicts, which
    a frozen model does not freeze, and a plug-in must not reach the engine's own."""
    if cfg is None:
        return None
    if _CONFIG_COPY[0] is not cfg:
        copy = cfg.model_copy(deep=True) if hasattr(cfg, "model_copy") else cfg
        _CONFIG_COPY[:] = [cfg, copy]
    return _CONFIG_COPY[1]


def _reader(mind, ix: np.ndarray, obs, memory: Mapping[str, Any] | None, cache: dict):
    """The view's one way into the engine: a closure that returns read-only copies of rows (every
    column is gathered by fancy indexing, which copies) and plain scalars, never the population,
    the observation or the mind themselves, so no attribute of a view leads to engine state."""

    def get(name: str, make: Callable[[], np.ndarray]) -> np.ndarray:
        a = cache.get(name)
        if a is None:
            a = cache[name] = _ro(make())
        return a

    def pop(name: str) -> np.ndarray:
        return get(name, lambda: getattr(mind.pop, name)[ix])

    def asset() -> np.ndarray:
        return get("_asset", lambda: mind.pop.asset[ix].astype(np.int64))

    def tick() -> np.ndarray:
        return pop("tick")

    def mem(name: str) -> np.ndarray:
        if memory is None:
            raise AttributeError(f"{name} is known in DECIDING only (strategies), not in appraisal hooks")
        v = memory[name]
        return get("memory:" + name, lambda: np.array(v() if callable(v) else v))

    def price_ago(k: int) -> np.ndarray:
        t = tick()
        return get(f"price_ago:{k}", lambda: np.where(t < k, np.nan, mind.pop.price_hist[ix, (t - k) % HIST]))

    def price_history() -> np.ndarray:
        t, lags = tick(), np.arange(HIST - 1, -1, -1)

        def make():
            h = mind.pop.price_hist[ix[:, None], (t[:, None] - lags[None, :]) % HIST]
            return np.where(lags[None, :] > t[:, None], np.nan, h)
        return get("price_history", make)

    def bars(column: str, lookback: int) -> np.ndarray:
        table = getattr(obs, "bars", None) or {}
        if column not in table:
            raise KeyError(f"bars: no column {column!r}; expected one of {sorted(table)}")

        def make():
            col = table[column]
            steps = obs.step - np.arange(lookback - 1, -1, -1)
            vals = col[np.maximum(steps, 0)]
            vals = vals[:, asset()].T if col.ndim == 2 else np.broadcast_to(vals, (ix.size, lookback))
            return np.where(steps[None, :] < 0, np.nan, vals)
        return get(f"bars:{column}:{lookback}", make)

    def take(rows: np.ndarray):
        mem_rows = None if memory is None else {k: _subset(v, rows) for k, v in memory.items()}
        return _reader(mind, ix[rows], obs, mem_rows, {k: _ro(v[rows]) for k, v in cache.items()})

    def with_memory(signal: np.ndarray):
        return _reader(mind, ix, obs, {**memory, "memory_signal": signal},
                       {k: v for k, v in cache.items() if k != "memory:memory_signal"})

    def regime_name() -> str:
        names, r = tuple(getattr(mind, "regime_names", ())), int(obs.regime)
        return names[r] if 0 <= r < len(names) else str(r)

    ops = {
        "get": get, "pop": pop, "mem": mem, "price_ago": price_ago, "price_history": price_history, "bars": bars,
        "take": take, "with_memory": with_memory, "regime_name": regime_name, "asset": asset,
        "n": lambda: int(ix.size), "now_ms": lambda: int(obs.now_ms), "regime": lambda: int(obs.regime),
        "golem_id": lambda: get("golem_id", lambda: ix.astype(np.int64)),
        "mood": lambda: get("mood", lambda: mood_of(mind.pop)[ix]),
        "price": lambda: get("price", lambda: obs.close[asset()]),
        "probe": lambda: get("probe", lambda: np.asarray(obs.probe_sev).astype(np.int64)),
        "config": lambda: _config_copy(getattr(mind, "cfg", None)),
        "stage": lambda: "DECIDING" if memory is not None else "SENSING",
    }

    def read(op: str, *args):
        return ops[op](*args)
    return read


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
        risk_multiplier (n,) the mood's risk channel (SPEC §5: 1 + decision.risk_by_emotion of its label
        and intensity band), which the built-in strategies multiply their target by and a plug-in may ignore;
        served_ids (n, k) entry ids, -1 where nothing was served; served_scores (n, k) (NaN there);
        served_factors (n, k, 4) semantic, temporal, importance, emotional (FACTORS);
        served_valence (n, k) the tags' P (0 untagged); served_outcome (n, k) (NaN without one);
        served_confidence (n, k); what each served entry is: served_category (n, k) codes into
        CATEGORIES (episode, insight, heuristic, warning, ...), served_kind (n, k) codes into KINDS
        (price-move, event, trade, flashbulb, inherited, ...), -1 where nothing was served, and
        served_topic (n, k) its topic as a string ("ETH/flashbulb"; "" where none). E.g. "sell
        when the top memory is a warning": view.served_category[:, 0] == view.CATEGORIES.index("warning")
    Run
        params (the plug-in's scenario parameters), config (the run's frozen config)
    """

    PHASES = PHASES
    FACTORS = FACTORS
    CATEGORIES = CATEGORIES
    KINDS = KINDS
    __slots__ = ("_read", "params")

    def __init__(self, mind, ix: np.ndarray, obs, memory: Mapping[str, Any] | None = None,
                 params: Mapping[str, Any] | None = None):
        object.__setattr__(self, "_read", _reader(mind, np.asarray(ix), obs, memory, {}))
        object.__setattr__(self, "params", MappingProxyType(dict(params or {})))

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError(f"the view is read-only: cannot set {name!r}")

    @classmethod
    def _of(cls, read, params) -> "CohortView":
        view = cls.__new__(cls)
        object.__setattr__(view, "_read", read)
        object.__setattr__(view, "params", params)
        return view

    # -------------------------------------------------------------- plumbing
    def take(self, rows: np.ndarray) -> "CohortView":
        """The view of a subset of the rows (a mask or indices), e.g. the Golems of one strategy."""
        return CohortView._of(self._read("take", rows), self.params)

    def with_memory(self, memory_signal: np.ndarray) -> "CohortView":
        """The same view with another memory signal (the decision without the contrarian section)."""
        return CohortView._of(self._read("with_memory", memory_signal), self.params)

    def with_params(self, params: Mapping[str, Any]) -> "CohortView":
        return CohortView._of(self._read, MappingProxyType(dict(params)))

    n = property(lambda self: self._read("n"))
    config = property(lambda self: self._read("config"))
    now_ms = property(lambda self: self._read("now_ms"))

    # -------------------------------------------------------------- identity
    golem_id = property(lambda self: self._read("golem_id"))
    clade_id = property(lambda self: self._read("pop", "clade"))
    tick = property(lambda self: self._read("pop", "tick"))

    # -------------------------------------------------------------- affect
    pad = property(lambda self: self._read("pop", "pad"))
    temperament = property(lambda self: self._read("pop", "baseline"))
    mood = property(lambda self: self._read("mood"))

    # -------------------------------------------------------------- market
    price = property(lambda self: self._read("price"))

    def price_ago(self, k: int) -> np.ndarray:
        """(n,) the price the Golem saw k ticks ago (0 = now, k < 64); NaN before its first tick."""
        if not 0 <= k < HIST:
            raise ValueError(f"price_ago: k = {k}; expected 0 <= k < {HIST} (the history the mind keeps)")
        return self._read("price_ago", int(k))

    price_history = property(lambda self: self._read("price_history"))

    def bars(self, column: str, lookback: int = 1) -> np.ndarray:
        """(n, lookback) the tape's `column` over the last `lookback` bars known now (no
        look-ahead), oldest first; per Golem's asset for per-asset columns; NaN before the tape."""
        if lookback < 1:
            raise ValueError(f"bars: lookback = {lookback}; expected >= 1")
        return self._read("bars", column, int(lookback))

    regime = property(lambda self: self._read("regime"))
    regime_name = property(lambda self: self._read("regime_name"))
    probe = property(lambda self: self._read("probe"))
    held = property(lambda self: self._read("get", "held", lambda: self.units > 1e-12))

    # -------------------------------------------------------------- portfolio and life
    cash = property(lambda self: self._read("pop", "cash"))
    units = property(lambda self: self._read("pop", "units"))
    budget = property(lambda self: self._read("pop", "budget"))
    budget0 = property(lambda self: self._read("pop", "budget0"))
    value0 = property(lambda self: self._read("pop", "value0"))
    phase = property(lambda self: self._read("pop", "phase"))
    value = property(lambda self: self._read("get", "value", lambda: self.cash + self.units * self.price))

    @property
    def exposure(self) -> np.ndarray:
        v = self.value
        return self._read("get", "exposure",
                          lambda: np.where(v > 0, self.units * self.price / np.maximum(v, 1e-12), 0.0))

    @property
    def vitality(self) -> np.ndarray:
        return self._read("get", "vitality",
                          lambda: mortality.vitality(self.budget, self.budget0, self.value, self.value0))

    # -------------------------------------------------------------- the Golem's parameters
    trend_scale = property(lambda self: self._read("pop", "trend_scale"))
    memory_weight = property(lambda self: self._read("pop", "memory_weight"))
    risk = property(lambda self: self._read("pop", "risk"))

    # -------------------------------------------------------------- memory (DECIDING)
    memory_signal = property(lambda self: self._read("mem", "memory_signal"))
    risk_multiplier = property(lambda self: self._read("mem", "risk_multiplier"))
    served_ids = property(lambda self: self._read("mem", "served_ids"))
    served_scores = property(lambda self: self._read("mem", "served_scores"))
    served_factors = property(lambda self: self._read("mem", "served_factors"))
    served_valence = property(lambda self: self._read("mem", "served_valence"))
    served_outcome = property(lambda self: self._read("mem", "served_outcome"))
    served_confidence = property(lambda self: self._read("mem", "served_confidence"))
    served_category = property(lambda self: self._read("mem", "served_category"))
    served_kind = property(lambda self: self._read("mem", "served_kind"))
    served_topic = property(lambda self: self._read("mem", "served_topic"))

    def __repr__(self) -> str:
        return f"CohortView({self.n} Golems, {self._read('stage')}, t={self.now_ms / 3_600_000:g} h)"
