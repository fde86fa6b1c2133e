"""Scenarios: YAML -> validated `Scenario` (SPEC §12), with errors that name file, key path and line.

A scenario says what world to build: the market (a generator or a recorded tape), the Golems and
their Clades, and overrides of any config key. The JSON Schema shipped for editors is generated
from these models (`golem-sim schema`).
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import yaml
from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, field_validator, model_validator

_UNITS = {"ms": 0.001, "s": 1, "m": 60, "min": 60, "h": 3600, "d": 86400, "w": 604800}


class InputError(Exception):
    """Bad user input: one line naming the file, the key path (and line) and what was expected."""


def parse_duration(v: Any) -> float:
    """Seconds from a number or a string with units: '90m', '36h', '30d', '45s', '3d2h'."""
    if isinstance(v, bool):
        raise ValueError("expected a duration: seconds, or a string such as '90m', '36h', '30d'")
    if isinstance(v, (int, float)):
        secs = float(v)
    elif isinstance(v, str):
        text = v.replace(" ", "")
        parts = re.findall(r"(-?[0-9]*\.?[0-9]+)(ms|min|s|m|h|d|w)?", text)
        if not text or not re.fullmatch(r"((-?[0-9]*\.?[0-9]+)(ms|min|s|m|h|d|w)?)+", text) or \
                (len(parts) > 1 and any(not u for _, u in parts)):
            raise ValueError(f"expected a duration such as '90m', '36h', '30d' or '3d2h', got {v!r}")
        secs = sum(float(n) * _UNITS[u or "s"] for n, u in parts)
    else:
        raise ValueError("expected a duration: seconds, or a string such as '90m', '36h', '30d'")
    if secs < 0:
        raise ValueError(f"expected a duration >= 0, got {v!r}")
    return secs


def _check_duration(v):
    if v is not None:
        parse_duration(v)
    return v


#: seconds, or a string with units ('90m', '36h', '3d2h'); kept as written, read with parse_duration
Duration = Annotated[Union[int, float, str], AfterValidator(_check_duration)]
OptDuration = Annotated[Union[int, float, str, None], AfterValidator(_check_duration)]

#: `golems[].interval: bar` ticks once per bar of the market (a recorded tape's bar length)
BAR = "bar"
#: `golems[].asset: tape` is the recorded tape's only asset
TAPE_ASSET = "tape"


def _check_interval(v):
    if v != BAR:
        _check_duration(v)
    return v


#: a heartbeat cadence: a duration, or "bar"
Interval = Annotated[Union[int, float, str, None], AfterValidator(_check_interval)]


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Regime(_M):
    drift: float = 0.0               # per-step log drift
    vol: float = Field(0.004, ge=0)  # per-step log volatility
    jump_rate: float = Field(0.0, ge=0, le=1)
    jump_size: float = -0.05
    mean_duration_s: float = Field(86400.0, gt=0)
    next: dict[str, float] | None = None


class Asset(_M):
    name: str
    price: float = Field(gt=0)
    protocol: str = ""
    tvl: float = Field(1e8, ge=0)
    beta: float = 1.0
    stable: bool = False

    @model_validator(mode="after")
    def _protocol(self):
        if not self.protocol:
            self.protocol = self.name.lower() + "-pool"
        return self


class Gas(_M):
    base_gwei: float = Field(30.0, gt=0)
    vol: float = Field(0.1, ge=0)


class EventSpec(_M):
    kind: Literal["exploit", "rug_pull", "depeg", "gas_spike", "oracle_failure", "flash_crash", "liquidation"]
    at: Duration = Field(description="when: seconds or '6h'")
    asset: str | None = None
    severity: Literal["none", "low", "medium", "high"] = "high"
    impact: float = 0.0
    duration: Duration = "1h"
    tokens: str | None = None
    gas_multiplier: float = 5.0
    recover: bool = True
    detect_lag: Duration = 0
    detect_jitter: Duration = 0
    early_detectors: list[int] = Field(default_factory=list)

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

    path: str
    start: str | None = None       # ISO time of the first tick; default: the tape's first bar
    crash_return: float = -0.05
    crash_high: float = -0.10
    funding_abs: float = 0.001
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
            raise ValueError(f"expected an ISO date or date-time such as '2020-03-09' or '2020-03-09T00:00Z', got {v!r}") from None
        return str(v)


class MarketSpec(_M):
    step_s: float = Field(300.0, gt=0)
    #: per-step log volatility the Golems know as normal for a beta-1 asset (arousal's reference
    #: under appraisal.reference_vol: auto; an asset's normal is this times its beta)
    normal_vol: float = Field(0.003, gt=0)
    correlation: float = Field(0.5, ge=0, le=1)
    assets: list[Asset] = Field(default_factory=_default_assets, min_length=1)
    regimes: dict[str, Regime] = Field(default_factory=_default_regimes)
    initial_regime: str = "calm"
    regime_schedule: list[ForcedRegime] = Field(default_factory=list)
    gas: Gas = Field(default_factory=Gas)
    events: list[EventSpec] = Field(default_factory=list)
    tape: TapeSpec | str | None = None

    @model_validator(mode="after")
    def _check(self):
        if self.initial_regime not in self.regimes:
            raise ValueError(f"initial_regime {self.initial_regime!r} is not one of the regimes {list(self.regimes)}")
        names = [a.name for a in self.assets]
        for f in self.regime_schedule:
            if f.regime not in self.regimes:
                raise ValueError(f"regime_schedule names unknown regime {f.regime!r}")
        for e in self.events:
            if e.asset is not None and e.asset not in names:
                raise ValueError(f"event asset {e.asset!r} is not one of the assets {names}")
        for r in self.regimes.values():
            for m in (r.next or {}):
                if m not in self.regimes:
                    raise ValueError(f"regime transition to unknown regime {m!r}")
        if isinstance(self.tape, str):
            self.tape = TapeSpec(path=self.tape)
        return self


def _plugin_spec(v):
    from sim.plugins import check_spec
    return check_spec(v)


#: a registered name (momentum) or a plug-in: package.module:function, path/to/file.py:function (sim.plugins)
PluginSpec = Annotated[str, AfterValidator(_plugin_spec)]


class HookSpec(_M):
    """An appraisal hook (golem.hooks) and its keyword parameters."""

    hook: PluginSpec
    params: dict[str, Any] = Field(default_factory=dict)


def _hook(v):
    return {"hook": v} if isinstance(v, str) else v


class GolemGroup(_M):
    count: int = Field(ge=1)
    clade: str = "clade-0"
    asset: str | None = None            # default: the first asset; "tape": the recorded tape's only asset
    temperament: tuple[float, float, float] = (0.0, 0.0, 0.0)
    strategy: PluginSpec = Field("momentum", description="momentum, mean_reversion, hodl, another registered "
                                 "name, package.module:function or path/to/file.py:function (docs/api.md)")
    strategy_params: dict[str, Any] = Field(default_factory=dict, description="keyword parameters of the strategy")
    appraisal_hooks: list[Annotated[HookSpec, BeforeValidator(_hook, json_schema_input_type=Union[PluginSpec, HookSpec])]] \
        = Field(default_factory=list, description="functions adding to the stimulus: a name or {hook, params}")
    budget: float = Field(1000.0, gt=0)  # inference/gas budget (USD)
    capital: float = Field(10_000.0, gt=0)
    exposure: float = Field(0.5, ge=0, le=1)  # initial exposure
    interval: Interval = None           # heartbeat cadence, or "bar" (once per bar); default heartbeat.interval_s
    start: Duration = 0                      # first heartbeat
    prefill: int = Field(0, ge=0)       # memories written before the run (imports: untagged)
    spread: float = Field(0.15, ge=0, le=1)  # individual differences: temperament, trend scale, memory weight, risk

    @field_validator("temperament")
    @classmethod
    def _temp(cls, v):
        if any(abs(x) > 1 for x in v):
            raise ValueError("temperament components must be in [-1, 1]")
        return v



class CladeSpec(_M):
    name: str
    latency: OptDuration = None   # default clade.latency_s
    jitter: OptDuration = None    # default clade.jitter_s



class Scenario(_M):
    """A world to run: market, Golems, Clades and config overrides."""

    name: str
    description: str = ""
    duration: Any
    seed: int = 0
    market: MarketSpec = Field(default_factory=MarketSpec)
    golems: list[GolemGroup] = Field(min_length=1)
    clades: list[CladeSpec] = Field(default_factory=list)
    overrides: dict[str, Any] = Field(default_factory=dict)

    @field_validator("duration")
    @classmethod
    def _duration(cls, v):
        if parse_duration(v) <= 0:
            raise ValueError(f"expected a positive duration, got {v!r}")
        return v

    @property
    def duration_s(self) -> float:
        return parse_duration(self.duration)

    @model_validator(mode="after")
    def _assets(self):
        names = [a.name for a in self.market.assets]
        for g in self.golems:
            if g.asset == TAPE_ASSET and self.market.tape is None:
                raise ValueError("golem asset 'tape' means the recorded tape's only asset; expected market.tape "
                                 f"to be set, or one of the assets {names}")
            if g.asset is not None and g.asset not in names and self.market.tape is None:
                raise ValueError(f"golem asset {g.asset!r} is not one of the assets {names}")
        return self


# --- loading with good errors ------------------------------------------------------------------

def _line_of(node: yaml.Node | None, loc: tuple) -> int | None:
    """Line (1-based) of the deepest YAML node along a pydantic error location."""
    line = node.start_mark.line + 1 if node is not None else None
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            nxt = next((v for k, v in node.value if k.value == str(part)), None)
            if nxt is None:
                key = next((k for k, v in node.value if k.value == str(part)), None)
                return key.start_mark.line + 1 if key is not None else line
            node = nxt
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
        else:
            break
        line = node.start_mark.line + 1
    return line


#: pydantic puts the member type of a union (market.tape: TapeSpec | str) into error locations
_UNION_TAGS = {"TapeSpec", "str"}


def format_validation_error(err: ValidationError, source: str, node: yaml.Node | None = None, prefix: str = "") -> str:
    e = err.errors()[0]
    loc = tuple(p for p in e["loc"] if not (isinstance(p, str) and (p in ("function-after", "function-before")
                                                                    or p in _UNION_TAGS)))
    path = prefix + ".".join(str(p) for p in loc) if loc else (prefix.rstrip(".") or "(top level)")
    line = _line_of(node, loc) if node is not None else None
    where = f"{source}:{line}" if line else source
    msg = e["msg"].removeprefix("Value error, ")
    if e["type"] == "extra_forbidden":
        msg = "unknown key"
    elif e["type"] == "missing":
        msg = "required key is missing"
    more = f" (and {len(err.errors()) - 1} more)" if len(err.errors()) > 1 else ""
    return f"{where}: {path}: {msg}{more}"


def read_yaml(path: str | Path) -> tuple[Any, yaml.Node | None]:
    p = Path(path)
    if not p.exists():
        raise InputError(f"{p}: file not found")
    try:
        text = p.read_text()
        return yaml.safe_load(text), yaml.compose(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{p}:{mark.line + 1}" if mark else str(p)
        raise InputError(f"{where}: invalid YAML: {getattr(exc, 'problem', None) or exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{p}: cannot read: {exc}") from None


def load_scenario(path: str | Path, sets: dict[str, Any] | None = None) -> Scenario:
    """Read and validate a scenario file; `sets` are scenario-level --set overrides (market.tape=...)."""
    raw, node = read_yaml(path)
    if not isinstance(raw, dict):
        raise InputError(f"{path}: (top level): expected a mapping of scenario keys, got {type(raw).__name__}")
    for key, val in (sets or {}).items():
        _set_dotted(raw, key, val)
    try:
        return Scenario.model_validate(raw)
    except ValidationError as err:
        raise InputError(format_validation_error(err, str(path), node)) from None


def _set_dotted(tree: dict, dotted: str, value: Any) -> None:
    """tree[a][b][c] = value for 'a.b.c'; a number indexes a list ('golems.0.strategy')."""
    parts = dotted.split(".")
    cur = tree
    for i, p in enumerate(parts):
        if isinstance(cur, list):
            if not (p.isdigit() and int(p) < len(cur)):
                where = ".".join(parts[:i])
                raise InputError(f"--set {dotted}: {where} is a list of {len(cur)}; expected an index 0..{len(cur) - 1}")
            p = int(p)
        elif not isinstance(cur, dict):
            raise InputError(f"--set {dotted}: {'.'.join(parts[:i])} is {cur!r}, not a mapping")
        if i == len(parts) - 1:
            cur[p] = value
            return
        nxt = cur[p] if isinstance(cur, list) else cur.get(p)
        if not isinstance(nxt, (dict, list)):
            nxt = {} if nxt is None else nxt
            cur[p] = nxt
        cur = nxt


SCENARIO_KEYS = tuple(Scenario.model_fields)


def json_schema() -> dict:
    return Scenario.model_json_schema()
