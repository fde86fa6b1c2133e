"""Loading plug-ins (strategies and appraisal hooks) named by a scenario, and recording what ran.

A scenario names a plug-in in one of three ways:

* a registered name: the built-ins (`golem.strategies.BUILTINS`, `golem.hooks.BUILTINS`), names
  added at run time with `golem.strategies.register` / `golem.hooks.register`, or names an installed
  package declares under the entry-point groups `golem_sim.strategies` / `golem_sim.appraisal_hooks`;
* `package.module:function`: imported the usual way (the module must be on `sys.path`);
* `path/to/file.py:function`: a file, relative to the scenario's directory (or absolute), loaded
  fresh on every run, so an edited file takes effect without restarting a notebook.

Everything is resolved before the run writes anything, so a typo is a one-line error naming the
scenario file, line and key. The manifest records, per plug-in, its import path, file and a
sha256 of that file (over its path and content, `source_sha256`), and the directory relative
paths were read from; replays load the recorded file or import path, and `replay --verify` names
each plug-in whose source changed since the run.

Scenarios and plug-ins are code; a run directory is data. Code a run's manifest names (a file or
a module path, anything but a registered name) is executed only inside `trusting(...)`: the
command line's `--trust-plugins`, or the file given again with `--plugin PATH`. `check` (what
`validate` uses) never executes a plug-in: it reads files with `ast` and finds modules with
`importlib.util.find_spec`. Each call of a plug-in runs under `time_limit` (plugins.call_timeout_s).
"""
from __future__ import annotations

import ast
import contextvars
import hashlib
import importlib
import importlib.machinery
import importlib.util
import inspect
import json
import re
import signal
import stat
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

import numpy as np

from golem import hooks as hookm
from golem import strategies as stratm
from golem.plugins import Plugin, PluginTimeout
from sim.scenario import InputError, Scenario, _line_of, read_yaml

ROLES = {"strategy": (stratm.REGISTRY, "golem_sim.strategies"),
         "appraisal hook": (hookm.REGISTRY, "golem_sim.appraisal_hooks")}


class PluginFailed(InputError):
    """A plug-in failed during a run (golem.plugins.PluginError), with where the run's tables are.
    An InputError for Python callers (the researcher's code, not the engine, failed); the command
    line exits 1 for it, as for any run that started and failed (its manifest says failed)."""


# ------------------------------------------------------------------------------------ trust
@dataclass(frozen=True)
class Trust:
    """What code a run directory's manifest may name and have executed: everything (`all`), or
    the files in `files` (resolved paths)."""

    all: bool = False
    files: frozenset = frozenset()


_TRUST: contextvars.ContextVar[Trust] = contextvars.ContextVar("golem_plugin_trust", default=Trust())


@contextmanager
def trusting(all: bool = False, files=()):
    """Inside, plug-in code named by a run directory (replay, resume, counterfactuals) may run:
    every plug-in (`all=True`, the command line's --trust-plugins) or the given files (--plugin)."""
    token = _TRUST.set(Trust(bool(all), frozenset(Path(f).expanduser().resolve() for f in files)))
    try:
        yield
    finally:
        _TRUST.reset(token)


def _authorize(where: str, role: str, spec: str, file: Path | None) -> None:
    """Refuse to execute code a run directory names unless the user allowed it (see `trusting`)."""
    trust = _TRUST.get()
    if trust.all or (file is not None and file.resolve() in trust.files):
        return
    what = f"the file {file}" if file is not None else f"the module of {spec!r}"
    give = f"--plugin {file}" if file is not None else "--plugin with its file"
    raise InputError(f"{where}: {role} {spec!r} would execute {what}, named by the run directory; a run directory "
                     f"is data, not code: expected {give} (the file you mean to run) or --trust-plugins")


def source_sha256(file: Path, with_path: bool = True) -> str:
    """sha256 of `path NUL content` (of the content alone for a registered name's module): a
    manifest edited to name another file, even with that file's plain sha256, does not match."""
    h = hashlib.sha256()
    if with_path:
        h.update(str(file).encode("utf-8", "surrogateescape") + b"\0")
    h.update(file.read_bytes())
    return h.hexdigest()


# ------------------------------------------------------------------------------------ time limit
class time_limit:
    """Raise PluginTimeout in the block once it has run `seconds` (wall clock): SIGALRM from
    ITIMER_REAL, armed and disarmed around each plug-in call (a handful of microseconds: two
    setitimer calls, the handler set and restored). Only the main thread can take a signal:
    elsewhere (a Dask worker's thread), and while an outer ITIMER_REAL is armed (a test's or a
    harness's watchdog), the block runs unlimited."""

    __slots__ = ("seconds", "armed", "previous", "fired")

    def __init__(self, seconds: float):
        self.seconds, self.armed, self.previous, self.fired = seconds, False, None, False

    def _alarm(self, _signum, _frame):
        self.fired = True
        raise PluginTimeout(self.seconds)

    def __enter__(self) -> "time_limit":
        if threading.current_thread() is threading.main_thread() and signal.getitimer(signal.ITIMER_REAL)[0] == 0:
            self.previous = signal.signal(signal.SIGALRM, self._alarm)
            self.armed = True
            signal.setitimer(signal.ITIMER_REAL, self.seconds)
        return self

    def __exit__(self, kind, _exc, _tb) -> bool:
        if not self.armed:
            return False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self.previous)
        self.armed = False
        if kind is None and self.fired:   # the plug-in caught the timeout (a bare except): it still ran too long
            raise PluginTimeout(self.seconds)
        return False


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
            source: str | None = None, *, from_run: bool = False, load: bool = True) -> Plugins:
    """Every plug-in the scenario names, loaded and checked (parameters bound to the signature).

    `recorded` is a run manifest's `plugins` section: a replay loads what the run loaded (the
    recorded file, the recorded import path of a name registered at run time). `from_run`: the
    scenario comes from a run directory (replay, resume), so its code runs only as `trusting`
    allows. `load=False` checks without executing anything (`check`). `source` names the
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

    def loaded(spec, role, key, loc, params_loc, params):
        fn, rec = _load(spec, role, base, f"{where(loc)}: {key}", rec_by_key.get((role, key, spec)), from_run, load)
        _bind(fn, params, role, spec, f"{where(params_loc)}: {'.'.join(map(str, params_loc))}")
        return fn, dict(rec, role=role, key=key, params=params)

    for gi, grp in enumerate(scenario.golems):
        key = f"golems.{gi}.strategy"
        fn, rec = loaded(grp.strategy, "strategy", key, ("golems", gi, "strategy"), ("golems", gi, "strategy_params"),
                         grp.strategy_params)
        ident = (grp.strategy, json.dumps(grp.strategy_params, sort_keys=True, default=str))
        if ident not in seen:
            seen[ident] = len(out.strategies)
            out.strategies.append(Plugin(grp.strategy, fn, grp.strategy_params, where=f"{source}: {key}",
                                         guard=time_limit))
        out.strategy_of_group.append(seen[ident])
        out.records.append(rec)
    hooks: dict[tuple[str, str], int] = {}
    for gi, grp in enumerate(scenario.golems):
        for hi, h in enumerate(grp.appraisal_hooks):
            key = f"golems.{gi}.appraisal_hooks.{hi}"
            loc = ("golems", gi, "appraisal_hooks", hi)
            fn, rec = loaded(h.hook, "appraisal hook", key, loc, (*loc, "params"), h.params)
            ident = (h.hook, json.dumps(h.params, sort_keys=True, default=str))
            if ident not in hooks:
                hooks[ident] = len(out.hooks)
                out.hooks.append((Plugin(h.hook, fn, h.params, where=f"{source}: {key}", role="appraisal hook",
                                         guard=time_limit), []))
            out.hooks[hooks[ident]][1].append(gi)
            out.records.append(rec)
    return out


def check(scenario: Scenario, scenario_path: str | Path | None = None) -> None:
    """What `validate` checks of the scenario's plug-ins, executing none of them: every name
    resolves (a registered or declared name, a regular .py file defining the function, a module
    that can be found) and the parameters fit where the signature can be read without running code."""
    resolve(scenario, scenario_path, load=False)


#: an entry point declared by an installed package, not loaded (check mode)
_DECLARED = object()


def _load(spec: str, role: str, base: Path | None, where: str, recorded: dict | None, gate: bool = False,
          load: bool = True) -> tuple[Any, dict]:
    """(function, record) for one plug-in spec; InputError naming `where` when it cannot load.
    Without `load` the function is an inspect.Signature or None (nothing executed)."""
    registry, group = ROLES[role]
    head, sep, attr = spec.rpartition(":")
    if not sep:   # a registered name
        fn = registry.get(spec)
        if fn is None:
            fn = _entry_point(group, spec, where, load)
        if fn is None and recorded and recorded.get("import_path"):
            return _load_target(recorded["import_path"], role, None, where, recorded, spec, gate, load)
        if fn is None:
            known = sorted(set(registry) | {ep.name for ep in metadata.entry_points(group=group)})
            raise InputError(f"{where}: unknown {role} {spec!r}; expected a registered name ({', '.join(known)}) or "
                             f"a plug-in as package.module:function or path/to/file.py:function")
        if fn is _DECLARED:
            return None, {"spec": spec}
        return fn, _record(spec, fn, None, registered=True)
    if recorded and recorded.get("file") and head.endswith(".py"):
        return _load_target(f"{recorded['file']}:{attr}", role, None, where, recorded, spec, gate, load)
    return _load_target(spec, role, base, where, recorded, spec, gate, load)


def _entry_point(group: str, name: str, where: str, load: bool = True) -> Any:
    for ep in metadata.entry_points(group=group):
        if ep.name == name:
            if not load:
                return _DECLARED
            try:
                return ep.load()
            except KeyboardInterrupt:
                raise
            except BaseException as exc:   # SystemExit too: an entry point cannot end the process
                raise InputError(f"{where}: entry point {name!r} ({ep.value}) failed to load: "
                                 f"{type(exc).__name__}: {' '.join(str(exc).split())}") from None
    return None


def _load_target(target: str, role: str, base: Path | None, where: str, recorded: dict | None,
                 spec: str | None = None, gate: bool = False, load: bool = True) -> tuple[Any, dict]:
    spec = spec or target
    head, _, attr = target.rpartition(":")
    file = None
    if head.endswith(".py"):
        file = Path(head).expanduser()
        if not file.is_absolute():
            file = (base or Path.cwd()) / file
        if not file.is_file():
            rec = " (recorded by the run)" if recorded else ""
            what = "is not a regular file" if file.exists() else "not found"
            raise InputError(f"{where}: {role} file {file} {what}{rec}; expected a Python file defining {attr}")
        if gate:
            _authorize(where, role, spec, file)
        if not load:
            return _check_source(file, attr, where, role, spec), {"spec": spec}
        module = _exec_file(file, where, role)
    elif head == "__main__":
        raise InputError(f"{where}: {role} {spec!r} was defined in __main__ (a notebook or a script) when the run "
                         "was made and cannot be loaded again; expected it in a module or a file "
                         "(package.module:function or path/to/file.py:function)")
    else:
        cannot = (f"{where}: cannot import {head!r} for {role} {spec!r}: ModuleNotFoundError: no module named "
                  f"{head!r}; expected an importable module (on sys.path) or path/to/file.py:function")
        if gate or (not load and head not in sys.modules):
            found = _find_module(head)
            if found is None:
                raise InputError(cannot)
            origin = Path(found.origin) if found.origin and found.has_location else None
            if gate:
                _authorize(where, role, spec, origin)
            if not load:
                ok = origin is not None and origin.suffix == ".py" and origin.is_file()
                return (_check_source(origin, attr, where, role, spec) if ok else None), {"spec": spec}
        try:
            module = importlib.import_module(head)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:   # SystemExit too: a plug-in's module cannot end the process
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
    if not load:   # an imported module's function (already in sys.modules): nothing to execute
        return fn, {"spec": spec}
    return fn, _record(spec, fn, file)


def _find_module(name: str):
    """The module's spec without executing anything (importlib.util.find_spec imports a dotted
    name's parent packages, running their __init__): parents already imported are used, the rest
    are looked up on the import path only. None when it is not there."""
    parts = name.split(".")
    if not all(p.isidentifier() for p in parts):
        return None
    found, locations = None, None
    for i in range(len(parts)):
        full = ".".join(parts[:i + 1])
        module = sys.modules.get(full)
        if module is not None:
            found, locations = getattr(module, "__spec__", None), getattr(module, "__path__", None)
            if found is None:
                return None
            continue
        try:
            found = importlib.util.find_spec(full) if i == 0 else \
                importlib.machinery.PathFinder.find_spec(full, list(locations or []))
        except (ImportError, ValueError):
            return None
        if found is None:
            return None
        locations = found.submodule_search_locations
        if i < len(parts) - 1 and locations is None:
            return None   # a module, not a package: it has no submodules
    return found


def _check_source(file: Path, attr: str, where: str, role: str, spec: str) -> inspect.Signature | None:
    """Read a plug-in file without running it: it parses, it defines `attr` at top level (as a
    function, whose signature is returned for binding the parameters; None when it cannot be
    read without running the file: a decorated function, a name bound by an import or a call)."""
    try:
        st = file.stat()
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{where}: {role} file {file} is not a regular file; expected a Python file")
        tree = ast.parse(file.read_bytes(), filename=str(file))
    except SyntaxError as exc:
        raise InputError(f"{where}: {role} file {file}:{exc.lineno} failed to load: SyntaxError: "
                         f"{' '.join(str(exc.msg).split())}") from None
    except (ValueError, OSError) as exc:
        raise InputError(f"{where}: {role} file {file} cannot be read: {type(exc).__name__}: "
                         f"{' '.join(str(getattr(exc, 'strerror', None) or exc).split())}") from None
    name = attr.split(".")[0]
    found: ast.AST | None = None
    # names made at run time (a star import, a module __getattr__, globals()/setattr/exec) cannot be read
    dynamic = any(isinstance(n, ast.alias) and n.name == "*" for n in ast.walk(tree)) or any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("globals", "setattr", "exec")
        for n in ast.walk(tree)) or any(
        isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == "__getattr__" for n in tree.body)

    def defines(node: ast.AST) -> bool:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return node.name == name
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            return any(isinstance(e, ast.Name) and e.id == name for t in targets for e in ast.walk(t))
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            return any((a.asname or a.name).split(".")[0] == name for a in node.names)
        return False

    def search(body: list, top: bool) -> None:
        nonlocal found
        for node in body:
            if defines(node):
                found = node if top else ast.Pass()   # defined under a condition: found, its signature unread
            for field in ("body", "orelse", "finalbody", "handlers"):
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    search([h for h in getattr(node, field, [])], False)
    search(tree.body, True)
    if found is None:
        if dynamic:
            return None
        raise InputError(f"{where}: {role} {spec!r}: {file.name} has no {attr!r}; expected a function defined there")
    if isinstance(found, ast.Assign) and isinstance(found.value, (ast.List, ast.Dict, ast.Set, ast.Tuple,
                                                                  ast.Constant, ast.ListComp, ast.DictComp)):
        kind = type(found.value.value).__name__ if isinstance(found.value, ast.Constant) else \
            {ast.List: "list", ast.Dict: "dict", ast.Set: "set", ast.Tuple: "tuple", ast.ListComp: "list",
             ast.DictComp: "dict"}[type(found.value)]
        if "." not in attr:
            raise InputError(f"{where}: {role} {spec!r}: {attr} is a {kind}; expected a function fn(view, **params)")
    if isinstance(found, (ast.FunctionDef, ast.AsyncFunctionDef)) and "." not in attr and not found.decorator_list:
        return _signature(found.args)
    return None


def _signature(args: ast.arguments) -> inspect.Signature:
    """The signature an ast function definition declares (defaults as placeholders)."""
    P = inspect.Parameter
    positional = [*args.posonlyargs, *args.args]
    first_default = len(positional) - len(args.defaults)
    params = [P(a.arg, P.POSITIONAL_ONLY if i < len(args.posonlyargs) else P.POSITIONAL_OR_KEYWORD,
                default=... if i >= first_default else P.empty) for i, a in enumerate(positional)]
    if args.vararg:
        params.append(P(args.vararg.arg, P.VAR_POSITIONAL))
    params += [P(a.arg, P.KEYWORD_ONLY, default=P.empty if d is None else ...)
               for a, d in zip(args.kwonlyargs, args.kw_defaults)]
    if args.kwarg:
        params.append(P(args.kwarg.arg, P.VAR_KEYWORD))
    return inspect.Signature(params)


def _exec_file(file: Path, where: str, role: str):
    """Load a plug-in file as a fresh module (named after its path, so two files never collide)."""
    name = "golem_plugin_" + re.sub(r"\W", "_", file.stem) + "_" + hashlib.sha256(str(file).encode()).hexdigest()[:8]
    mspec = importlib.util.spec_from_file_location(name, file)
    module = importlib.util.module_from_spec(mspec)
    sys.modules[name] = module
    try:
        mspec.loader.exec_module(module)
    except KeyboardInterrupt:
        sys.modules.pop(name, None)
        raise
    except BaseException as exc:   # SystemExit too: a plug-in file cannot end the process
        sys.modules.pop(name, None)
        line = getattr(exc, "lineno", None)
        at = f"{file}:{line}" if line else str(file)
        raise InputError(f"{where}: {role} file {at} failed to load: {type(exc).__name__}: "
                         f"{' '.join(str(getattr(exc, 'msg', None) or exc).split())}") from None
    return module


def _record(spec: str, fn: Callable, file: Path | None, registered: bool = False) -> dict:
    """What the manifest keeps about a plug-in: its import path, file and the file's sha256 (over
    its path and content; a registered name's over the content: the name, not the path, finds it)."""
    src = file
    if src is None:
        try:
            src = Path(inspect.getsourcefile(fn) or "")
        except TypeError:
            src = None
    qual = getattr(fn, "__qualname__", type(fn).__name__)
    import_path = f"{file}:{qual}" if file is not None else f"{getattr(fn, '__module__', '?')}:{qual}"
    sha = source_sha256(src, with_path=not registered) if src is not None and src.is_file() else None
    return {"spec": spec, "import_path": import_path, "file": str(src) if src is not None and src.is_file() else None,
            "sha256": sha}


def _bind(fn: Any, params: dict, role: str, spec: str, where: str) -> None:
    """The scenario's parameters must fit the function's signature: fn(view, **params)."""
    if fn is None:
        return
    try:
        sig = fn if isinstance(fn, inspect.Signature) else inspect.signature(fn)
    except (TypeError, ValueError):
        return
    try:
        sig.bind(None, **params)
    except TypeError as exc:
        accepted = [p for p in list(sig.parameters)[1:]]
        raise InputError(f"{where}: {role} {spec!r}: {exc}; expected its keyword parameters "
                         f"({', '.join(accepted) or 'none'})") from None
    check = getattr(fn, "check_params", None)   # the checks the function itself applies (golem.strategies)
    if callable(check):
        try:
            check(**params)
        except (TypeError, ValueError) as exc:
            raise InputError(f"{where}: {role} {spec!r}: {exc}") from None


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
