"""Reading YAML input files once, safely, with one-line errors.

The file is composed once (libyaml's C parser when PyYAML has it) into a node graph; the graph is
checked before anything is built from it, then constructed with the safe constructor (no
object-building tags) and returned with the graph, which maps error locations back to lines.

Refused, each as an `InputError` naming the file and line:
- nesting deeper than `MAX_DEPTH` levels (libyaml stops at 1,000, Python's recursion sooner);
- aliases that expand to more than `MAX_NODES` values ("billion laughs"), or refer to themselves;
- a key given twice in one mapping (YAML says keys are unique; PyYAML keeps the last silently);
- files larger than `MAX_BYTES`, empty files, undecodable text, integers of over 4,300 digits;
- anything but a regular file (a FIFO, /dev/zero, a socket, a directory): `read_input`, the one
  door every input file (scenario, config, sweep, tape) comes through, refuses it before reading.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import yaml

from sim.errors import InputError, clip, escape, file_kind, key

#: deepest nesting a scenario, config or sweep file may have (theirs is at most 6)
MAX_DEPTH = 32
#: most values a document may hold once aliases are followed (a scenario holds a few hundred)
MAX_NODES = 100_000
#: largest input file read (a scenario is a few kB)
MAX_BYTES = 256 * 1024

Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_MERGE = "tag:yaml.org,2002:merge"


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return node.value
    if isinstance(node, yaml.MappingNode):
        return [n for kv in node.value for n in kv]
    return []


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def check_graph(root: yaml.Node, where: str, lines: bool = True) -> None:
    """Depth, expansion, self-reference and duplicate keys of a composed document, without
    recursion and without expanding anything (a shared node is sized once, a scalar in place).
    `lines`: name the line in errors (not for a value given on the command line)."""
    def at(node: yaml.Node) -> str:
        return f"{where}:{_line(node)}" if lines else where

    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    open_: set[int] = set()
    stack: list[tuple[yaml.Node, bool, tuple]] = [(root, False, ())]
    while stack:
        node, done, path = stack.pop()
        k = id(node)
        kids = _children(node)
        if done:
            open_.discard(k)
            inner = [c for c in kids if not isinstance(c, yaml.ScalarNode)]
            size[k] = 1 + len(kids) - len(inner) + sum(size[id(c)] for c in inner)
            depth[k] = 1 + max((depth[id(c)] for c in inner), default=1 if kids else 0)
            if size[k] > MAX_NODES:
                raise InputError(f"{at(node)}: holds more than {MAX_NODES:,} values (aliases followed); "
                                 "expected a smaller document (an alias bomb?)")
            if depth[k] > MAX_DEPTH:
                raise InputError(f"{at(node)}: nested more than {MAX_DEPTH} levels deep; expected "
                                 "at most a few levels of mappings and lists")
            continue
        if k in size:
            continue
        if k in open_:
            raise InputError(f"{at(node)}: an alias refers to the value that contains it; expected "
                             "a document without recursive aliases")
        if isinstance(node, yaml.ScalarNode):
            size[k], depth[k] = 1, 1
            continue
        open_.add(k)
        stack.append((node, True, path))
        if isinstance(node, yaml.MappingNode):
            seen: dict[tuple[str, str], int] = {}
            for kn, vn in node.value:
                if isinstance(kn, yaml.ScalarNode) and kn.tag != _MERGE:
                    ident = (kn.tag, kn.value)
                    if ident in seen:
                        dotted = ".".join(key(p) for p in path + (kn.value,))
                        raise InputError(f"{at(kn)}: {dotted}: duplicate key (first at line {seen[ident]}); "
                                         "expected each key once per mapping")
                    seen[ident] = _line(kn)
                if id(vn) not in size and not isinstance(vn, yaml.ScalarNode):
                    stack.append((vn, False, path + (kn.value if isinstance(kn, yaml.ScalarNode) else "?",)))
                if not isinstance(kn, yaml.ScalarNode) and id(kn) not in size:
                    stack.append((kn, False, path))
        else:
            stack.extend((c, False, path + (i,)) for i, c in enumerate(kids)
                         if id(c) not in size and not isinstance(c, yaml.ScalarNode))




def open_regular(path: str | Path, what: str, error: type[Exception] = InputError) -> int:
    """A read-only descriptor of `path`, which must be a regular file (symlinks followed).

    Opened with O_NONBLOCK and checked with fstat on the open descriptor, so a FIFO without a
    writer cannot block the open and a device (/dev/zero, /dev/urandom) is never read: either
    would hang or fill the memory. `what` names the file in the error ("a YAML file")."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise error(f"{p}: file not found; expected {what}") from None
    except OSError as exc:
        raise error(f"{p}: cannot open: {clip(escape(exc.strerror or str(exc)), 120)}; expected {what}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise error(f"{p}: is {file_kind(mode)}; expected {what} (a regular file)")
    return fd


def read_input(path: str | Path, limit: int, what: str, error: type[Exception] = InputError) -> bytes:
    """The bytes of a regular file (`open_regular`) of at most `limit` bytes; a larger file is
    refused after reading at most limit + 1 bytes, whatever its size claims to be."""
    fd = open_regular(path, what, error)
    try:
        with os.fdopen(fd, "rb") as fh:   # in pieces: read(n) would reserve n bytes at once
            parts, size = [], 0
            while size <= limit and (part := fh.read(min(1 << 20, limit + 1 - size))):
                parts.append(part)
                size += len(part)
            data = b"".join(parts)
    except OSError as exc:
        raise error(f"{path}: cannot read: {clip(escape(exc.strerror or str(exc)), 120)}; expected {what}") from None
    if len(data) > limit:
        raise error(f"{path}: larger than {limit:,} bytes; expected {what} of at most {limit:,} bytes")
    return data


def _problem(exc: yaml.YAMLError) -> str:
    """PyYAML's message on one line: its 'problem' (and 'context'), without the quoted snippet."""
    problem = getattr(exc, "problem", None)
    if not problem:
        return clip(escape(" ".join(str(exc).split())), 200)
    context = getattr(exc, "context", None)
    return escape(f"{problem} ({context})" if context else problem)


def read_yaml(path: str | Path) -> tuple[Any, yaml.Node | None]:
    """(the document, its node graph) of a YAML file; an empty document is an InputError."""
    p = Path(path)
    data = read_input(p, MAX_BYTES, "a YAML file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InputError(f"{p}:{line}: bytes that are not UTF-8; expected a YAML file in UTF-8") from None
    loader = Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            raise InputError(f"{p}: empty file; expected a YAML mapping")
        check_graph(node, str(p))
        data = loader.construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f"{p}:{mark.line + 1}" if mark else str(p)
        raise InputError(f"{where}: invalid YAML: {_problem(exc)}") from None
    except RecursionError:
        raise InputError(f"{p}: nested too deeply to read; expected at most {MAX_DEPTH} levels") from None
    except ValueError as exc:   # int('9' * 5000), a timestamp such as 2020-13-45 ...
        what = "an integer of over 4,300 digits" if "integer string conversion" in str(exc) else \
            clip(escape(str(exc)), 160)
        raise InputError(f"{p}: invalid value: {what}; expected numbers, dates and text YAML can read") from None
    finally:
        loader.dispose()
    if data is None:
        raise InputError(f"{p}: empty document (only comments or null); expected a YAML mapping")
    return data, node


def parse_scalar_text(text: str, where: str) -> Any:
    """A --set or environment value read as YAML (0.5, true, off, [1, 2] mean what they say), with
    the file checks (an alias bomb on the command line is refused too). Text that is not YAML is
    kept as the text it is."""
    if len(text) > MAX_BYTES:
        raise InputError(f"{where}: {len(text):,} characters; expected a value of at most {MAX_BYTES:,}")
    loader = Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        check_graph(node, where, lines=False)
        return loader.construct_document(node)
    except (yaml.YAMLError, ValueError, RecursionError):
        return text
    finally:
        loader.dispose()
