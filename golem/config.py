"""Typed configuration: every SPEC constant as a named, validated key.

`configs/default.yaml` is the single source of truth: the pydantic model is built from it, so a
key exists exactly once and its type is the type of its default. Keys whose values are a choice
are narrowed to `Literal`s below. Unknown keys and wrong types are errors (`extra="forbid"`,
strict numbers). Merging the layers (file, scenario, environment, --set) lives in
`sim.config_layers`, because the mind does no I/O beyond reading its own packaged defaults.
"""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, Union

import yaml
from pydantic import BaseModel, ConfigDict, create_model

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


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Config(BaseModel):
    """Base of the generated model (see `config_model`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def get(self, dotted: str) -> Any:
        section, key = dotted.split(".", 1)
        return getattr(getattr(self, section), key)

    def flat(self) -> dict[str, Any]:
        return {f"{s}.{k}": v for s, sec in self.model_dump().items() for k, v in sec.items()}


def _field_type(path: str, value: Any) -> Any:
    if path in CHOICES:
        return Literal[CHOICES[path]]  # type: ignore[valid-type]
    if path in NUMBER_OR:
        return Union[float, Literal[NUMBER_OR[path]]]  # type: ignore[valid-type]
    if isinstance(value, bool):
        return bool
    if isinstance(value, int):
        return int
    if isinstance(value, float):
        return float
    if isinstance(value, str):
        return str
    if isinstance(value, dict):
        return dict[str, float]
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
