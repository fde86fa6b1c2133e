"""Scenarios: YAML -> validated `Scenario` (SPEC §12), with errors that name file, key path and line.

A scenario says what world to build: the market (a generator or a recorded tape), the Golems and
their Clades, and overrides of any config key. The JSON Schema shipped for editors is generated
from these models (`golem-sim schema`).
"""
from __future__ import annotations

import copy
import math
import re
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator,
                      model_validator)

from sim.errors import InputError, clip, did_you_mean, escape, key, show
from sim.yaml_input import read_yaml

__all__ = ["InputError", "Scenario", "load_scenario", "read_yaml", "parse_duration", "set_dotted"]

_UNITS = {"ms": 0.001, "s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 604800}

#: longest duration or time anywhere in a scenario: 100 years (times stay exact to the
#: millisecond in a float and far inside the 64-bit millisecond range)
MAX_DURATION_S = 100 * 365.25 * 86400
#: shortest heartbeat interval and market step: 1 s (tables stamp times in milliseconds)
MIN_INTERVAL_S = 1.0
#: most Golems in a scenario (memory is checked separately, before anything is allocated)
MAX_GOLEMS = 1_000_000
#: the largest count of anything else (prefill, ids): 32-bit table columns
MAX_INT32 = 2**31 - 1
#: money, prices and TVL: large enough for any market, small enough that sums stay exact-ish
MAX_MONEY = 1e15
#: least budget or capital: a cent (a Golem's vitality is money over its starting money; a
#: denormal start such as 5e-324 turns one gas payment into -inf)
MIN_MONEY = 0.01
#: least asset price: 1e-12 (units = money / price stays far inside a float; 1e-320 gives inf)
MIN_PRICE = 1e-12
#: the most gas generated spikes may reach together (base_gwei times the multipliers of the spikes
#: that overlap): what one spike at the largest multiplier reaches on the largest base
MAX_GAS_GWEI = 1e12
#: the most bars x assets a generated market may hold (its arrays are drawn whole: 2**22 cells is
#: about 20 years of 5-minute bars of 2 assets, and half a GB while drawing)
MAX_MARKET_CELLS = 2**22
#: longest name of a scenario, asset or Clade (names go into directory names and every message)
MAX_NAME = 200


class LocatedError(ValueError):
    """A model validator's error about one field deeper than the model (pydantic places a
    validator's error at the model; `format_validation_error` appends `loc`)."""

    def __init__(self, loc: tuple, msg: str):
        super().__init__(msg)
        self.loc = tuple(loc)


def parse_duration(v: Any) -> float:
    """Seconds from a number or a string with units: '90m', '36h', '30d', '45s', '3d2h'."""
    if isinstance(v, bool):
        raise ValueError("expected a duration: seconds, or a string such as '90m', '36h', '30d'")
    if isinstance(v, (int, float)):
        secs = float(v) if not isinstance(v, int) or abs(v) < 2**1000 else math.inf
    elif isinstance(v, str):
        text = v.replace(" ", "")
        parts = re.findall(r"(-?[0-9]*\.?[0-9]+)(ms|min|s|m|h|d|w)?", text)
        if not text or len(text) > 64 or \
                not re.fullmatch(r"((-?[0-9]*\.?[0-9]+)(ms|min|s|m|h|d|w)?)+", text) or \
                (len(parts) > 1 and any(not u for _, u in parts)):
            raise ValueError(f"expected a duration such as '90m', '36h', '30d' or '3d2h', got {show(v)}")
        secs = sum(float(n) * _UNITS[u or "s"] for n, u in parts)
    else:
        raise ValueError("expected a duration: seconds, or a string such as '90m', '36h', '30d'")
    if not math.isfinite(secs):
        raise ValueError(f"expected a finite duration, got {show(v)}")
    if secs < 0:
        raise ValueError(f"expected a duration >= 0, got {show(v)}")
    if secs > MAX_DURATION_S:
        raise ValueError(f"expected a duration of at most 100 years, got {show(v)}")
    return secs


def _duration_check(low: float = 0.0, *, strict: bool = False, what: str = "a duration"):
    """A validator: a duration (or None) of at least `low` seconds (more than `low` when `strict`)."""
    def check(v):
        if v is None:
            return v
        secs = parse_duration(v)
        if (secs <= low) if strict else (secs < low):
            bound = f"> {low:g} s" if strict else f">= {low:g} s"
            raise ValueError(f"expected {what} {bound}, got {show(v)}")
        return v
    return check


def _duration_type(low: float = 0.0, *, strict: bool = False, optional: bool = False, what: str = "a duration"):
    """A duration field (kept as written, read with parse_duration) of at least `low` seconds."""
    base = Union[int, float, str, None] if optional else Union[int, float, str]
    return Annotated[base, AfterValidator(_duration_check(low, strict=strict, what=what))]


def _no_bool(v):
    if isinstance(v, bool):
        raise ValueError(f"expected a number, got {v!r}")
    return v


#: numbers: never a boolean (pydantic would read true as 1); finiteness comes from allow_inf_nan
Float = Annotated[float, BeforeValidator(_no_bool)]
Int = Annotated[int, BeforeValidator(_no_bool)]

#: seconds, or a string with units ('90m', '36h', '3d2h'); kept as written, read with parse_duration
Duration = _duration_type()
OptDuration = _duration_type(optional=True)

#: `golems[].interval: bar` ticks once per bar of the market (a recorded tape's bar length)
BAR = "bar"
#: `golems[].asset: tape` is the recorded tape's only asset
TAPE_ASSET = "tape"


_interval_s = _duration_check(MIN_INTERVAL_S, what="an interval")


def _check_interval(v):
    return v if v == BAR else _interval_s(v)


#: a heartbeat cadence: a duration of at least a second, or "bar"
Interval = Annotated[Union[int, float, str, None], AfterValidator(_check_interval)]


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class Regime(_M):
    drift: Float = Field(0.0, ge=-1, le=1)        # per-step log drift
    vol: Float = Field(0.004, ge=0, le=1)         # per-step log volatility
    jump_rate: Float = Field(0.0, ge=0, le=1)
    jump_size: Float = Field(-0.05, ge=-10, le=10)  # log return of a jump
    mean_duration_s: Float = Field(86400.0, gt=0, le=MAX_DURATION_S)
    next: dict[str, Annotated[Float, Field(ge=0, le=1e9)]] | None = None

    @field_validator("next")
    @classmethod
    def _weights(cls, v):
        if v and sum(v.values()) <= 0:
            raise ValueError("transition weights are all 0; expected at least one weight > 0 (or no `next`)")
        return v


class Asset(_M):
    name: str = Field(min_length=1, max_length=MAX_NAME)
    price: Float = Field(ge=MIN_PRICE, le=MAX_MONEY)
    protocol: str = ""
    tvl: Float = Field(1e8, ge=0, le=MAX_MONEY)
    beta: Float = Field(1.0, ge=-10, le=10)
    stable: bool = False

    @model_validator(mode="after")
    def _protocol(self):
        if not self.protocol:
            self.protocol = self.name.lower() + "-pool"
        return self


class Gas(_M):
    base_gwei: Float = Field(30.0, gt=0, le=1e6)
    vol: Float = Field(0.1, ge=0, le=10)


class EventSpec(_M):
    kind: Literal["exploit", "rug_pull", "depeg", "gas_spike", "oracle_failure", "flash_crash", "liquidation"]
    at: Duration = Field(description="when: seconds or '6h'")
    asset: str | None = None
    severity: Literal["none", "low", "medium", "high"] = "high"
    impact: Float = Field(0.0, ge=-10, le=10)     # total log return over the duration
    duration: Duration = "1h"
    tokens: str | None = None
    gas_multiplier: Float = Field(5.0, gt=0, le=1e6)
    recover: bool = True
    detect_lag: Duration = 0
    detect_jitter: Duration = 0
    early_detectors: list[Annotated[Int, Field(ge=0, lt=MAX_GOLEMS)]] = Field(default_factory=list)

    @property
    def at_s(self) -> float:
        return parse_duration(self.at)

    @property
    def duration_s(self) -> float:
        return parse_duration(self.duration)

    @property
    def detect_lag_s(self) -> float:
        return parse_duration(self.detect_lag)

    @property
    def detect_jitter_s(self) -> float:
        return parse_duration(self.detect_jitter)



class ForcedRegime(_M):
    at: Duration
    regime: str

    @property
    def at_s(self) -> float:
        return parse_duration(self.at)



def _default_regimes() -> dict[str, Regime]:
    return {
        "calm": Regime(drift=0.0, vol=0.003, mean_duration_s=4 * 86400, next={"bull": 0.5, "bear": 0.5}),
        "bull": Regime(drift=0.0003, vol=0.004, mean_duration_s=2 * 86400, next={"calm": 0.7, "bear": 0.3}),
        "bear": Regime(drift=-0.0003, vol=0.005, mean_duration_s=2 * 86400, next={"calm": 0.7, "crash": 0.1, "bull": 0.2}),
        "crash": Regime(drift=-0.004, vol=0.015, jump_rate=0.02, jump_size=-0.05, mean_duration_s=6 * 3600,
                        next={"bear": 0.6, "calm": 0.4}),
    }


def _default_assets() -> list[Asset]:
    return [Asset(name="ETH", price=3000.0, protocol="uniswap", tvl=5e8),
            Asset(name="BTC", price=60000.0, protocol="curve", tvl=8e8, beta=0.8)]


class TapeSpec(_M):
    """A recorded tape (Parquet written by `golem-sim import-tape`) and its event detectors."""

    path: str = Field(min_length=1)
    start: str | None = None       # ISO time of the first tick; default: the tape's first bar
    # a crash bar's return: below 0 (a fall) and above -0.5 (the 2-bar rule doubles it)
    crash_return: Float = Field(-0.05, gt=-0.5, lt=0)
    crash_high: Float = Field(-0.10, gt=-1, lt=0)
    funding_abs: Float = Field(0.001, gt=0, le=1)
    detect_lag: Duration = 0

    @field_validator("start", mode="before")
    @classmethod
    def _start(cls, v):
        # YAML and --set read 2020-03-09 as a date: keep it as the ISO text it was, then check it
        if v is None:
            return v
        v = v.isoformat() if hasattr(v, "isoformat") else v
        from datetime import datetime
        try:
            datetime.fromisoformat(str(v).strip())
        except ValueError:
            raise ValueError(f"expected an ISO date or date-time such as '2020-03-09' or '2020-03-09T00:00Z', "
                             f"got {show(v)}") from None
        return str(v)


class MarketSpec(_M):
    step_s: Float = Field(300.0, ge=MIN_INTERVAL_S, le=MAX_DURATION_S)
    #: per-step log volatility the Golems know as normal for a beta-1 asset (arousal's reference
    #: under appraisal.reference_vol: auto; an asset's normal is this times its beta)
    normal_vol: Float = Field(0.003, gt=0, le=10)
    correlation: Float = Field(0.5, ge=0, le=1)
    assets: list[Asset] = Field(default_factory=_default_assets, min_length=1, max_length=1000)
    regimes: dict[str, Regime] = Field(default_factory=_default_regimes, min_length=1, max_length=1000)
    initial_regime: str = "calm"
    regime_schedule: list[ForcedRegime] = Field(default_factory=list)
    gas: Gas = Field(default_factory=Gas)
    events: list[EventSpec] = Field(default_factory=list)
    tape: TapeSpec | str | None = None

    @model_validator(mode="after")
    def _check(self):
        if self.initial_regime not in self.regimes:
            raise LocatedError(("initial_regime",), f"{show(self.initial_regime)} is not one of the regimes "
                                                    f"{[key(r) for r in self.regimes]}")
        names = [a.name for a in self.assets]
        for i, a in enumerate(names):
            if a in names[:i]:
                raise LocatedError(("assets", i, "name"), f"asset {show(a)} is listed twice; expected unique names")
        for i, f in enumerate(self.regime_schedule):
            if f.regime not in self.regimes:
                raise LocatedError(("regime_schedule", i, "regime"),
                                   f"unknown regime {show(f.regime)}; expected one of {[key(r) for r in self.regimes]}")
        for i, e in enumerate(self.events):
            if e.asset is not None and e.asset not in names:
                raise LocatedError(("events", i, "asset"), f"event asset {show(e.asset)} is not one of the assets "
                                                           f"{[key(a) for a in names]}")
        for n, r in self.regimes.items():
            for m in (r.next or {}):
                if m not in self.regimes:
                    raise LocatedError(("regimes", n, "next", m), f"transition to unknown regime {show(m)}; "
                                                                  f"expected one of {[key(x) for x in self.regimes]}")
        if isinstance(self.tape, str):
            if not self.tape:
                raise LocatedError(("tape",), "empty path; expected the path of a tape Parquet file")
            self.tape = TapeSpec(path=self.tape)
        self._gas_peak()
        return self

    def _gas_peak(self) -> None:
        """The generated gas where the most spikes overlap (as sim.market writes them: from the
        step of `at` for max(1, duration // step) steps) stays at most MAX_GAS_GWEI, so stacked
        spikes cannot reach inf; the spike that crosses it is named."""
        step_ms = int(self.step_s * 1000)
        edges = []
        for i, e in enumerate(self.events):
            if e.kind == "gas_spike":
                t0 = int(e.at_s * 1000 // step_ms)
                n = max(1, int(e.duration_s * 1000 // step_ms))
                edges += [(t0, 1, i), (t0 + n, 0, i)]
        level = math.log(self.gas.base_gwei)
        for _, starts, i in sorted(edges):   # a spike ends before one starting on its last step + 1
            m = math.log(self.events[i].gas_multiplier)
            level += m if starts else -m
            if starts and level > math.log(MAX_GAS_GWEI) + 1e-9:
                raise LocatedError(("events", i, "gas_multiplier"),
                                   f"gas reaches {math.exp(min(level, 700)):.3g} gwei where this spike overlaps "
                                   f"others (gas.base_gwei times their multipliers); expected at most "
                                   f"{MAX_GAS_GWEI:.0e} gwei")


_PLUGIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*")
_PLUGIN_TARGET = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def _plugin_spec(spec: str) -> str:
    """Syntax of a plug-in name (sim.plugins loads it): a name, module:function or file.py:function."""
    if not isinstance(spec, str):
        raise ValueError(f"expected a name or module:function, got {spec!r}")
    if _PLUGIN_NAME.fullmatch(spec):
        return spec
    head, sep, attr = spec.rpartition(":")
    if sep and head and _PLUGIN_TARGET.fullmatch(attr) and (head.endswith(".py") or _PLUGIN_TARGET.fullmatch(head)):
        return spec
    raise ValueError(f"expected a registered name (e.g. momentum) or a plug-in as package.module:function or "
                     f"path/to/file.py:function, got {spec!r}")


#: a registered name (momentum) or a plug-in: package.module:function, path/to/file.py:function (sim.plugins)
PluginSpec = Annotated[str, AfterValidator(_plugin_spec)]


class HookSpec(_M):
    """An appraisal hook (golem.hooks) and its keyword parameters."""

    hook: PluginSpec
    params: dict[str, Any] = Field(default_factory=dict)


def _hook(v):
    return {"hook": v} if isinstance(v, str) else v


class GolemGroup(_M):
    count: Int = Field(ge=1, le=MAX_GOLEMS)
    clade: str = Field("clade-0", min_length=1, max_length=MAX_NAME)
    asset: str | None = None            # default: the first asset; "tape": the recorded tape's only asset
    temperament: tuple[Annotated[Float, Field(ge=-1, le=1)], Annotated[Float, Field(ge=-1, le=1)],
                       Annotated[Float, Field(ge=-1, le=1)]] = (0.0, 0.0, 0.0)
    strategy: PluginSpec = Field("momentum", description="momentum, mean_reversion, hodl, another registered "
                                 "name, package.module:function or path/to/file.py:function (docs/api.md)")
    strategy_params: dict[str, Any] = Field(default_factory=dict, description="keyword parameters of the strategy")
    appraisal_hooks: list[Annotated[HookSpec, BeforeValidator(_hook, json_schema_input_type=Union[PluginSpec, HookSpec])]] \
        = Field(default_factory=list, description="functions adding to the stimulus: a name or {hook, params}")
    budget: Float = Field(1000.0, ge=MIN_MONEY, le=MAX_MONEY)  # inference/gas budget (USD)
    capital: Float = Field(10_000.0, ge=MIN_MONEY, le=MAX_MONEY)
    exposure: Float = Field(0.5, ge=0, le=1)  # initial exposure
    interval: Interval = None           # heartbeat cadence (>= 1 s), or "bar" (once per bar); default heartbeat.interval_s
    start: Duration = 0                 # first heartbeat
    prefill: Int = Field(0, ge=0, le=MAX_INT32)  # memories written before the run (imports: untagged)
    spread: Float = Field(0.15, ge=0, le=1)  # individual differences: temperament, trend scale, memory weight, risk



class CladeSpec(_M):
    name: str = Field(min_length=1, max_length=MAX_NAME)
    latency: OptDuration = None   # default clade.latency_s
    jitter: OptDuration = None    # default clade.jitter_s



class Scenario(_M):
    """A world to run: market, Golems, Clades and config overrides."""

    name: str = Field(max_length=MAX_NAME)
    description: str = ""
    duration: Any
    seed: Int = Field(0, ge=0, le=2**63 - 1)
    market: MarketSpec = Field(default_factory=MarketSpec)
    golems: list[GolemGroup] = Field(min_length=1, max_length=10_000)
    clades: list[CladeSpec] = Field(default_factory=list, max_length=10_000)
    overrides: dict[str, Any] = Field(default_factory=dict)

    @field_validator("duration")
    @classmethod
    def _duration(cls, v):
        if parse_duration(v) <= 0:
            raise ValueError(f"expected a positive duration, got {show(v)}")
        return v

    @property
    def duration_s(self) -> float:
        return parse_duration(self.duration)

    @model_validator(mode="after")
    def _assets(self):
        names = [a.name for a in self.market.assets]
        for i, g in enumerate(self.golems):
            if g.asset == TAPE_ASSET and self.market.tape is None:
                raise LocatedError(("golems", i, "asset"), "golem asset 'tape' means the recorded tape's only asset; "
                                   f"expected market.tape to be set, or one of the assets {[key(a) for a in names]}")
            if g.asset is not None and g.asset not in names and self.market.tape is None:
                raise LocatedError(("golems", i, "asset"), f"golem asset {show(g.asset)} is not one of the assets "
                                                           f"{[key(a) for a in names]}")
        if self.market.tape is None:
            steps = int(self.duration_s * 1000 // int(self.market.step_s * 1000)) + 2
            cells = steps * len(self.market.assets)
            if cells > MAX_MARKET_CELLS:
                raise LocatedError(("duration",), f"{show(self.duration)} at market.step_s {self.market.step_s:g} s "
                                   f"is {steps:,} market steps of {len(self.market.assets)} assets; expected at most "
                                   f"{MAX_MARKET_CELLS:,} steps x assets (a larger market.step_s or a shorter "
                                   "duration)")
        total = sum(g.count for g in self.golems)
        if total > MAX_GOLEMS:
            raise LocatedError(("golems",), f"{total:,} Golems in all; expected at most {MAX_GOLEMS:,}")
        seen = [c.name for c in self.clades]
        for i, c in enumerate(seen):
            if c in seen[:i]:
                raise LocatedError(("clades", i, "name"), f"Clade {show(c)} is listed twice; expected unique names")
        return self


# --- loading with good errors ------------------------------------------------------------------

def _line_of(node: yaml.Node | None, loc: tuple) -> int | None:
    """Line (1-based) of the deepest YAML node along a pydantic error location."""
    line = node.start_mark.line + 1 if node is not None else None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            nxt = next((v for k, v in node.value if k.value == str(part)), None)
            if nxt is None:
                key_node = next((k for k, v in node.value if k.value == str(part)), None)
                return key_node.start_mark.line + 1 if key_node is not None else line
            node = nxt
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
        else:
            break
        line = node.start_mark.line + 1
    return line


#: pydantic puts the member type of a union (market.tape: TapeSpec | str) and validator kinds into
#: error locations; they are not keys
_NOT_KEYS = {"TapeSpec", "str", "function-after", "function-before", "function-wrap", "int", "float", "none",
             "is-instance[Path]", "[key]"}


def _model_of(tp: Any) -> Any:
    """The pydantic model inside an annotation (Optional[M], M | str, Annotated[M, ...]), or tp."""
    origin = get_origin(tp)
    if origin is Annotated:
        return _model_of(get_args(tp)[0])
    if origin is Union or str(origin) == "types.UnionType":
        for a in get_args(tp):
            m = _model_of(a)
            if isinstance(m, type) and issubclass(m, BaseModel):
                return m
    return tp


def field_at(model: Any, path: tuple) -> Any:
    """The annotation found by following `path` (keys, list indices) through nested models."""
    tp: Any = model
    for part in path:
        tp = _model_of(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            f = tp.model_fields.get(str(part))
            if f is None:
                return None
            tp = f.annotation
        elif get_origin(tp) in (list, tuple):
            args = get_args(tp)
            tp = args[0] if args else Any
        elif get_origin(tp) is dict:
            tp = get_args(tp)[1]
        else:
            return None
    return _model_of(tp)


def _keys_at(model: Any, path: tuple) -> list[str]:
    tp = field_at(model, path) if model is not None else None
    return list(tp.model_fields) if isinstance(tp, type) and issubclass(tp, BaseModel) else []


def error_path(e: dict) -> tuple:
    """A pydantic error's location as keys and indices (with a LocatedError's own tail)."""
    loc = tuple(p for p in e["loc"] if not (isinstance(p, str) and p in _NOT_KEYS))
    exc = (e.get("ctx") or {}).get("error")
    if isinstance(exc, LocatedError):
        loc = loc + exc.loc
    return loc


def _pick(errors: list[dict]) -> dict:
    """The error to report: an unknown key first (a typo also makes a required key 'missing')."""
    return next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])


def format_validation_error(err: ValidationError, source: str, node: yaml.Node | None = None, prefix: str = "",
                            model: Any = None, sets: dict[str, Any] | None = None) -> str:
    """One line: where (file:line, or the --set item that supplied the value), key path, what was
    expected. `model` (the validated model) lets an unknown key suggest the key it was meant to be."""
    errors = err.errors()
    e = _pick(errors)
    loc = error_path(e)
    dotted = ".".join(str(p) for p in loc)
    path = prefix + ".".join(key(p) for p in loc) if loc else (prefix.rstrip(".") or "(top level)")
    where = source
    set_item = _set_item_for(dotted, sets) if sets else None
    if set_item is not None:
        where = set_item
    elif node is not None:
        line = _line_of(node, loc)
        where = f"{source}:{line}" if line else source
    msg = e["msg"].removeprefix("Value error, ")
    if e["type"] == "extra_forbidden":
        allowed = _keys_at(model, loc[:-1])
        hint = did_you_mean(str(loc[-1]) if loc else "", allowed)
        msg = "unknown key" + (hint or (f"; expected one of {', '.join(allowed)}" if 0 < len(allowed) <= 12 else ""))
    elif e["type"] == "missing":
        msg = "required key is missing"
    elif e["type"] not in ("value_error", "assertion_error") and "input" in e and \
            not isinstance(e["input"], (dict, list)):
        msg += f" (got {show(e['input'])})"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {path}: {msg}{more}"


def set_text(dotted: str, value: Any) -> str:
    """A --set item as the user typed it, near enough: key=value (the value escaped and capped)."""
    text = clip(escape(value)) if isinstance(value, str) else show(value)
    return f"--set {key(dotted)}={text}"


def _matches(pattern: str, dotted: str) -> bool:
    """Does the --set key `pattern` (* for every item, -1 for the last) name `dotted`, something
    inside it, or something it is inside?"""
    a, b = pattern.split("."), dotted.split(".")
    return all(x == "*" or x == y or (x.startswith("-") and x[1:].isdigit() and y.isdigit())
               for x, y in zip(a, b))


def _set_item_for(dotted: str, sets: dict[str, Any]) -> str | None:
    """The --set item (last one wins, as in the merge) that supplied the value at `dotted`."""
    for k in reversed(list(sets)):
        if _matches(k, dotted):
            return set_text(k, sets[k])
    return None


def load_scenario(path: str | Path, sets: dict[str, Any] | None = None) -> Scenario:
    """Read and validate a scenario file; `sets` are scenario-level --set overrides (market.tape=...)."""
    raw, node = read_yaml(path)
    if not isinstance(raw, dict):
        raise InputError(f"{path}: (top level): expected a mapping of scenario keys, got {_kind(raw)}")
    for k, val in (sets or {}).items():
        set_dotted(raw, k, val, source=set_text(k, val))
    try:
        return Scenario.model_validate(raw)
    except ValidationError as err:
        raise InputError(format_validation_error(err, str(path), node, model=Scenario, sets=sets)) from None


def _kind(v: Any) -> str:
    names = {list: "a list", str: "text", int: "a number", float: "a number", bool: "a boolean"}
    return names.get(type(v), type(v).__name__)


# --- --set key paths ---------------------------------------------------------------------------

def _default_value(path: tuple) -> Any:
    """The model's default at `path` as plain data (so --set market.assets.0.price works when the
    file does not list the assets), or None."""
    if not path:
        return None
    parent = field_at(Scenario, path[:-1])
    if not (isinstance(parent, type) and issubclass(parent, BaseModel)):
        return None
    f = parent.model_fields.get(str(path[-1]))
    if f is None or f.is_required():
        return None
    value = f.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_unset=True)
    if isinstance(value, list):
        return [v.model_dump(mode="json", exclude_unset=True) if isinstance(v, BaseModel) else v for v in value]
    if isinstance(value, dict):
        return {k: v.model_dump(mode="json", exclude_unset=True) if isinstance(v, BaseModel) else v
                for k, v in value.items()}
    return None


def set_dotted(tree: dict, dotted: str, value: Any, source: str | None = None) -> None:
    """Set `dotted` in a raw scenario tree in place: mapping keys, list items by index
    (`golems.0.count`, negative from the end) and every item of a list or mapping with `*`
    (`golems.*.asset`, `market.regimes.*.vol`). Missing mappings are created, lists and mappings
    the file leaves out start from the model's defaults; an index past the end is an error."""
    source = source or f"--set {key(dotted)}"
    parts = dotted.split(".")
    if not dotted or any(p == "" for p in parts):
        raise InputError(f"{source}: {key(dotted)}: empty key part; expected key.key, key.0.key or key.*.key")
    _set_in(tree, parts, value, (), source)


def _set_in(cur: Any, parts: list[str], value: Any, done: tuple, source: str) -> None:
    p, rest = parts[0], parts[1:]
    here = ".".join(key(x) for x in done)
    if isinstance(cur, list):
        if p == "*":
            targets = range(len(cur))
        else:
            try:
                i = int(p)
            except ValueError:
                raise InputError(f"{source}: {here} is a list; expected an item index ({here}.0.{key(p)}) or * "
                                 f"for every item ({here}.*.{key(p)})") from None
            if not -len(cur) <= i < len(cur):
                have = f"items 0..{len(cur) - 1}" if cur else "no items"
                raise InputError(f"{source}: {here}.{key(p)}: no such item; {here} has {have}")
            targets = [i % len(cur)]
        for i in targets:
            _set_item(cur, i, rest, value, done + (i,), source)
        return
    if isinstance(cur, dict):
        targets = list(cur) if p == "*" else [p]
        for k in targets:
            _set_item(cur, k, rest, value, done + (k,), source)
        return
    raise InputError(f"{source}: {here}: is {_kind(cur)} ({show(cur)}); expected a mapping or a list to set "
                     f"{key('.'.join(parts))} inside")


def _set_item(container: Any, k: Any, rest: list[str], value: Any, path: tuple, source: str) -> None:
    if not rest:
        container[k] = copy.deepcopy(value)
        return
    nxt = container[k] if isinstance(container, list) else container.get(k)
    if nxt is None:
        nxt = _default_value(path)
        nxt = {} if nxt is None else nxt
        container[k] = nxt
    elif isinstance(nxt, str) and path == ("market", "tape"):
        nxt = container[k] = {"path": nxt}   # market.tape: PATH is short for market.tape.path: PATH
    _set_in(nxt, rest, value, path, source)


#: the private spelling of `set_dotted`
_set_dotted = set_dotted

SCENARIO_KEYS = tuple(Scenario.model_fields)


def json_schema() -> dict:
    return Scenario.model_json_schema()
