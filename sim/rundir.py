"""A run directory as a thing that can be damaged, raced for, or written to a full disk.

* `check_target(out)` before a run builds anything: `--out` must be (or be creatable as) an empty
  directory we can write to; `claim(out)` then takes it for this process: a lock file created
  exclusively and held with `flock` until the run ends, so two runs racing for one `--out` get
  one run and one clear error, and `resume` refuses a directory another process still writes.
* `read_manifest(run)` reads `manifest.json` and checks its shape (a JSON object with the keys a
  run writes, of the right types): a truncated, list-shaped or retyped manifest is named as such.
* `check_tables(run, manifest)` opens every part file's footer and compares its schema with the
  table's, then compares each file's sha256 with the one the manifest recorded (`files`; older
  runs: the per-table `hashes`), so `report`, `diff`, `replay` and `resume` name the damaged
  file instead of failing deep inside a reader or, worse, reading changed numbers.
* `Reserve`: a run keeps `RESERVE_BYTES` of disk in `.reserve` while it runs; when a write fails
  because the disk is full, the reserve is released so the manifest can still say `failed`.
* A run directory is data, not trusted paths: every file the engine reads or writes in one goes
  through `open_file` (no symbolic link followed, only regular files: a FIFO or device is refused
  instead of hanging a reader or being written to), `check_entries` refuses a planted link or
  special file among the names a run uses before a reader or `resume` touches anything, and
  `write_out_file` writes an `--out` file without replacing anything but a regular file.
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
from pathlib import Path
import pyarrow.parquet as pq

from sim.errors import InputError, clip, escape, show
from sim.datafiles import (_check_file, _oserror, check_dir, check_out_file, open_fd, open_file,  # noqa: F401
                           read_bytes, sha256_file)

LOCK = ".lock"
RESERVE = ".reserve"
RESERVE_BYTES = 1 << 20
STATUSES = ("running", "complete", "interrupted", "failed")
#: manifest keys a run always writes, with their JSON types
_REQUIRED = {"scenario": dict, "config": dict, "seed": int, "status": str}
_OPTIONAL = {"hashes": dict, "files": dict, "row_counts": dict, "sets": list, "config_sources": dict,
             "tape": dict, "failure": dict, "stopped_at_s": (int, float), "resumed_from_s": (int, float),
             "format": int, "versions": dict, "parent": (dict, type(None)), "changes": list}




# --------------------------------------------------------------------------- opening a run's files
#: the files a run keeps at its top level (besides its table and checkpoint folders)
RUN_FILES = ("manifest.json", "manifest.json.tmp", RESERVE, LOCK, "log.jsonl", "report.html")


def check_entries(run_dir: str | Path) -> None:
    """Every name a run uses in `run_dir` that exists is what the run made of it: its top-level
    files (`RUN_FILES`) and part files regular files, its table and checkpoint folders real
    directories holding regular files; checked (lstat, nothing opened) before a reader or `resume`
    touches the directory, so a planted link or FIFO is named instead of followed or read."""
    from sim.recorder import TABLES
    run_dir = Path(run_dir)
    for name in RUN_FILES:
        _check_file(run_dir / name, f"the run's own {name}")
    for t in TABLES:
        if check_dir(run_dir / t, f"the folder of the {t} table"):
            for f in (run_dir / t).iterdir():
                if f.name.startswith("part-"):
                    _check_file(f, f"a part file of the {t} table")
    if check_dir(run_dir / "checkpoint", "the run's checkpoint folder"):
        for f in (run_dir / "checkpoint").iterdir():
            _check_file(f, "a checkpoint file the run wrote")


def write_out_file(path: str | Path, data: bytes, flag: str = "--out") -> None:
    """Write an output file the user named (a report, a comparison, a tape, a schema): to a new
    temporary beside it, then renamed over it, only if it is absent or a regular file; a FIFO,
    device, socket, directory or symbolic link there is refused, not replaced (as root, `--out
    /dev/full` stays a device)."""
    from sim.recorder import atomic_write_bytes
    check_out_file(path, flag)
    atomic_write_bytes(Path(path), data)




# --------------------------------------------------------------------------- claiming --out
def check_target(out: Path, flag: str = "--out") -> None:
    """Refuse an output directory that cannot become this run's, before anything is built."""
    out = Path(out)
    if out.is_symlink():
        raise InputError(f"{flag} {out}: a symbolic link; expected a new or empty directory (golem-sim does not "
                         "write through a link)")
    if out.exists() and not out.is_dir():
        raise InputError(f"{flag} {out}: exists and is not a directory; expected a new or empty directory")
    if out.is_dir():
        try:
            if any(out.iterdir()):
                raise InputError(f"{out}: output directory is not empty (choose another {flag})")
        except PermissionError as exc:
            raise InputError(f"{flag} {out}: cannot list the directory: {_oserror(exc)}") from None
        if not os.access(out, os.W_OK | os.X_OK):
            raise InputError(f"{flag} {out}: the directory is not writable; expected a directory this user can write")
        return
    parent = _nearest_directory(out, flag)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"{flag} {out}: cannot create it: {parent} is not writable")


def _nearest_directory(path: Path, flag: str) -> Path:
    """The nearest existing ancestor of a path to be created, which must be a directory."""
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise InputError(f"{flag} {path}: {parent} is not a directory; expected a path under a directory")
    return parent


def check_writable_file(path: Path, flag: str = "--out") -> None:
    """Refuse an output file that cannot be written (checked before the work that produces it)."""
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        raise InputError(f"{flag} {path}: is a directory; expected a file name")
    check_out_file(path, flag)
    if path.exists():
        if not os.access(path, os.W_OK):
            raise InputError(f"{flag} {path}: the file is not writable")
        return
    parent = _nearest_directory(path, flag)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"{flag} {path}: cannot write under {parent} (read-only or not permitted)")


#: the claims this process holds, by directory: within one process a later claim takes over an
#: earlier one (a Python API run left open, then resumed), since flock would refuse the process itself
_HELD: dict[Path, "Claim"] = {}


class Claim:
    """This process' hold on a run directory (released when the run ends, or by the OS at exit)."""

    def __init__(self, run_dir: Path, fd: int):
        self.run_dir, self.fd = run_dir, fd
        _HELD[Path(run_dir).resolve()] = self

    def release(self, remove: bool = True) -> None:
        if self.fd < 0:
            return
        if _HELD.get(Path(self.run_dir).resolve()) is self:
            del _HELD[Path(self.run_dir).resolve()]
        if remove:
            try:
                (self.run_dir / LOCK).unlink()
            except OSError:
                pass
        os.close(self.fd)
        self.fd = -1


def claim(out: Path, flag: str = "--out") -> Claim:
    """Create `out` (if needed) and take it: exclusive lock file, then flock."""
    out = Path(out)
    check_target(out, flag)
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd = os.open(out / LOCK, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        raise InputError(f"{flag} {out}: another run is writing into this directory (choose another {flag})") from None
    except OSError as exc:
        raise InputError(f"{flag} {out}: cannot create the run directory: {_oserror(exc)}") from None
    others = [p.name for p in out.iterdir() if p.name != LOCK]
    if others:   # someone else got in between our check and our lock file
        os.close(fd)
        (out / LOCK).unlink(missing_ok=True)
        raise InputError(f"{out}: output directory is not empty (choose another {flag})")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise InputError(f"{flag} {out}: another run is writing into this directory (choose another {flag})") from None
    return Claim(out, fd)


def lock_existing(run_dir: Path) -> Claim:
    """Hold an existing run directory (resume): refused while another process holds it."""
    run_dir = Path(run_dir)
    earlier = _HELD.get(run_dir.resolve())
    if earlier is not None:
        earlier.release(remove=False)
    try:
        fd = open_fd(run_dir / LOCK, os.O_CREAT | os.O_WRONLY, expected="the run's lock file")
    except OSError as exc:
        raise InputError(f"{run_dir}: cannot lock the run directory: {_oserror(exc)}; expected a writable "
                         "run directory") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise InputError(f"{run_dir}: another process is running or resuming this run; wait for it to end") from None
    return Claim(run_dir, fd)


class Reserve:
    """Disk space held back for the manifest: freed when the disk is full, so a failure is recorded."""

    def __init__(self, run_dir: Path):
        self.path = Path(run_dir) / RESERVE
        try:
            with open_file(self.path, "wb", "the run's disk reserve") as fh:
                os.posix_fallocate(fh.fileno(), 0, RESERVE_BYTES)
        except OSError as exc:
            self.path.unlink(missing_ok=True)
            raise InputError(f"{run_dir}: cannot write to the run directory: {_oserror(exc)}") from None

    def release(self) -> None:
        self.path.unlink(missing_ok=True)


def is_disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


# --------------------------------------------------------------------------- reading a run
def read_manifest(run_dir: str | Path) -> dict:
    """The run's manifest, checked: one line naming the file and what is wrong otherwise."""
    p = Path(run_dir) / "manifest.json"
    try:
        text = read_bytes(p, "the run's JSON manifest").decode("utf-8")
    except FileNotFoundError:
        raise InputError(f"{p}: file not found; expected a run directory (made by golem-sim run)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{p}: cannot read the manifest ({clip(escape(str(exc)), 100)}); expected JSON") from None
    if not text.strip():
        raise InputError(f"{p}: empty file; expected the run's JSON manifest")
    try:
        m = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise InputError(f"{p}: not valid JSON ({clip(escape(str(exc)), 100)}; truncated?); expected the run's "
                         "JSON manifest") from None
    if not isinstance(m, dict):
        raise InputError(f"{p}: (top level): a JSON {type(m).__name__}; expected the run's manifest (a JSON object)")
    for k, tp in _REQUIRED.items():
        if k not in m:
            raise InputError(f"{p}: {k}: required key is missing; expected a run manifest")
        if not isinstance(m[k], tp) or isinstance(m[k], bool):
            raise InputError(f"{p}: {k}: {show(m[k])}; expected {tp.__name__}")
    for k, tp in _OPTIONAL.items():
        if k in m and m[k] is not None and not isinstance(m[k], tp):
            raise InputError(f"{p}: {k}: {show(m[k])}; expected {getattr(tp, '__name__', 'a number')}")
    if m["status"] not in STATUSES:
        raise InputError(f"{p}: status: {show(m['status'])}; expected one of {', '.join(STATUSES)}")
    if not 0 <= m["seed"] < 2**63:      # a run's seed, as --seed takes it: a numpy SeedSequence entropy
        raise InputError(f"{p}: seed: {show(m['seed'])}; expected an integer from 0 to 2**63 - 1")
    for k in ("hashes", "files"):
        for name, h in (m.get(k) or {}).items():
            if not isinstance(h, str):
                raise InputError(f"{p}: {k}.{clip(escape(str(name)))}: {show(h)}; expected a sha256 hex digest")
    if "sha256" not in m:
        raise InputError(f"{p}: sha256: required key is missing; expected the manifest a run writes (with its own "
                         "sha256, which readers check)")
    if not isinstance(m["sha256"], str) or hashlib.sha256(_canonical(m)).hexdigest() != m["sha256"]:
        raise InputError(f"{p}: content differs from its sha256 (damaged or edited after the run); expected the "
                         "manifest the run wrote")
    if m["status"] == "complete":
        from sim.recorder import TABLES
        missing = [t for t in TABLES if t not in (m.get("hashes") or {})]
        if missing:
            raise InputError(f"{p}: hashes: no content hash for {', '.join(missing)}; expected the hashes a "
                             "complete run records (the tables cannot be checked without them)")
    return m


def _canonical(manifest: dict) -> bytes:
    return json.dumps({k: v for k, v in manifest.items() if k != "sha256"}, sort_keys=True, separators=(",", ":"),
                      default=_plain).encode()


def _plain(o):
    from sim.recorder import _json_default
    return _json_default(o)


def write_manifest(run_dir: Path, manifest: dict) -> None:
    """manifest.json with its own sha256 (of the rest, as compact sorted JSON): an edit or damage
    that keeps every key's type is still seen by the readers."""
    from sim.recorder import atomic_write_json
    plain = json.loads(_canonical(manifest))
    plain["sha256"] = hashlib.sha256(_canonical(plain)).hexdigest()
    atomic_write_json(Path(run_dir) / "manifest.json", plain)


def hashes(run_dir: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(sha256 per table over its part files in order, as content_hashes; sha256 per part file),
    reading each file once."""
    from sim.recorder import TABLES, table_files
    tables, files = {}, {}
    for t in TABLES:
        h = hashlib.sha256()
        for f in table_files(run_dir, t):
            data = read_bytes(f)
            h.update(f.name.encode())
            h.update(data)
            files[f"{t}/{f.name}"] = hashlib.sha256(data).hexdigest()
        tables[t] = h.hexdigest()
    return tables, files


def check_part(run_dir: Path, table: str, f: Path) -> int:
    """Open one part's footer and compare its schema with the table's; returns its row count."""
    from sim.recorder import SCHEMAS
    rel = f.relative_to(run_dir)
    fh = open_file(f, "rb", f"a part of the {table} table")
    try:
        meta = pq.ParquetFile(fh)
        schema = meta.schema_arrow
        rows = meta.metadata.num_rows
    except Exception as exc:   # noqa: BLE001 - pyarrow raises several kinds for a damaged footer
        size = f.stat().st_size if f.exists() else 0
        what = "empty file" if size == 0 else f"not a readable Parquet file ({clip(escape(str(exc)), 80)})"
        raise InputError(f"{run_dir / rel}: {what}; the run directory is damaged (expected a part of the "
                         f"{table} table)") from None
    finally:
        fh.close()
    expected = SCHEMAS[table]
    if not schema.remove_metadata().equals(expected):
        got = [n for n in schema.names if n not in expected.names][:3]
        miss = [n for n in expected.names if n not in schema.names][:3]
        detail = (f"columns {got} not in the table" if got else f"columns {miss} missing" if miss
                  else "column types differ")
        raise InputError(f"{run_dir / rel}: a Parquet file of another schema ({detail}); expected a part of the "
                         f"{table} table as golem-sim writes it")
    return rows


def check_tables(run_dir: str | Path, manifest: dict, *, verify_hashes: bool = True) -> None:
    """Every part file readable with its table's schema and, whatever the run's status, the bytes
    the run recorded: the manifest's `files` (complete, interrupted and failed runs); a killed run's
    manifest lists none, so its parts are checked against its newest intact checkpoint (those after
    it, written since, have no record to check). A listed part missing, a part not listed (before
    a killed run's checkpoint) or one whose bytes differ is named. Entries that are links or
    special files are refused first (`check_entries`)."""
    from sim.recorder import TABLES, table_files
    run_dir = Path(run_dir)
    check_entries(run_dir)
    listed, where, before = manifest.get("files"), "manifest.json", None
    if listed is None and manifest.get("status") != "complete":
        from sim.checkpoint import covered_parts
        covered = covered_parts(run_dir / "checkpoint")
        if covered is not None:
            (listed, before), where = covered, "the checkpoint"
    for rel in listed or {}:
        t, _, name = str(rel).partition("/")
        if t not in TABLES or not _PART.fullmatch(name):
            raise InputError(f"{run_dir / 'manifest.json'}: files: {clip(escape(str(rel)))}: not a part file of a "
                             "table; expected TABLE/part-NNNNN.parquet")
        if not (run_dir / rel).is_file():
            raise InputError(f"{run_dir / rel}: part file missing (listed in {where}); the run directory is damaged")
    recorded = listed if verify_hashes else None
    for t in TABLES:
        for f in table_files(run_dir, t):
            check_part(run_dir, t, f)
            if recorded is None or (before is not None and _part_index(f) >= before):
                continue
            want = recorded.get(f"{t}/{f.name}")
            if want is None:
                raise InputError(f"{f}: a part file {where} does not list; the run directory was changed after the "
                                 "run (expected only the parts it wrote)")
            if sha256_file(f) != want:
                raise InputError(f"{f}: content differs from the sha256 in {where} (damaged or changed after the "
                                 "run)")
    if listed is None and verify_hashes and manifest.get("hashes") and manifest.get("status") == "complete":
        tables, _ = hashes(run_dir)
        for t, h in manifest["hashes"].items():
            if t in tables and tables[t] != h:
                raise InputError(f"{run_dir / t}: the part files differ from the hash in manifest.json (damaged or "
                                 "changed after the run)")


_PART = re.compile(r"part-(\d{5,})\.parquet")


def _part_index(f: Path) -> int:
    try:
        return int(f.stem.split("-", 1)[1])
    except (IndexError, ValueError):
        return -1


__all__ = ["check_target", "check_writable_file", "check_out_file", "write_out_file", "open_fd", "open_file",
           "read_bytes", "check_entries", "check_dir", "claim", "lock_existing", "Reserve", "read_manifest", "check_tables",
           "hashes", "sha256_file", "is_disk_full", "write_manifest"]
