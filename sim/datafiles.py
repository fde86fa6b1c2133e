"""The door of every file golem-sim opens in a run directory, and of the files it writes for the user:
a symbolic link is never followed, a FIFO, device or socket is refused before it could hang a reader or
be written to, and only a regular file is replaced. `sim.rundir` (run directories), `sim.recorder` and
`sim.checkpoint` all open their files here; it imports nothing else of sim's but its errors."""
from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import stat
from pathlib import Path

from sim.errors import InputError, clip, escape
from sim.errors import file_kind as _kind

_WRITE = os.O_WRONLY | os.O_RDWR


def _oserror(exc: OSError) -> str:
    return clip(escape(exc.strerror or str(exc)), 120)


def _refused(path: Path, what: str, expected: str) -> InputError:
    return InputError(f"{path}: {what}; expected {expected} (a run directory holds data: golem-sim follows no link "
                      "and opens no special file in it)")


def open_fd(path: str | Path, flags: int = os.O_RDONLY, perm: int = 0o644,
            expected: str = "a regular file golem-sim wrote") -> int:
    """A file descriptor of `path`, which must be a regular file (created with O_CREAT in `flags`):
    a symbolic link is not followed (O_NOFOLLOW), a FIFO, device or socket is refused before it is
    opened (lstat) and again after (fstat of a non-blocking open, so a FIFO swapped in between
    cannot hang), and a file written in place (append, read-write) may have no other hard link.
    Every refusal is an InputError naming the path and what it is, never its content."""
    path = Path(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise InputError(f"{path}: cannot open it: {_oserror(exc)}; expected {expected}") from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise _refused(path, _kind(st.st_mode), expected)
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, perm)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _refused(path, "a symbolic link", expected) from None
        if exc.errno == errno.ENXIO:
            raise _refused(path, "a FIFO or socket", expected) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _refused(path, _kind(st.st_mode), expected)
        if flags & _WRITE and not flags & os.O_TRUNC and st.st_nlink > 1:
            raise _refused(path, f"a file with {st.st_nlink} hard links", expected)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_file(path: str | Path, mode: str = "rb", expected: str = "a regular file golem-sim wrote", **kw):
    """`open(path, mode)` through `open_fd`: "r"/"rb" read, "a"/"ab" append (created if absent),
    "r+b" read and write in place, "x"/"xb" a new file (an old one of that name, a stale temporary,
    is removed first: the new file is never an inode planted under the name)."""
    base = mode.replace("b", "").replace("t", "")
    if base in ("x", "w"):
        try:
            os.unlink(path)         # never follows a link: removes the name only
        except FileNotFoundError:
            pass
        except IsADirectoryError:
            raise _refused(Path(path), "a directory", expected) from None
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
        mode = mode.replace("x", "w")
    else:
        flags = {"r": os.O_RDONLY, "a": os.O_WRONLY | os.O_APPEND | os.O_CREAT, "r+": os.O_RDWR}[base]
    return os.fdopen(open_fd(path, flags, expected=expected), mode, **kw)


def read_bytes(path: str | Path, expected: str = "a regular file golem-sim wrote") -> bytes:
    with open_file(path, "rb", expected) as fh:
        return fh.read()


def check_dir(path: Path, expected: str) -> bool:
    """Whether `path` exists as a real directory (False: absent); a link or another kind is refused."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if not stat.S_ISDIR(st.st_mode):
        raise _refused(path, _kind(st.st_mode), expected)
    return True


def _check_file(path: Path, expected: str) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(st.st_mode):
        raise _refused(path, _kind(st.st_mode), expected)


def check_out_file(path: str | Path, flag: str = "--out") -> None:
    """Refuse an output file name that holds anything but a regular file (see `write_out_file`)."""
    path = Path(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise InputError(f"{flag} {path}: {_oserror(exc)}; expected a file name") from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{flag} {path}: {_kind(st.st_mode)}; expected a new file or a regular file to replace "
                         "(golem-sim replaces no link, device, FIFO or folder)")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open_file(path, "rb") as fh:
        while chunk := fh.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()
