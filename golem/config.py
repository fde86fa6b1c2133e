"""Typed configuration: every SPEC constant as a named, validated key.

`configs/default.yaml` is the single source of truth: the pydantic model is built from it, so a
key exists exactly once and its type is the type of its default. Keys whose values are a choice
are narrowed to `Literal`s below, and every number has a range (`RANGES`, by key name; a key
without an entry still gets the range of its type: floats finite, integers 0 .. 2**31 - 1), so a
value the mind cannot run with is refused when the config is built, not hours into a run.
Unknown keys, wrong types and booleans given for numbers are errors (`extra="forbid"`). Merging
the layers (file, scenario, environment, --set) lives in `sim.config_layers`, because the mind
does no I/O beyond reading its own packaged defaults.
"""
from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, create_model

from golem.population import FB_RING, HIST

DEFAULTS_FILE = Path(__file__).resolve().parent.parent / "configs" / "default.yaml"

#: Keys restricted to a set of values (section.key -> allowed).
CHOICES: dict[str, tuple[str, ...]] = {
    "retrieval.profile": ("four_factor", "six_factor"),
    "retrieval.mode": ("standard", "somatic_hdc"),
    "retrieval.salience_rank": ("off", "shadow", "live"),
    "reflex.promotion": ("manual", "auto"),
    "grimoire.import_source": ("own", "verified", "inherited", "inferred", "speculative"),
}
#: Keys that take a number or a word (section.key -> the word).
NUMBER_OR: dict[str, str] = {
    "appraisal.reference_vol": "auto",
}


#: 100 years in seconds: the longest time a scenario may name (sim.scenario.MAX_DURATION_S)
_CENTURY_S = 3_155_760_000
_UNIT = dict(ge=0, le=1)          # probabilities, shares, weights, confidences, PAD magnitudes
_SIGNED = dict(ge=-1, le=1)       # PAD coordinates and thresholds on them
_COUNT = dict(ge=1, le=2**31 - 1)  # ticks, windows, counts of anything that must happen at least once
_DAYS = dict(ge=0, le=36_500)

#: Value ranges (pydantic Field constraints) by "section.key". A key without an entry gets the
#: range of its type (`TYPE_RANGES`); an entry for a key the defaults do not have is ignored, so
#: renaming a key only loses its specific range until the table follows.
RANGES: dict[str, dict[str, float]] = {
    "heartbeat.interval_s": dict(ge=1, le=_CENTURY_S),
    # appraisal (SPEC 2.1)
    "appraisal.emotion_half_life_s": dict(gt=0, le=_CENTURY_S), "appraisal.mood_half_life_s": dict(gt=0, le=_CENTURY_S),
    "appraisal.outlook_window_s": dict(ge=60, le=_CENTURY_S), "appraisal.outlook_free": _UNIT,
    "appraisal.k_p": dict(ge=0, le=1e4), "appraisal.k_a": dict(ge=0, le=1e4), "appraisal.k_return": dict(ge=0, le=1e4),
    "appraisal.k_drawdown": dict(ge=0, le=1e4), "appraisal.arousal_gain": dict(gt=0, le=10),
    "appraisal.reference_vol": dict(gt=0, le=10), "appraisal.reference_interval_s": dict(ge=1, le=_CENTURY_S),
    "appraisal.vol_window_s": dict(gt=0, le=_CENTURY_S),
    "appraisal.vol_min_returns": dict(ge=1, le=HIST),   # the last returns of the per-Golem ring (HIST ticks)
    "appraisal.k_turmoil": dict(ge=0, le=1e4), "appraisal.impulse_half_life_s": dict(gt=0, le=_CENTURY_S),
    "appraisal.probe_threat": _UNIT, "appraisal.stop_window_s": dict(gt=0, le=_CENTURY_S),
    "appraisal.control_half_life_s": dict(gt=0, le=_CENTURY_S), "appraisal.k_control": dict(ge=0, le=1e4),
    "appraisal.k_worked": dict(ge=0, le=1e4),
    "appraisal.prediction_bonus": _UNIT, "appraisal.contradiction_penalty": _UNIT,
    "appraisal.regime_shift_arousal": _UNIT, "appraisal.probe_arousal": _UNIT,
    "appraisal.position_change_arousal": _UNIT, "appraisal.position_change_min": _UNIT,
    "appraisal.action_success": _UNIT, "appraisal.failed_transaction": _UNIT, "appraisal.liquidation": _UNIT,
    "appraisal.stop_breach": _UNIT, "appraisal.exploit_held": _UNIT, "appraisal.stop_loss": dict(gt=0, lt=1),
    # emotion, arousal, decay (SPEC 2.2-2.6)
    "emotion.neutral_norm": dict(ge=0, le=2), "emotion.recurring_loss_window": dict(ge=1, le=63),  # bits of an int64 mask
    "emotion.recurring_loss_min": _COUNT, "emotion.success_after_failures": _COUNT,
    "emotion.risk_arousal": _SIGNED,
    "arousal.low_band": _SIGNED, "arousal.high_band": _SIGNED, "arousal.encoding_peak": _SIGNED,
    "arousal.encoding_width": dict(gt=0, le=10), "arousal.attribution_dominance": _UNIT,
    "decay.half_life_days": dict(gt=0, le=36_500), "decay.reactivation_boost": _UNIT,
    "decay.reactivation_cosine": _SIGNED,
    # grimoire, salience, confidence (SPEC 3)
    "grimoire.embedding_dim": dict(ge=1, le=8192), "grimoire.capacity": dict(ge=1, le=1_000_000),
    "grimoire.regime_conditional_days": _DAYS,
    "grimoire.tactical_days": _DAYS, "grimoire.ephemeral_days": _DAYS,
    "grimoire.protected_salience": _UNIT,
    "salience.pnl_scale": dict(gt=0, le=100), "salience.negativity": _UNIT, "salience.signal_boost": _UNIT,
    "salience.gate_min": _UNIT, "salience.tier_14d": _UNIT, "salience.tier_30d": _UNIT,
    "salience.ttl_days_low": _DAYS, "salience.ttl_days_mid": _DAYS, "salience.ttl_days_high": _DAYS,
    "salience.promotion": _UNIT, "salience.first_sighting_floor": _UNIT,
    "salience.role_observation": dict(ge=0, le=10), "salience.role_action": dict(ge=0, le=10),
    "salience.role_insight": dict(ge=0, le=10),
    "confidence.own": _UNIT, "confidence.verified": _UNIT, "confidence.inherited": _UNIT,
    "confidence.inferred": _UNIT, "confidence.speculative": _UNIT, "confidence.validation": _UNIT,
    "confidence.contradiction": _UNIT, "confidence.low_flag": _UNIT, "confidence.low_flag_accesses": _COUNT,
    # retrieval (SPEC 4)
    "retrieval.top_k": dict(ge=1, le=1024), "retrieval.temporal_base": dict(gt=0, le=1),
    "retrieval.w_semantic": dict(ge=0, le=10), "retrieval.w_temporal": dict(ge=0, le=10),
    "retrieval.w_importance": dict(ge=0, le=10), "retrieval.w_emotional": dict(ge=0, le=10),
    "retrieval.six_relevance": dict(ge=0, le=10), "retrieval.six_strength": dict(ge=0, le=10),
    "retrieval.six_recency": dict(ge=0, le=10), "retrieval.six_spreading": dict(ge=0, le=10),
    "retrieval.six_context": dict(ge=0, le=10), "retrieval.six_salience": dict(ge=0, le=10),
    "retrieval.salience_rank_cap": _UNIT, "retrieval.rumination_window": dict(ge=1, le=1024),  # a (Golems, window) array
    "retrieval.rumination_negative_share": _UNIT,
    "retrieval.hdc_recency": dict(ge=0, le=10), "retrieval.hdc_importance": dict(ge=0, le=10),
    "retrieval.hdc_relevance": dict(ge=0, le=10), "retrieval.hdc_similarity": dict(ge=0, le=10),
    # reflection (SPEC 5 REFLECTING)
    "reflection.outcome_scale": dict(gt=0, le=1), "reflection.regret_min": _UNIT, "reflection.mood_bias": _UNIT,
    "reflection.dominance": _SIGNED, "reflection.backcheck_pleasure": _SIGNED, "reflection.backcheck_weight": _UNIT,
    "escalation.t1_cost": dict(ge=0, le=1e9), "escalation.t2_cost": dict(ge=0, le=1e9),
    "escalation.novelty_threshold": _SIGNED,
    "somatic.negative_valence": _SIGNED, "somatic.positive_valence": _SIGNED, "somatic.min_strength": _COUNT,
    "somatic.learning_rate": _UNIT,
    # decisions and trading
    "decision.memory_weight": dict(ge=0, le=10),
    "decision.trend_window": dict(ge=1, le=HIST - 1),  # the price that many ticks ago must still be in the ring
    "decision.trend_scale": dict(ge=0, le=1e4), "decision.max_exposure": _UNIT, "decision.risk_by_emotion": dict(ge=-1, le=1),
    "decision.risk_max_boost": _UNIT, "appraisal.recall_gain": dict(ge=0, le=10),
    "decision.min_trade": _UNIT, "decision.danger_cooloff_s": dict(ge=0, le=_CENTURY_S),
    "trading.fee_bps": dict(ge=0, le=10_000), "trading.slippage_bps": dict(ge=0, le=10_000),
    "trading.gas_units": dict(ge=0, le=10**9), "trading.gas_usd_per_gwei_unit": dict(ge=0, le=1),
    "trading.fail_prob": _UNIT, "trading.fail_prob_gas_spike": _UNIT,
    # flashbulbs, curator, contrarian, reflexes, dreams (SPEC 4.4-8)
    "flashbulb.arousal": _SIGNED, "flashbulb.consecutive_ticks": _COUNT, "flashbulb.pnl_fraction": dict(gt=0, le=1),
    "flashbulb.regime_lookback_ticks": _COUNT, "flashbulb.max_per_24h": dict(ge=0, le=FB_RING),  # the ring of recent flashbulb times
    "flashbulb.extra_step": _UNIT,
    "curator.every_ticks": _COUNT, "curator.valence_gain": dict(ge=0, le=10), "curator.arousal_floor": _UNIT,
    "curator.arousal_gain": dict(ge=0, le=10), "curator.minority_threshold": _UNIT, "curator.calm_arousal": _SIGNED,
    "curator.consolidation_min": _COUNT, "curator.consolidation_age_days": _DAYS, "curator.promote_score": _UNIT,
    "curator.demote_score": _UNIT, "curator.reevaluation_tolerance": dict(ge=0, le=2),
    "contrarian.every_ticks": _COUNT, "contrarian.min_confidence": _UNIT, "contrarian.top_k": dict(ge=1, le=1024),
    "reflex.max_per_turn": dict(ge=1, le=5), "reflex.cooldown_s": dict(ge=0, le=_CENTURY_S),
    "reflex.promotion_min": dict(ge=1, le=64),         # a ring of act times per Grimoire slot
    "reflex.promotion_window_days": _DAYS,
    "dream.every_s": dict(ge=60, le=_CENTURY_S), "dream.replay_budget": dict(ge=0, le=10**6),
    "dream.rem_cycles": dict(ge=0, le=1000), "dream.confidence_boost": _UNIT, "dream.downscale": _UNIT,
    # Clade, mortality, HDC, recording (SPEC 9-13)
    "clade.latency_s": dict(ge=0, le=_CENTURY_S), "clade.jitter_s": dict(ge=0, le=_CENTURY_S),
    "clade.contagion_attenuation": _UNIT, "clade.warning_push_confidence": _UNIT,
    "mortality.thriving": _UNIT, "mortality.stable": _UNIT, "mortality.conservation": _UNIT,
    "mortality.declining": _UNIT, "mortality.terminal_drift": _UNIT, "mortality.heavy_weight": dict(ge=0, le=100),
    "hdc.seed": dict(ge=0, le=2**63 - 1),
    "recording.flush_every_s": dict(ge=60, le=_CENTURY_S),
    "plugins.call_timeout_s": dict(gt=0, le=86_400),   # wall-clock seconds per plug-in call (sim.plugins.time_limit)
}

#: The range of a key without an entry in RANGES, by the type of its default.
TYPE_RANGES: dict[type, dict[str, float]] = {int: dict(ge=0, le=2**31 - 1), float: {}}


def _no_bool(v):
    if isinstance(v, bool):
        raise ValueError(f"expected a number, got {v!r}")
    return v


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Config(BaseModel):
    """Base of the generated model (see `config_model`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def get(self, dotted: str) -> Any:
        section, key = dotted.split(".", 1)
        return getattr(getattr(self, section), key)

    def flat(self) -> dict[str, Any]:
        return {f"{s}.{k}": v for s, sec in self.model_dump().items() for k, v in sec.items()}


def _number(tp: type, path: str) -> Any:
    """int or float with its range; never a boolean; floats finite (the sections forbid inf/nan)."""
    limits = RANGES.get(path, TYPE_RANGES[tp])
    return Annotated[tp, BeforeValidator(_no_bool), Field(**limits)]


def _number_or(path: str, word: str) -> Any:
    """A number in its range, or `word` (appraisal.reference_vol: a number or 'auto'), with one message."""
    lim = RANGES.get(path, {})

    def check(v):
        if v == word:
            return v
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and \
            ("gt" not in lim or v > lim["gt"]) and ("ge" not in lim or v >= lim["ge"]) and \
            ("le" not in lim or v <= lim["le"]) and ("lt" not in lim or v < lim["lt"])
        if not ok:
            bounds = ", ".join(f"{k} {x:g}" for k, x in lim.items())
            raise ValueError(f"expected {word!r} or a finite number ({bounds}), got {v!r}")
        return float(v)
    return Annotated[Any, BeforeValidator(check)]


def _field_type(path: str, value: Any) -> Any:
    if path in CHOICES:
        return Literal[CHOICES[path]]  # type: ignore[valid-type]
    if path in NUMBER_OR:
        return _number_or(path, NUMBER_OR[path])
    if isinstance(value, bool):
        return bool
    if isinstance(value, int):
        return _number(int, path)
    if isinstance(value, float):
        return _number(float, path)
    if isinstance(value, str):
        return str
    if isinstance(value, dict):
        keys = tuple(value)
        first = next(iter(value.values()), None)
        if isinstance(first, list):
            # a table of fixed-length rows of numbers (decision.risk_by_emotion: one per intensity band)
            row = Annotated[list[_number(float, path)], Field(min_length=len(first), max_length=len(first))]
            return dict[Literal[keys], row]  # type: ignore
        # a table of numbers with fixed keys (appraisal.probe_arousal: one value per probe severity)
        return dict[Literal[keys], _number(float, path)] if keys else dict[str, _number(float, path)]  # type: ignore
    return Any


@lru_cache(maxsize=1)
def default_table() -> dict[str, dict[str, Any]]:
    with open(DEFAULTS_FILE) as fh:
        return yaml.safe_load(fh)


@lru_cache(maxsize=1)
def config_model() -> type[Config]:
    """The pydantic model generated from the defaults table (cached: built once per process)."""
    sections = {}
    for sname, keys in default_table().items():
        fields = {k: (_field_type(f"{sname}.{k}", v), v) for k, v in keys.items()}
        sections[sname] = (create_model(f"{sname.title().replace('_', '')}Config", __base__=_Section, **fields), ...)
    return create_model("GolemConfig", __base__=Config, **sections)


def build_config(tree: dict[str, dict[str, Any]]) -> Config:
    """Validate a full nested config tree (defaults already merged in)."""
    return config_model().model_validate(tree)


def default_config() -> Config:
    return build_config(default_table())
