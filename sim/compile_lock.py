"""One process compiles a kernel; the others that need it at the same moment wait and load it.

numba caches each compiled kernel on disk (`cache=True`), but nothing stops two processes that miss
the cache at once from both compiling it: on a fresh machine a sweep's workers, the validity map's
pool, the test suite's workers and the command-line processes they start each spent the ~30 s of a
run's kernels on the same functions. With `install()`, a cache miss takes an exclusive lock on a file
beside the function's cache index, looks in the cache again (the holder may have saved it meanwhile)
and compiles only if it is still absent; the lock is released once the result is saved, or when the
compile fails. Saving under the lock also keeps two processes from overwriting each other's entries
in the function's index. Where the lock file cannot be made or locked (a read-only cache, a file
system without locks), it compiles as before.
"""
from __future__ import annotations

import fcntl
import os

_held: dict[str, int] = {}        # lock path -> open descriptor, for the compiles this process holds


def _lock_path(cache) -> str:
    return os.path.join(cache.cache_path, cache._cache_file._index_name + ".lock")


def _release(path: str) -> None:
    fd = _held.pop(path, None)
    if fd is not None:
        os.close(fd)               # closing the descriptor drops its flock


def install() -> None:
    """Wrap numba's per-function cache (idempotent; every cached function in the process)."""
    from numba.core import caching, event

    if getattr(caching.Cache, "_one_compiler", False):
        return
    load, save = caching.Cache.load_overload, caching.Cache.save_overload

    def load_overload(self, sig, target_context):
        cres = load(self, sig, target_context)
        if cres is not None or not self._enabled:
            return cres
        path = _lock_path(self)
        if path in _held:          # this process is compiling the function already (another signature:
            return None            # its save releases the lock early, so another process may compile too)
        try:
            self._impl.locator.ensure_cache_path()
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)             # waits while another process compiles it
            cres = load(self, sig, target_context)
        except OSError:                                # a file system without locks: compile unlocked
            os.close(fd)
            return None
        except BaseException:                          # a signal's exception while waiting
            os.close(fd)
            raise
        if cres is not None:
            os.close(fd)
            return cres
        _held[path] = fd
        return None

    def save_overload(self, sig, data):
        try:
            save(self, sig, data)
        finally:
            _release(_lock_path(self))

    class _Failed(event.Listener):
        """A compile that raised never reaches save_overload: release its lock here."""

        def on_start(self, e):
            pass

        def on_end(self, e):
            # failed = no overload was added (numba's Event.is_failed reads the other way round)
            disp = e.data["dispatcher"]
            cache = getattr(disp, "_cache", None)
            if isinstance(cache, caching.Cache) and tuple(e.data["args"]) not in disp.overloads:
                _release(_lock_path(cache))

    caching.Cache.load_overload, caching.Cache.save_overload = load_overload, save_overload
    caching.Cache._one_compiler = True
    event.register("numba:compile", _Failed())
