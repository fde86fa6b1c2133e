"""Bad input as one readable line: the error type and the helpers that keep echoed values short.

Every message names where the bad value came from (a file and line, a `--set` item, an
environment variable), the key path and what was expected. Values taken from the input are
shown through `show`, which escapes control characters (a key holding a newline or an ANSI
escape cannot break the line or the terminal) and caps their length (an alias bomb or a 5 MB
string is never echoed whole); `one_line` applies the same to a whole message before printing.
"""
from __future__ import annotations

import difflib
import stat
from collections.abc import Iterable
from typing import Any

#: longest value `show` echoes; longest message `one_line` keeps (with its length note: under 500)
SHOW_MAX = 60
LINE_MAX = 440


class InputError(Exception):
    """Bad user input: one line naming the file, the key path (and line) and what was expected."""


def escape(text: str) -> str:
    """Control characters (newlines, tabs, ESC ...) as visible escapes; everything else as is."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def clip(text: str, limit: int = SHOW_MAX) -> str:
    """`text` cut to `limit` characters with an ellipsis that says how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text):,} characters)"


def show(value: Any, limit: int = SHOW_MAX) -> str:
    """A value from the input as it may appear in a message: repr, escaped, at most `limit` long.

    Containers are summarised instead of printed: their repr could be enormous (aliases expand
    on printing) or cyclic."""
    if isinstance(value, (dict, list, tuple, set)):
        flat = len(value) <= 8 and not any(isinstance(v, (dict, list, tuple, set))
                                           for v in (value.values() if isinstance(value, dict) else value))
        text = clip(escape(repr(value)), limit) if flat else ""
        if text and len(text) <= limit:
            return text
        kind = type(value).__name__
        return f"a {kind} of {len(value):,} item{'s' if len(value) != 1 else ''}"
    if isinstance(value, str):
        text = escape(repr(value[:limit]))
        return text if len(value) <= limit else f"{text[:-1]}…{text[-1]} ({len(value):,} characters)"
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1:,} digits"
    return clip(escape(repr(value)), limit)


def key(name: Any) -> str:
    """A key (or key path part) from the input, escaped and capped."""
    return clip(escape(str(name)))


def one_line(message: str) -> str:
    """The message on one line of at most about `LINE_MAX` characters (control characters escaped);
    a longer one keeps its start (where, key path) and its end (what was expected)."""
    text = escape(" ".join(str(message).split("\n")))
    if len(text) <= LINE_MAX:
        return text
    head, tail = LINE_MAX * 2 // 3, LINE_MAX // 3
    return f"{text[:head]} … {text[-tail:]}"


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """' (did you mean 'x'?)' for the closest of `choices`, or ''."""
    best = difflib.get_close_matches(str(name), [str(c) for c in choices], n=1, cutoff=0.6)
    return f" (did you mean {best[0]!r}?)" if best else ""


_FILE_KINDS = {stat.S_IFDIR: "a directory", stat.S_IFLNK: "a symbolic link", stat.S_IFIFO: "a FIFO (named pipe)",
               stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket"}


def file_kind(mode: int) -> str:
    """What a file that is not a regular one is, from its st_mode, for an error line."""
    return _FILE_KINDS.get(stat.S_IFMT(mode), "not a regular file")
