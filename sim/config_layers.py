"""Layered configuration (SPEC §15): defaults < config file < scenario overrides < GOLEM_* < --set.

Each layer is a nested dict merged key by key onto the defaults; the result is validated once by
the typed model of `golem.config`. Every error names the layer it came from and the key path.
"""
from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from typing import Any

import yaml
from pydantic import ValidationError

from golem.config import Config, build_config, default_table
from sim.scenario import SCENARIO_KEYS, InputError, format_validation_error, read_yaml

#: The environment variables named by the spec, mapped to config keys.
ENV_KEYS = {
    "GOLEM_SALIENCE_RANK": "retrieval.salience_rank",
    "GOLEM_SALIENCE_RANK_CAP": "retrieval.salience_rank_cap",
    "GOLEM_REFLEX": "reflex.enabled",
    "GOLEM_REFLEX_MAX_PER_TURN": "reflex.max_per_turn",
    "GOLEM_REFLEX_PROMOTION_MIN": "reflex.promotion_min",
}
#: Any other key from the environment: GOLEM__<section>__<key>=value.
GENERIC_PREFIX = "GOLEM__"


def parse_value(text: str) -> Any:
    """A --set or environment value: YAML scalars, so 0.5, true, off and [1, 2] mean what they say."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _env_value(name: str, text: str) -> Any:
    if name == "GOLEM_SALIENCE_RANK":
        return text.strip().lower()
    if name == "GOLEM_REFLEX":
        return text.strip().lower() not in ("off", "false", "0", "no", "disabled")
    if name == "GOLEM_REFLEX_MAX_PER_TURN":
        try:
            return min(5, max(1, int(text)))
        except ValueError:
            return text
    return parse_value(text)


def _normalise(layer: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Accept nested ({retrieval: {top_k: 8}}) and dotted ({'retrieval.top_k': 8}) forms."""
    out: dict[str, dict[str, Any]] = {}
    for k, v in layer.items():
        if "." in k:
            s, key = k.split(".", 1)
            out.setdefault(s, {})[key] = v
        elif isinstance(v, Mapping):
            out.setdefault(k, {}).update(v)
        else:
            out[k] = v  # a value where a section belongs: the validator names it
    return out


def env_layer(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    environ = os.environ if environ is None else environ
    layer: dict[str, Any] = {}
    for name in sorted(environ):
        if name in ENV_KEYS:
            layer[ENV_KEYS[name]] = _env_value(name, environ[name])
        elif name.startswith(GENERIC_PREFIX):
            parts = name[len(GENERIC_PREFIX):].lower().split("__")
            layer[".".join(parts)] = parse_value(environ[name])
    return layer


def split_sets(sets: list[str] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """--set key=value pairs -> (config layer, scenario layer) by the key's first segment."""
    cfg: dict[str, Any] = {}
    scen: dict[str, Any] = {}
    sections = set(default_table())
    for item in sets or []:
        if "=" not in item:
            raise InputError(f"--set {item!r}: expected key=value")
        key, text = item.split("=", 1)
        key = key.strip()
        head = key.split(".", 1)[0]
        if head in sections:
            cfg[key] = parse_value(text)
        elif head in SCENARIO_KEYS:
            scen[key] = parse_value(text)
        else:
            raise InputError(f"--set {key}: unknown key (expected a config section {sorted(sections)} "
                             f"or a scenario key {list(SCENARIO_KEYS)})")
    return cfg, scen


def resolve(config_file: str | None = None, scenario_overrides: Mapping[str, Any] | None = None,
            environ: Mapping[str, str] | None = None, sets: Mapping[str, Any] | None = None,
            scenario_source: str = "scenario") -> tuple[Config, dict[str, Any]]:
    """Merge the layers in precedence order and validate. Returns (config, sources per changed key)."""
    tree = copy.deepcopy(default_table())
    sources: dict[str, Any] = {}
    layers: list[tuple[str, Mapping[str, Any]]] = []
    if config_file:
        raw, _ = read_yaml(config_file)
        if not isinstance(raw, Mapping):
            raise InputError(f"{config_file}: expected a mapping of config sections")
        layers.append((config_file, raw))
    layers.append((f"{scenario_source} overrides", scenario_overrides or {}))
    layers.append(("environment", env_layer(environ)))
    layers.append(("--set", sets or {}))
    for source, layer in layers:
        for section, keys in _normalise(layer).items():
            if section not in tree:
                raise InputError(f"{source}: {section}: unknown config section (expected one of {sorted(tree)})")
            if not isinstance(keys, Mapping):
                raise InputError(f"{source}: {section}: expected a mapping of keys, got {keys!r}")
            for k, v in keys.items():
                tree[section][k] = v
                sources[f"{section}.{k}"] = source
        try:
            build_config(tree)
        except ValidationError as err:
            raise InputError(format_validation_error(err, source)) from None
    return build_config(tree), sources
