"""Layered configuration (SPEC §15): defaults < config file < scenario overrides < GOLEM_* < --set.

Each layer is a list of (section.key, value) items merged onto the defaults; the result is
validated by the typed model of `golem.config` after each layer. Every error names the item it
came from — the file, the environment variable (`environment GOLEM_REFLEX=maybe`) or the
command-line value (`--set retrieval.top_k=0`) — and the key path; an unknown key suggests the
key it was probably meant to be. A table-valued key (`appraisal.probe_arousal`) is merged entry
by entry, so `--set appraisal.probe_arousal.high=0.8` changes one entry.
"""
from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from golem.config import Config, build_config, config_model, default_table
from sim.errors import InputError, clip, did_you_mean, escape, key, show
from sim.scenario import SCENARIO_KEYS, _matches, error_path, format_validation_error, read_yaml, set_text
from sim.yaml_input import parse_scalar_text

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
#: GOLEM_REFLEX spellings (SPEC: "GOLEM_REFLEX=off disables")
_ON = ("on", "true", "1", "yes", "enabled")
_OFF = ("off", "false", "0", "no", "disabled")


def parse_value(text: str, where: str = "--set") -> Any:
    """A --set or environment value: YAML scalars, so 0.5, true, off and [1, 2] mean what they say."""
    return parse_scalar_text(text, where)


def _env_label(name: str, text: str) -> str:
    return f"environment {key(name)}={clip(escape(text))}"


def _env_value(name: str, text: str) -> Any:
    label = _env_label(name, text)
    if name == "GOLEM_SALIENCE_RANK":
        return text.strip().lower()
    if name == "GOLEM_REFLEX":
        word = text.strip().lower()
        if word in _ON or word in _OFF:
            return word in _ON
        raise InputError(f"{label}: reflex.enabled: expected on or off (or true/false, yes/no, 1/0)")
    if name == "GOLEM_REFLEX_MAX_PER_TURN":
        try:
            return min(5, max(1, int(text.strip())))   # SPEC 4.5: clamped to 1-5
        except ValueError:
            raise InputError(f"{label}: reflex.max_per_turn: expected a whole number (clamped to 1-5)") from None
    return parse_value(text, label)


def _items(layer: Mapping[str, Any], label: str) -> list[tuple[str, Any, str]]:
    """(section.key, value, label) from nested ({retrieval: {top_k: 8}}) and dotted
    ({'retrieval.top_k': 8}) forms; a value where a section belongs is kept for the check."""
    out = []
    for k, v in layer.items():
        k = str(k)
        if "." in k:
            out.append((k, v, label))
        elif isinstance(v, Mapping):
            out.extend((f"{k}.{sub}", subv, label) for sub, subv in v.items())
        else:
            out.append((k, v, label))
    return out


def _normalise(layer: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Nested form of a layer ({'retrieval.top_k': 8} -> {retrieval: {top_k: 8}})."""
    out: dict[str, dict[str, Any]] = {}
    for dotted, v, _ in _items(layer, ""):
        s, _, k = dotted.partition(".")
        if k:
            out.setdefault(s, {})[k] = v
        else:
            out[s] = v
    return out


def env_items(environ: Mapping[str, str] | None = None) -> list[tuple[str, Any, str]]:
    """(section.key, value, label) for the GOLEM_* variables, in name order."""
    environ = os.environ if environ is None else environ
    out = []
    for name in sorted(environ):
        if name in ENV_KEYS:
            out.append((ENV_KEYS[name], _env_value(name, environ[name]), _env_label(name, environ[name])))
        elif name.startswith(GENERIC_PREFIX):
            label = _env_label(name, environ[name])
            parts = name[len(GENERIC_PREFIX):].lower().split("__")
            if len(parts) < 2 or not all(parts):
                raise InputError(f"{label}: expected GOLEM__<section>__<key>, e.g. GOLEM__retrieval__top_k=4")
            out.append((".".join(parts), parse_value(environ[name], label), label))
    return out


def env_layer(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    return {k: v for k, v, _ in env_items(environ)}


def split_sets(sets: list[str] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """--set key=value pairs -> (config layer, scenario layer) by the key's first segment."""
    cfg: dict[str, Any] = {}
    scen: dict[str, Any] = {}
    sections = list(default_table())
    for item in sets or []:
        if "=" not in item:
            raise InputError(f"--set {clip(escape(item))}: expected key=value, e.g. --set retrieval.top_k=4")
        name, text = item.split("=", 1)
        name = name.strip()
        head = name.split(".", 1)[0]
        label = f"--set {key(name)}={clip(escape(text))}"
        if head in sections:
            cfg[name] = parse_value(text, label)
        elif head in SCENARIO_KEYS:
            scen[name] = parse_value(text, label)
        else:
            hint = did_you_mean(head, sections + list(SCENARIO_KEYS))
            raise InputError(f"{label}: {key(head)}: unknown key{hint}; expected a config section "
                             f"({', '.join(sections)}) or a scenario key ({', '.join(SCENARIO_KEYS)})")
    return cfg, scen


def _assign(tree: dict, dotted: str, value: Any, label: str) -> str:
    """Put one item into the tree; returns the section.key it set."""
    section, _, rest = dotted.partition(".")
    if section not in tree:
        raise InputError(f"{label}: {key(section)}: unknown config section{did_you_mean(section, tree)}; "
                         f"expected one of {', '.join(tree)}")
    if not rest:
        raise InputError(f"{label}: {key(section)}: expected a mapping of keys, got {show(value)}")
    name, _, sub = rest.partition(".")
    if name not in tree[section]:
        raise InputError(f"{label}: {key(section)}.{key(rest)}: unknown key{did_you_mean(name, tree[section])}")
    current = tree[section][name]
    if isinstance(current, dict):
        # a table: merged entry by entry (a partial table keeps the other entries)
        if sub:
            tree[section][name] = {**current, sub: value}
        elif isinstance(value, Mapping):
            tree[section][name] = {**current, **value}
        else:
            tree[section][name] = value           # the validator says what a table must be
    elif sub:
        raise InputError(f"{label}: {key(section)}.{key(rest)}: {key(section)}.{key(name)} is a single value, "
                         f"not a table; expected {key(section)}.{key(name)}=VALUE")
    else:
        tree[section][name] = value
    return f"{section}.{name}"


def resolve(config_file: str | None = None, scenario_overrides: Mapping[str, Any] | None = None,
            environ: Mapping[str, str] | None = None, sets: Mapping[str, Any] | None = None,
            scenario_source: str = "scenario") -> tuple[Config, dict[str, Any]]:
    """Merge the layers in precedence order and validate. Returns (config, sources per changed key)."""
    tree = copy.deepcopy(default_table())
    sources: dict[str, Any] = {}
    layers: list[tuple[str, list[tuple[str, Any, str]]]] = []
    if config_file:
        raw, _ = read_yaml(config_file)
        if not isinstance(raw, Mapping):
            raise InputError(f"{config_file}: (top level): expected a mapping of config sections, got {show(raw)}")
        layers.append((config_file, _items(raw, config_file)))
    label = f"{scenario_source} overrides"
    layers.append((label, _items(scenario_overrides or {}, label)))
    layers.append(("environment", env_items(environ)))
    layers.append(("--set", [(k, v, set_text(k, v)) for k, v in (sets or {}).items()]))
    for source, items in layers:
        for dotted, value, item_label in items:
            sources[_assign(tree, dotted, value, item_label)] = source
        try:
            build_config(tree)
        except ValidationError as err:
            e = next((x for x in err.errors() if x["type"] == "extra_forbidden"), err.errors()[0])
            path = ".".join(str(p) for p in error_path(e))
            where = next((lbl for d, _, lbl in reversed(items) if _matches(d, path)), source)
            raise InputError(format_validation_error(err, where, model=config_model())) from None
    return build_config(tree), sources
