"""Loading plug-ins (strategies and appraisal hooks) named by a scenario, and recording what ran.

A scenario names a plug-in in one of three ways:

* a registered name: the built-ins (`golem.strategies.BUILTINS`, `golem.hooks.BUILTINS`), names
  added at run time with `golem.strategies.register` / `golem.hooks.register`, or names an installed
  package declares under the entry-point groups `golem_sim.strategies` / `golem_sim.appraisal_hooks`;
* `package.module:function`: imported the usual way (the module must be on `sys.path`);
* `path/to/file.py:function`: a file, relative to the scenario's directory (or absolute), loaded
  fresh on every run, so an edited file takes effect without restarting a notebook.

Everything is resolved before the run writes anything, so a typo is a one-line error naming the
scenario file, line and key. The manifest records, per plug-in, its import path, file and the
sha256 of that file, and the directory relative paths were read from; replays load the recorded
file or import path, and `replay --verify` names each plug-in whose source changed since the run.
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import json
import re
import sys
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

import numpy as np

from golem import hooks as hookm
from golem import strategies as stratm
from golem.plugins import Plugin
from sim.scenario import InputError, Scenario, _line_of, read_yaml

ROLES = {"strategy": (stratm.REGISTRY, "golem_sim.strategies"),
         "appraisal hook": (hookm.REGISTRY, "golem_sim.appraisal_hooks")}
class PluginFailed(InputError):
    """A plug-in failed during a run (golem.plugins.PluginError), with where the run's tables are:
    an InputError, so the command line reports it as one line with exit status 2."""


@dataclass
class Plugins:
    """The run's plug-ins: strategies in code order, each group's code, hooks and their groups."""

    strategies: list[Plugin] = field(default_factory=list)
    strategy_of_group: list[int] = field(default_factory=list)
    hooks: list[tuple[Plugin, list[int]]] = field(default_factory=list)
    records: list[dict] = field(default_factory=list)
    base_dir: str | None = None

    def strategy_table(self) -> stratm.StrategyTable:
        return stratm.StrategyTable(self.strategies)

    def hook_table(self, group_of_golem: np.ndarray) -> hookm.HookTable:
        return hookm.HookTable([(p, np.isin(group_of_golem, groups)) for p, groups in self.hooks])

    def manifest(self) -> dict:
        return {"base_dir": self.base_dir, "loaded": self.records}


# ------------------------------------------------------------------------------------ resolving
def resolve(scenario: Scenario, scenario_path: str | Path | None = None, recorded: dict | None = None,
            source: str | None = None) -> Plugins:
    """Every plug-in the scenario names, loaded and checked (parameters bound to the signature).

    `recorded` is a run manifest's `plugins` section: a replay loads what the run loaded (the
    recorded file, the recorded import path of a name registered at run time). `source` names the
    scenario in error lines when it is not a file (a replay's manifest)."""
    path = Path(scenario_path) if scenario_path else None
    base = Path(recorded["base_dir"]) if recorded and recorded.get("base_dir") else \
        (path.resolve().parent if path is not None and str(path) else None)
    rec_by_key = {(r["role"], r["key"], r["spec"]): r for r in (recorded or {}).get("loaded", [])}
    node = None
    if path is not None and path.is_file() and path.suffix in (".yaml", ".yml"):
        try:
            node = read_yaml(path)[1]
        except InputError:
            node = None
    source = source or (str(path) if path is not None and str(path) else "scenario")
    out = Plugins(base_dir=str(base) if base else None)
    seen: dict[tuple[str, str], int] = {}

    def where(loc: tuple) -> str:
        line = _line_of(node, loc) if node is not None else None
        return f"{source}:{line}" if line else source

    for gi, grp in enumerate(scenario.golems):
        key = f"golems.{gi}.strategy"
        fn, rec = _load(grp.strategy, "strategy", base, f"{where(('golems', gi, 'strategy'))}: {key}",
                        rec_by_key.get(("strategy", key, grp.strategy)))
        _bind(fn, grp.strategy_params, "strategy", grp.strategy,
              f"{where(('golems', gi, 'strategy_params'))}: golems.{gi}.strategy_params")
        ident = (grp.strategy, json.dumps(grp.strategy_params, sort_keys=True, default=str))
        if ident not in seen:
            seen[ident] = len(out.strategies)
            out.strategies.append(Plugin(grp.strategy, fn, grp.strategy_params, where=f"{source}: {key}"))
        out.strategy_of_group.append(seen[ident])
        out.records.append(dict(rec, role="strategy", key=key, params=grp.strategy_params))
    hooks: dict[tuple[str, str], int] = {}
    for gi, grp in enumerate(scenario.golems):
        for hi, h in enumerate(grp.appraisal_hooks):
            key = f"golems.{gi}.appraisal_hooks.{hi}"
            loc = ("golems", gi, "appraisal_hooks", hi)
            fn, rec = _load(h.hook, "appraisal hook", base, f"{where(loc)}: {key}",
                            rec_by_key.get(("appraisal hook", key, h.hook)))
            _bind(fn, h.params, "appraisal hook", h.hook, f"{where(loc)}: {key}.params")
            ident = (h.hook, json.dumps(h.params, sort_keys=True, default=str))
            if ident not in hooks:
                hooks[ident] = len(out.hooks)
                out.hooks.append((Plugin(h.hook, fn, h.params, where=f"{source}: {key}", role="appraisal hook"), []))
            out.hooks[hooks[ident]][1].append(gi)
            out.records.append(dict(rec, role="appraisal hook", key=key, params=h.params))
    return out


def _load(spec: str, role: str, base: Path | None, where: str, recorded: dict | None) -> tuple[Callable, dict]:
    """(function, record) for one plug-in spec; InputError naming `where` when it cannot load."""
    registry, group = ROLES[role]
    head, sep, attr = spec.rpartition(":")
    if not sep:   # a registered name
        fn = registry.get(spec)
        if fn is None:
            fn = _entry_point(group, spec, where)
        if fn is None and recorded and recorded.get("import_path"):
            return _load_target(recorded["import_path"], role, None, where, recorded, spec=spec)
        if fn is None:
            known = sorted(set(registry) | {ep.name for ep in metadata.entry_points(group=group)})
            raise InputError(f"{where}: unknown {role} {spec!r}; expected a registered name ({', '.join(known)}) or "
                             f"a plug-in as package.module:function or path/to/file.py:function")
        return fn, _record(spec, fn, None)
    if recorded and recorded.get("file") and head.endswith(".py"):
        return _load_target(f"{recorded['file']}:{attr}", role, None, where, recorded, spec=spec)
    return _load_target(spec, role, base, where, recorded)


def _entry_point(group: str, name: str, where: str) -> Callable | None:
    for ep in metadata.entry_points(group=group):
        if ep.name == name:
            try:
                return ep.load()
            except Exception as exc:
                raise InputError(f"{where}: entry point {name!r} ({ep.value}) failed to load: "
                                 f"{type(exc).__name__}: {' '.join(str(exc).split())}") from None
    return None


def _load_target(target: str, role: str, base: Path | None, where: str, recorded: dict | None,
                 spec: str | None = None) -> tuple[Callable, dict]:
    spec = spec or target
    head, _, attr = target.rpartition(":")
    file = None
    if head.endswith(".py"):
        file = Path(head).expanduser()
        if not file.is_absolute():
            file = (base or Path.cwd()) / file
        if not file.is_file():
            rec = " (recorded by the run)" if recorded else ""
            raise InputError(f"{where}: {role} file {file} not found{rec}; expected a Python file defining {attr}")
        module = _exec_file(file, where, role)
    elif head == "__main__":
        raise InputError(f"{where}: {role} {spec!r} was defined in __main__ (a notebook or a script) when the run "
                         "was made and cannot be loaded again; expected it in a module or a file "
                         "(package.module:function or path/to/file.py:function)")
    else:
        try:
            module = importlib.import_module(head)
        except Exception as exc:
            raise InputError(f"{where}: cannot import {head!r} for {role} {spec!r}: {type(exc).__name__}: "
                             f"{' '.join(str(exc).split())}; expected an importable module (on sys.path) "
                             f"or path/to/file.py:function") from None
    fn: Any = module
    for part in attr.split("."):
        fn = getattr(fn, part, None)
        if fn is None:
            raise InputError(f"{where}: {role} {spec!r}: {head} has no {attr!r}; expected a function defined there")
    if not callable(fn):
        raise InputError(f"{where}: {role} {spec!r}: {attr} is a {type(fn).__name__}; expected a function "
                         "fn(view, **params)")
    return fn, _record(spec, fn, file)


def _exec_file(file: Path, where: str, role: str):
    """Load a plug-in file as a fresh module (named after its path, so two files never collide)."""
    name = "golem_plugin_" + re.sub(r"\W", "_", file.stem) + "_" + hashlib.sha256(str(file).encode()).hexdigest()[:8]
    mspec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(mspec)
    sys.modules[name] = module
    try:
        mspec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(name, None)
        line = getattr(exc, "lineno", None)
        at = f"{file}:{line}" if line else str(file)
        raise InputError(f"{where}: {role} file {at} failed to load: {type(exc).__name__}: "
                         f"{' '.join(str(getattr(exc, 'msg', None) or exc).split())}") from None
    return module


def _record(spec: str, fn: Callable, file: Path | None) -> dict:
    """What the manifest keeps about a plug-in: its import path, file and the file's sha256."""
    src = file
    if src is None:
        try:
            src = Path(inspect.getsourcefile(fn) or "")
        except TypeError:
            src = None
    qual = getattr(fn, "__qualname__", type(fn).__name__)
    import_path = f"{file}:{qual}" if file is not None else f"{getattr(fn, '__module__', '?')}:{qual}"
    sha = hashlib.sha256(src.read_bytes()).hexdigest() if src is not None and src.is_file() else None
    return {"spec": spec, "import_path": import_path, "file": str(src) if src is not None and src.is_file() else None,
            "sha256": sha}


def _bind(fn: Callable, params: dict, role: str, spec: str, where: str) -> None:
    """The scenario's parameters must fit the function's signature: fn(view, **params)."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    try:
        sig.bind(None, **params)
    except TypeError as exc:
        accepted = [p for p in list(sig.parameters)[1:]]
        raise InputError(f"{where}: {role} {spec!r}: {exc}; expected its keyword parameters "
                         f"({', '.join(accepted) or 'none'})") from None


# ------------------------------------------------------------------------------------ verifying
def source_changes(recorded: dict | None, now: Plugins) -> list[str]:
    """One line per plug-in whose source file differs from the one the run recorded."""
    lines = []
    if not recorded:
        return lines
    current = {(r["role"], r["key"]): r for r in now.records}
    for r in recorded.get("loaded", []):
        c = current.get((r["role"], r["key"]))
        if c is None or r.get("sha256") == c.get("sha256"):
            continue
        lines.append(f"{r['key']}: {r['role']} {r['spec']!r} ({c.get('file') or c.get('import_path')}): the source "
                     f"changed since the run (sha256 {str(r.get('sha256'))[:12]} recorded, "
                     f"{str(c.get('sha256'))[:12]} now)")
    return lines
