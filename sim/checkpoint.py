"""Checkpoints (SPEC §13: a run killed mid-way resumes to the same result; sim.resume resumes it).

At every periodic recorder flush the world saves its whole state to `RUN/checkpoint/`:
Population arrays; the Grimoire's used slots (columns, embeddings, fingerprints), its dicts
(recall_when, links, phrases, reflex firings: as arrays) and scalars (next_id); the Mind's own arrays, dicts and scalars
(topic names, gas level; or `Mind.checkpoint_state()` when it has one); the tape; the world's
counters (event sequence, market step, stats, recorder part index); and the SimPy queue: the
next wake-up of the market, of each heartbeat cohort and of the flusher, and every Clade push
still in flight (receiver, due time, the captured entry).

Why the result is byte-identical: the flusher runs at a priority below every other event
(`sim.world.LOW`), so a checkpoint always sees whole instants; pending events are saved in SimPy
creation order (eid) with their exact float times and recreated in that order on resume, and
SimPy orders equal (time, priority) by creation, so same-time events run in the same order as in
the uninterrupted run. The Mind's lexicon and item memories are pure functions of the seed and
are rebuilt, not saved. Part files at or past the checkpoint's part index are deleted on resume
and rewritten identically.

Files: `state-NNNNN.arrays` (the arrays as .npy records back to back) then `state-NNNNN.json`
(everything else, with the arrays' offsets, size and sha256, the sha256 of every part file the
state covers, and its own sha256) are each written to a temporary name, fsynced and renamed; the
json is the commit point. The simulation thread writes the arrays (into the page cache) and takes
the rest of the state as JSON, then goes on; the commit runs on the recorder's writer thread
behind the flush's parts (`Recorder.after_parts`): the arrays fsynced, hashed and renamed, then
the json, so a state lists only parts that are on disk. The run goes on while it works: the flush
after next waits for it (the next flush's parts queue behind it), and so does the next save
(`Recorder.wait_jobs`), which reuses the spare arrays file the commit leaves. On the simulation
thread, fsync and hash would cost a recorded 1,000-Golem day ~0.3 s a save, and waiting for the
parts first ~0.8 s. The two newest states
are kept: `load` checks a state against its checksums and falls back to the one before when it
fails them, reporting the damaged one as corrupt (never as "no checkpoint"). The arrays file of
the state a commit removes is kept as `spare.arrays`, which the next save writes over in place
(pages the page cache holds, not new ones). A state names no paths: its arrays file is the one of its own
number in the same folder, so a damaged json cannot send a resume outside the run directory.
Resume deletes only part files at or past the state's part index (which the run wrote after the
state and rewrites identically), after checking the parts before it against their sha256.

When: at a recorder flush, if the wall-time budget allows (`BUDGET`, a 1 % share: big worlds save
rarely), or if otherwise the next flush would leave more than `SIM_SHARE` (5 %) of the run's
simulated duration unsaved, as long as checkpoints stay within `SIM_BUDGET` (10 %) of the wall
time. So a resume repeats at most max(5 % of the duration, one flush interval) of simulated time,
except for a big world on a short run, where that would cost more than a tenth of the run. A
save's cost is its time on the simulation thread (the commit's on the writer thread is not).
"""
from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import re
import time
from dataclasses import asdict, fields
from itertools import chain, islice
from pathlib import Path

import numpy as np
import simpy

from golem import grimoire as gm
from sim.market import MarketEvent, Tape
from sim import datafiles
from sim.errors import clip, escape, show
from sim.recorder import TABLES, _json_default, atomic_write_bytes
from sim.scenario import InputError

#: the checkpoint layout (batched Clade deliveries, arrays as raw .npy records, checksums, reflex
#: firings as a dict, push latencies in ms, act times as 48 bits, plain dicts as key and value
#: lists, the Grimoire's int-keyed dicts as arrays, the epoch of its scan terms); resume refuses others
FORMAT = 9
_TAPE_ARRAYS = ("time_ms", "open", "high", "low", "close", "volume", "tvl", "gas", "funding", "regime", "normal_vol")
_STATE = re.compile(r"state-(\d{5,})\.json$")
_OURS = re.compile(r"state-(\d{5,})\.(?:json|arrays)(?:\.tmp)?$")
_ARRAYS = re.compile(r"state-(\d{5,})\.arrays$")
#: a pruned state's arrays file, kept for the next save to write over (`_write_arrays`)
SPARE = "spare.arrays"
PART_NAME = re.compile(r"part-(\d{5,})\.parquet$")


class CheckpointError(RuntimeError):
    """The world holds an event a checkpoint cannot describe (a bug, not bad input)."""


# ------------------------------------------------------------------------------------ saving
def _used_slots(gr) -> np.ndarray:
    """Slots in use: slot g*cap + j for j < count[g] (slots past count are never touched)."""
    return np.concatenate([np.arange(g * gr.capacity, g * gr.capacity + int(c)) for g, c in enumerate(gr.count)]
                          ).astype(np.int64) if gr.n_golems else np.zeros(0, np.int64)


def _mind_state(mind) -> dict[str, np.ndarray]:
    if hasattr(mind, "checkpoint_state"):
        return dict(mind.checkpoint_state())
    return {k: v for k, v in vars(mind).items() if isinstance(v, np.ndarray)}


_SCALARS = (bool, int, float, str)
_EXACT = frozenset(_SCALARS)
_SEQ = frozenset((tuple, list))


def _plain_dicts_and_scalars(obj, skip=(), arrays: dict | None = None, prefix: str = "") -> dict:
    """An object's small mutable state as JSON: scalars, and dicts whose keys are ints/strs and
    whose values are scalars or tuples of scalars (Grimoire recall_when/links/phrases, the Mind's
    topic names, its gas level, ...). Generic on purpose, so state added to the mind later is
    checkpointed without touching this module; static values are restored to what they were.
    With `arrays`, a dict of int keys whose values are all ints, all strings, or all tuples of
    one of them goes there instead, as arrays named `prefix + name + "/..."` (`_packed`)."""
    out = {}
    for k, v in vars(obj).items():
        if k in skip or k.startswith("_"):
            continue
        if isinstance(v, _SCALARS):
            out[k] = {"scalar": v}
        elif not isinstance(v, dict):
            continue
        elif arrays is not None and (packed := _packed(v)) is not None:
            out[k] = {"arrays": packed[0]}
            arrays.update((f"{prefix}{k}/{n}", a) for n, a in packed[1].items())
        elif (pairs := _plain_pairs(v)) is not None:
            out[k] = pairs
    return out


def _packed(v: dict) -> tuple[str, dict[str, np.ndarray]] | None:
    """A dict of int keys as arrays, when its values are all ints ("int"), all strings ("str"),
    or all tuples of ints or of strings ("int-tuples", "str-tuples": flattened, with each one's
    length), else None. The Grimoire's links and phrases hold ~10^5 items after ten simulated
    days: as JSON they were most of a save's time beside its arrays. Ints beyond int64 and
    strings with a NUL (numpy's fixed-width strings drop trailing ones) stay JSON."""
    if not v or set(map(type, v)) != {int}:
        return None
    vals = list(v.values())
    vt = set(map(type, vals))
    out = {}
    if vt == {tuple}:
        out["lengths"] = np.fromiter(map(len, vals), np.int64, len(vals))
        vals = list(chain.from_iterable(vals))
        vt, kind = set(map(type, vals)), "-tuples"
    else:
        kind = ""
    try:
        out["keys"] = np.fromiter(v, np.int64, len(v))
        if vt <= {int}:
            out["values"], kind = np.fromiter(vals, np.int64, len(vals)), "int" + kind
        elif vt == {str} and "\x00" not in "".join(vals):
            out["values"], kind = np.array(vals, dtype=str), "str" + kind
        else:
            return None
    except OverflowError:
        return None
    return kind, out


def _plain_pairs(v: dict) -> dict | None:
    """A plain dict as {"keys", "values", "seq"} (seq: whether each value is a tuple; one bool
    when all or none are), or None when it is not plain. The types are checked as sets built at C
    speed, since a Grimoire's links and phrases hold ~10^5 items after ten simulated days; a dict
    holding subclasses (numpy floats, enums) takes the item-by-item isinstance check."""
    keys, vals = list(v), list(v.values())
    kt, vt = set(map(type, keys)), set(map(type, vals))
    if kt <= {int, str} and vt <= _EXACT | _SEQ and (
            not vt & _SEQ or set(map(type, chain.from_iterable(y for y in vals if type(y) in _SEQ))) <= _EXACT):
        return {"keys": keys, "values": vals,
                "seq": [type(y) in _SEQ for y in vals] if vt & _SEQ and vt - _SEQ else bool(vt & _SEQ)}
    if all(isinstance(x, (int, str)) and (isinstance(y, _SCALARS) or (isinstance(y, (tuple, list)) and
                                                                    all(isinstance(z, _SCALARS) for z in y)))
           for x, y in v.items()):
        return {"keys": keys, "values": vals, "seq": [isinstance(y, (tuple, list)) for y in vals]}
    return None


def _restore_plain(obj, state: dict, arrays: dict | None = None, prefix: str = "") -> None:
    for k, v in state.items():
        if "scalar" in v:
            setattr(obj, k, v["scalar"])
            continue
        d = getattr(obj, k)
        d.clear()
        if "arrays" in v:
            keys, vals = (arrays[f"{prefix}{k}/{n}"].tolist() for n in ("keys", "values"))
            if v["arrays"].endswith("-tuples"):
                flat = iter(vals)
                vals = [tuple(islice(flat, n)) for n in arrays[f"{prefix}{k}/lengths"].tolist()]
            d.update(zip(keys, vals))
            continue
        keys, vals, seq = v["keys"], v["values"], v["seq"]
        if seq is True:
            d.update(zip(keys, map(tuple, vals)))
        elif seq is False:
            d.update(zip(keys, vals))
        else:
            d.update((x, tuple(y) if s else y) for x, y, s in zip(keys, vals, seq))


def _mind_json(mind) -> dict:
    """Rows written outside a tick (pending_entries) are always emitted by the tick that made them,
    so at a flush there are none; if there were, the checkpoint would be wrong, so refuse."""
    if getattr(mind, "pending_entries", None):
        raise CheckpointError("cannot checkpoint: the Mind holds entries not yet emitted")
    return _plain_dicts_and_scalars(mind)


def _pending(world) -> tuple[list[dict], list[dict], dict[str, np.ndarray]]:
    """The SimPy queue as data, in creation (eid) order; Clade entries deduplicated."""
    from sim.world import Delivery
    items, entries, arrays = [], [], {}
    seen: dict[int, int] = {}
    for t, prio, eid, ev in sorted(world.env._queue, key=lambda q: q[2]):
        cbs = ev.callbacks or []
        if not cbs:
            continue  # a finished process' own event: nothing waits on it
        for cb in cbs:
            if isinstance(cb, Delivery):
                parcels = []
                for sender, entry, alert_type, recv, latency_ms in cb.parcels:
                    k = seen.get(id(entry))
                    if k is None:
                        k = seen[id(entry)] = len(entries)
                        entries.append({f: v for f, v in entry.items() if f != "emb"})
                        arrays[f"entry/{k}"] = np.asarray(entry["emb"])
                    parcels.append(dict(sender=int(sender), entry=k, alert_type=alert_type,
                                        receivers=[int(r) for r in recv], latency_ms=[int(x) for x in latency_ms]))
                items.append(dict(role="delivery", time=t, priority=prio, parcels=parcels))
                continue
            role = world.roles.get(getattr(cb, "__self__", None))
            if role == "reporter":
                continue  # progress display only: restarted fresh on resume
            if role is None:
                raise CheckpointError(f"cannot checkpoint a pending event at t={t}: unknown callback {cb!r}")
            items.append(dict(role=list(role) if isinstance(role, tuple) else role, time=t, priority=prio))
    return items, entries, arrays


def save(world, ckdir: Path) -> Path:
    """Take the checkpoint of `world` now (called by the flusher right after a flush) and queue its
    commit; returns the path of its json, which exists once `world.rec.sync()` has returned."""
    from sim.world import LOW
    ckdir = Path(ckdir)
    ckdir.mkdir(parents=True, exist_ok=True)
    datafiles.check_dir(ckdir, "the run's checkpoint folder")
    world.rec.wait_jobs()          # the last state's commit (its prune leaves the spare this save takes)
    pop, gr = world.pop, world.gr
    arrays: dict[str, np.ndarray] = {}
    for k, v in vars(pop).items():
        if isinstance(v, np.ndarray):
            arrays[f"pop/{k}"] = v
    full = bool((gr.count == gr.capacity).all())
    used = None if full else _used_slots(gr)
    n_slots = gr.n_golems * gr.capacity
    # per-slot arrays (columns, embeddings, HDC fingerprints...) keep only the used slots, lazily:
    # a big arena is copied one array at a time, if at all; other arrays (count) whole
    slot_arrays = {f"gr/{k}": col for k, col in gr.cols.items()}
    # the scan terms are not saved: a resume recomputes them from the columns (`refresh_scan`)
    slot_arrays.update({f"gr.{k}": v for k, v in vars(gr).items()
                        if isinstance(v, np.ndarray) and k not in gm.Grimoire.SCAN_TERMS})
    for k, v in slot_arrays.items():
        if v.shape[:1] == (n_slots,):
            arrays[k] = (lambda c=v: c) if full else (lambda c=v: c[used])
        else:
            arrays[k] = v
    arrays["gr/count"] = gr.count
    for k, v in _mind_state(world.mind).items():
        arrays[f"mind/{k}"] = v
    pending, entries, earr = _pending(world)
    arrays.update(earr)
    tape = world.tape
    for k in _TAPE_ARRAYS:
        arrays[f"tape/{k}"] = getattr(tape, k)
    # the flusher is running: its next wake-up is created after this save, i.e. last
    pending.append(dict(role="flusher", time=world.env.now + world.cfg.recording.flush_every_s, priority=LOW))

    part = world.rec.part
    name = f"state-{part:05d}"
    arrays_path, json_path = ckdir / f"{name}.arrays", ckdir / f"{name}.json"
    grimoire = _plain_dicts_and_scalars(gr, arrays=arrays, prefix="gr:")
    index = _write_arrays(arrays_path, arrays)
    meta = {
        "format": FORMAT, "now_s": world.env.now, "part": part, "event_seq": world.event_seq,
        "market_step": world.market_step, "stats": asdict(world.stats),
        "grimoire": grimoire,
        "pending": pending, "entries": entries, "array_offsets": index,
        "mind": _mind_json(world.mind),
        "tape": {"bar_ms": int(tape.bar_ms), "normal_interval_ms": int(tape.normal_interval_ms), "assets": list(tape.assets), "protocols": list(tape.protocols),
                 "regime_names": list(tape.regime_names), "events": [asdict(e) for e in tape.events]},
    }
    snapshot = _canonical(meta)       # as JSON now: the world moves on while the commit waits

    def commit(parts) -> None:
        """On the writer thread, after the flush's parts: the arrays made durable and checked, then
        the json (the commit point), then the states before the fallback removed."""
        try:
            written = parts()         # raises if a part of the flush failed: no state then
            size, digest = _seal(arrays_path)
        except BaseException:
            arrays_path.with_name(arrays_path.name + ".tmp").unlink(missing_ok=True)
            arrays_path.unlink(missing_ok=True)
            raise
        _write_meta(json_path, dict(json.loads(snapshot), arrays_bytes=size, arrays_sha256=digest,
                                    parts=dict(sorted(written.items()))))
        _prune(ckdir, part)
    world.rec.after_parts(commit)
    return json_path


def _prune(ckdir: Path, part: int) -> None:
    """Remove the states older than state `part` but its fallback: files of ours only, never
    anything else in the folder, nor a newer state than `part` (one being written). One arrays
    file of them is kept as the spare (`SPARE`) the next save writes over."""
    fallback = _previous(ckdir, part)
    spare = (ckdir / SPARE).exists()
    for f in sorted(ckdir.iterdir()):
        m = _OURS.match(f.name)
        if m and int(m.group(1)) < part and f.name.split(".", 1)[0] != fallback:
            if not spare and _ARRAYS.match(f.name):
                os.replace(f, ckdir / SPARE)
                spare = True
            else:
                f.unlink(missing_ok=True)


def _previous(ckdir: Path, part: int) -> str | None:
    """The newest complete state before `part` (kept as the fallback)."""
    older = sorted(int(m.group(1)) for f in ckdir.iterdir() if (m := _STATE.match(f.name)) and int(m.group(1)) < part)
    return f"state-{older[-1]:05d}" if older else None


def _canonical(meta: dict) -> bytes:
    """The bytes a state's sha256 covers: its JSON without the sha256 key, keys sorted, compact."""
    return json.dumps({k: v for k, v in meta.items() if k != "sha256"}, sort_keys=True, separators=(",", ":"),
                      default=_json_default).encode()


def _write_meta(path: Path, meta: dict) -> None:
    """`meta` holds plain JSON values, as `json.loads` gives them (string keys, lists), so its
    canonical bytes are the ones a reader recomputes from the file. One encoding: the commit
    runs on the writer thread, and the encoder holds the GIL the simulation thread needs."""
    body = _canonical(meta)
    atomic_write_bytes(path, body[:-1] + f',"sha256":"{hashlib.sha256(body).hexdigest()}"}}\n'.encode())


def _write_arrays(path: Path, arrays: dict) -> list:
    """Each array as a .npy record (header, then the raw data straight from the array), back to back
    in one file: no zip container, whose CRC pass cost as much as the write, and no copy of the
    world in memory (arrays may be callables producing them one at a time). Written to `path`'s
    temporary name (`_seal` makes it durable and renames it); returns [name, offset] per array.

    The spare a prune left (a state's arrays file, as big) becomes that temporary and is written
    over in place, then cut to length: its pages are in the page cache already, and filling new
    ones was most of a save (a 216 MB world: ~0.03 s over the spare, 0.3-0.6 s into a new file)."""
    tmp = path.with_name(path.name + ".tmp")
    spare = path.with_name(SPARE)
    index = []
    try:
        if os.path.lexists(spare):
            os.replace(spare, tmp)      # the name moves; a link planted as the spare is never written through
        try:
            fh = datafiles.open_file(tmp, "r+b")
        except (FileNotFoundError, InputError):
            fh = datafiles.open_file(tmp, "wb")   # absent, or not a regular file of ours: a new file
        with fh:
            for k, v in arrays.items():
                index.append([k, fh.tell()])
                np.lib.format.write_array(fh, np.asanyarray(v() if callable(v) else v), allow_pickle=False)
            fh.truncate()
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.errno is None and "requested and" in str(exc):
            # numpy's tofile reports a short write without errno: on a regular file that is a full disk
            raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} ({exc})", str(tmp)) from exc
        raise
    return index


def _seal(path: Path) -> tuple[int, str]:
    """`_write_arrays`' temporary file fsynced, hashed and renamed to `path`: its size and sha256
    (read back from the page cache: a hash of what is on disk, not of what was meant)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = datafiles.open_fd(tmp)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    digest = datafiles.sha256_file(tmp)
    size = tmp.stat().st_size
    os.replace(tmp, path)
    return size, digest


def _read_arrays(path: Path, index: list) -> dict[str, np.ndarray]:
    with datafiles.open_file(path, "rb") as fh:
        out = {}
        for k, offset in index:
            fh.seek(offset)
            out[k] = np.lib.format.read_array(fh, allow_pickle=False)
    return out


#: share of the wall time checkpoints may take (recording's whole budget is 15 %; tests set it to
#: inf: a checkpoint at every flush). At 1,000 Golems x 4,096 entries a checkpoint writes 1.7 GB
#: (1.7-3.4 s) and the page cache's writeback slows the run beyond that: 1 % keeps them rare.
BUDGET = 0.01
#: bytes per second a save is expected to cost before one has been measured (measured: ~0.5 GB/s
#: on the simulation thread for the 421 MB of a 1,000 x 1,024 world)
SAVE_RATE = 0.5e9


#: the simulated share of a run a resume may repeat (with checkpoints within SIM_BUDGET of the wall time)
SIM_SHARE = 0.05
SIM_BUDGET = 0.10


def maybe_save(world, ckdir: Path, budget: float | None = None) -> Path | None:
    """Checkpoint at this flush when either rule says so; both only read the state, so skipping
    one never changes a run's tables.

    Wall time: unless checkpoints would take more than `budget` (BUDGET, 1 %) of the wall time
    (big worlds: a 4M-entry Grimoire is ~1.7 GB); until a save has been timed its cost is estimated
    from the state's size (`SAVE_RATE`), so a small world saves within a second and a big one only
    once it has run a hundred times that estimate.
    Simulated time: when the next flush would otherwise leave more than SIM_SHARE of the run's
    duration unsaved, provided all saves so far plus this one stay within SIM_BUDGET of the wall
    time since the first flush. That bounds what a resume repeats by max(SIM_SHARE x duration,
    one flush interval) wherever checkpoints are affordable."""
    budget = BUDGET if budget is None else budget
    now = time.perf_counter()
    st = getattr(world, "_ck", None)
    if st is None:
        st = world._ck = {"t0": getattr(world, "wall_t0", now), "last": now, "cost": _state_bytes(world) / SAVE_RATE, "spent": 0.0,
                          "sim": 0.0}
    due = budget > 0 and (now - st["last"]) * budget >= st["cost"]
    if not due:
        env, sc, cfg = getattr(world, "env", None), getattr(world, "scenario", None), getattr(world, "cfg", None)
        if env is not None and sc is not None and cfg is not None:
            unsaved_next = env.now - st["sim"] + cfg.recording.flush_every_s
            affordable = st["spent"] + st["cost"] <= SIM_BUDGET * (now - st["t0"])
            due = unsaved_next > SIM_SHARE * sc.duration_s and affordable
    if not due:
        return None
    p = save(world, ckdir)
    end = time.perf_counter()
    st.update(last=end, cost=end - now, spent=st["spent"] + end - now,
              sim=world.env.now if getattr(world, "env", None) is not None else 0.0)
    return p


def _state_bytes(world) -> int:
    """What a checkpoint writes, near enough: the used slots of the Grimoire (most of it)."""
    gr = getattr(world, "gr", None)
    return 0 if gr is None else int(np.sum(gr.count)) * int(gr.bytes_per_entry())


# ----------------------------------------------------------------------------------- loading
class Checkpoint:
    """A loaded checkpoint: `restore(world)` puts the state back, `reschedule(world)` the queue."""

    def __init__(self, meta: dict, arrays: dict[str, np.ndarray], path: Path):
        self.meta, self.arrays, self.path = meta, arrays, path

    @property
    def now_s(self) -> float:
        return float(self.meta["now_s"])

    @property
    def part(self) -> int:
        return int(self.meta["part"])

    def tape(self) -> Tape:
        """The run's tape as saved with the state: a resume never regenerates or re-reads it."""
        t = self.meta["tape"]
        events = [MarketEvent(**dict(e, early_detectors=tuple(e["early_detectors"]))) for e in t["events"]]
        return Tape(**{k: self.arrays[f"tape/{k}"] for k in _TAPE_ARRAYS}, bar_ms=int(t["bar_ms"]),
                    normal_interval_ms=int(t["normal_interval_ms"]),
                    assets=tuple(t["assets"]), protocols=tuple(t["protocols"]),
                    regime_names=tuple(t["regime_names"]), events=events)

    def restore(self, world) -> None:
        """Overwrite a freshly built world (same scenario, config, tape, seed) with this state."""
        from sim.world import Stats
        a, m = self.arrays, self.meta
        world.env = simpy.Environment(initial_time=self.now_s)
        world.roles = {}
        pop, gr = world.pop, world.gr
        for k, v in a.items():
            if k.startswith("pop/"):
                setattr(pop, k[4:], v.copy())
        gr.count[:] = a["gr.count"]
        used = _used_slots(gr)
        n_slots = gr.n_golems * gr.capacity
        pristine = gm.Grimoire(1, 1, gr.dim)       # a fresh slot's values, as __post_init__ sets them
        for k, col in gr.cols.items():
            col[:] = pristine.cols[k][0]
            col[used] = a[f"gr/{k}"]
        for k, v in vars(gr).items():
            if isinstance(v, np.ndarray) and k != "count" and k not in gm.Grimoire.SCAN_TERMS:
                if v.shape[:1] == (n_slots,):
                    v[:] = 0
                    v[used] = a[f"gr.{k}"]
                else:
                    v[...] = a[f"gr.{k}"]
        _restore_plain(gr, m["grimoire"], a, "gr:")
        gr.refresh_scan()           # from the restored columns and epoch: the terms the run had
        mind_arrays = {k[5:]: v.copy() for k, v in a.items() if k.startswith("mind/")}
        if hasattr(world.mind, "restore_state"):
            world.mind.restore_state(mind_arrays)
        else:
            for k, v in mind_arrays.items():
                setattr(world.mind, k, v)
        _restore_plain(world.mind, m["mind"])
        world.event_seq = int(m["event_seq"])
        world.market_step = int(m["market_step"])
        world.stats = Stats(**m["stats"])

    def reschedule(self, world) -> None:
        """Recreate the pending events in recorded order at their exact times (World.run calls it)."""
        from sim.world import Delivery
        entries = []
        for k, e in enumerate(self.meta["entries"]):
            entries.append(dict(e, emb=self.arrays[f"entry/{k}"]))
        for item in self.meta["pending"]:
            ev = world.at(float(item["time"]), int(item["priority"]))
            role = item["role"]
            if role == "delivery":
                ev.callbacks.append(Delivery(world, [
                    (int(p["sender"]), entries[p["entry"]], p["alert_type"], np.array(p["receivers"], dtype=np.int32),
                     np.array(p["latency_ms"], dtype=np.int64)) for p in item["parcels"]]))
            elif role == "market":
                world.start("market", world.market(first=ev))
            elif role == "flusher":
                world.start("flusher", world.flusher(first=ev))
            elif isinstance(role, list) and role[0] == "cohort":
                i = int(role[1])
                world.start(("cohort", i), world.heartbeat(world.cohorts[i], first=ev))
            else:
                raise CheckpointError(f"{self.path}: unknown pending role {role!r}")


class Corrupt(Exception):
    """A state that fails its checks (with why)."""


class OtherFormat(Corrupt):
    """An intact state of another checkpoint format (written by another engine version)."""


def _format_error(f: Path, fmt) -> str:
    return (f"{f}: format: checkpoint format {show(fmt)}, this engine reads format {FORMAT}; resume it with the "
            "golem-sim version that wrote it, or run it again")


_TYPES = {"now_s": (int, float), "part": int, "event_seq": int, "market_step": int, "stats": dict, "grimoire": dict,
          "pending": list, "entries": list, "array_offsets": list, "mind": dict, "tape": dict, "arrays_bytes": int,
          "arrays_sha256": str, "parts": dict}
_TAPE_TYPES = {"bar_ms": int, "normal_interval_ms": int, "assets": list, "protocols": list, "regime_names": list,
               "events": list}


def _is(v, tp) -> bool:
    return isinstance(v, tp) and not isinstance(v, bool)


def _check_fields(meta: dict) -> None:
    """The fields a resume reads, down to the values it converts: a state resealed after an edit
    (its checksum recomputed) is refused here as corrupt, not found broken half way into a resume."""
    from sim.world import Stats
    for k, tp in _TYPES.items():
        if not _is(meta.get(k), tp):
            raise Corrupt(f"{k}: missing or of the wrong type")
    stats = meta["stats"]
    if set(stats) != {f.name for f in fields(Stats)} or not all(
            _is(v, (int, float)) or isinstance(v, dict) for v in stats.values()):
        raise Corrupt("stats: not the counters a run keeps")
    tape = meta["tape"]
    for k, tp in _TAPE_TYPES.items():
        if not _is(tape.get(k), tp):
            raise Corrupt(f"tape.{k}: missing or of the wrong type")
    if not all(isinstance(x, str) for k in ("assets", "protocols", "regime_names") for x in tape[k]) or \
            not all(isinstance(e, dict) for e in tape["events"]):
        raise Corrupt("tape: names or events of the wrong type")
    for item in meta["pending"]:
        role = item.get("role") if isinstance(item, dict) else None
        if not (role in ("market", "flusher", "delivery") or (isinstance(role, list) and len(role) == 2 and
                                                              role[0] == "cohort" and _is(role[1], int))) \
                or not _is(item.get("time"), (int, float)) or not math.isfinite(item["time"]) \
                or not _is(item.get("priority"), int) or (role == "delivery" and not _is(item.get("parcels"), list)):
            raise Corrupt(f"pending: {clip(escape(str(item)))}: not a pending event a run saves")
    if not all(isinstance(e, dict) for e in meta["entries"]):
        raise Corrupt("entries: not a list of entries")
    if not all(isinstance(x, list) and len(x) == 2 and isinstance(x[0], str) and _is(x[1], int) and x[1] >= 0
               for x in meta["array_offsets"]):
        raise Corrupt("array_offsets: not a list of [name, offset]")
    for part in ("grimoire", "mind"):
        for k, v in meta[part].items():
            if not (isinstance(v, dict) and ("scalar" in v or _is(v.get("arrays"), str) or
                                             {"keys", "values", "seq"} <= set(v))):
                raise Corrupt(f"{part}.{clip(escape(str(k)))}: not a saved value")


def _check_state(f: Path, ckdir: Path, flush_every_s: float | None = None,
                 files: dict | None = None) -> tuple[dict, dict[str, np.ndarray]]:
    """A state's meta and arrays, checked: its own sha256, its format, the arrays file of its own
    number (its size and sha256), the fields a resume uses and their types, and (given the run's
    flush interval) that its time is its part's flush time: states are taken at flushes only; given
    the manifest's `files`, that it lists each of them before its number, with the same sha256.
    The checksum comes first: a damaged field, the format among them, makes the state corrupt
    (the fallback takes the state before); an intact state of another format is `OtherFormat`."""
    try:
        meta = json.loads(datafiles.read_bytes(f).decode("utf-8"))
    except InputError:
        raise Corrupt("a link or special file, not read; expected the file the run wrote") from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise Corrupt(f"not valid JSON ({clip(escape(str(exc)), 60)})") from None
    if not isinstance(meta, dict):
        raise Corrupt(f"a JSON {type(meta).__name__}, expected an object")
    want = meta.pop("sha256", None)
    if not isinstance(want, str) or hashlib.sha256(_canonical(meta)).hexdigest() != want:
        other = f" (and checkpoint format {show(meta.get('format'))}, this engine reads format {FORMAT})" \
            if meta.get("format") != FORMAT else ""
        raise Corrupt(f"checksum mismatch (the file changed after it was written){other}")
    if meta.get("format") != FORMAT:
        raise OtherFormat(_format_error(f, meta.get("format")))
    number = int(_STATE.match(f.name).group(1))
    _check_fields(meta)
    if meta["part"] != number or not (math.isfinite(meta["now_s"]) and meta["now_s"] >= 0):
        raise Corrupt(f"part {meta['part']} / time {meta['now_s']} do not match the file's number {number}")
    if flush_every_s is not None and meta["now_s"] != number * flush_every_s:
        raise Corrupt(f"time {meta['now_s']:g} s is not the time of flush {number} ({number * flush_every_s:g} s)")
    _check_listed(meta["parts"], number)
    for rel, h in (files or {}).items():
        m = PART_NAME.fullmatch(str(rel).partition("/")[2])
        if m and int(m.group(1)) < number and meta["parts"].get(rel) != h:
            raise Corrupt(f"parts: {clip(escape(str(rel)))}: not as manifest.json lists it")
    path = ckdir / f"state-{number:05d}.arrays"     # never a path from the file: its own arrays, here
    try:
        with datafiles.open_file(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size != meta["arrays_bytes"]:
                raise Corrupt(f"{path.name} has {size:,} bytes, the state says {meta['arrays_bytes']:,}")
    except FileNotFoundError:
        raise Corrupt(f"{path.name} is missing") from None
    except InputError:
        raise Corrupt(f"{path.name}: a link or special file, not read") from None
    if datafiles.sha256_file(path) != meta["arrays_sha256"]:
        raise Corrupt(f"{path.name}: checksum mismatch")
    try:
        arrays = _read_arrays(path, meta["array_offsets"])
        Checkpoint(meta, arrays, f).tape()
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise Corrupt(f"{path.name}: unreadable ({clip(escape(str(exc)), 60)})") from None
    return meta, arrays


def _check_listed(parts: dict, number: int) -> None:
    for rel, h in parts.items():
        t, _, name = str(rel).partition("/")
        m = PART_NAME.fullmatch(name)
        if t not in TABLES or not m or int(m.group(1)) >= number or not isinstance(h, str):
            raise Corrupt(f"parts: {clip(escape(str(rel)))}: not a part before {number} of a table")


def covered_parts(ckdir: Path) -> tuple[dict[str, str], int] | None:
    """(the parts and their sha256, the part index) of the newest state whose own checksum holds,
    or None: what a killed run's readers check its parts against (the arrays are not read)."""
    ckdir = Path(ckdir)
    if not datafiles.check_dir(ckdir, "the run's checkpoint folder"):
        return None
    for f in sorted((f for f in ckdir.iterdir() if _STATE.match(f.name)),
                    key=lambda f: int(_STATE.match(f.name).group(1)), reverse=True):
        try:
            meta = json.loads(datafiles.read_bytes(f).decode("utf-8"))
            want = meta.pop("sha256", None) if isinstance(meta, dict) else None
            if want != hashlib.sha256(_canonical(meta)).hexdigest() or meta.get("format") != FORMAT:
                continue
            number = int(_STATE.match(f.name).group(1))
            if not _is(meta.get("parts"), dict):
                continue
            _check_listed(meta["parts"], number)
        except (OSError, InputError, UnicodeDecodeError, ValueError, RecursionError, TypeError, Corrupt):
            continue
        return meta["parts"], number
    return None


def load(ckdir: Path, rejected: list[str] | None = None, flush_every_s: float | None = None,
         files: dict | None = None) -> Checkpoint | None:
    """The newest state that passes its checks, or None when there is no state at all. States that
    fail are described in `rejected` (newest first); when every state fails, an InputError says
    the checkpoint is corrupt. A damaged newest state, whatever its damaged field (its format
    too), falls back to the one before; when no state passes and one is an intact state of another
    format, the checkpoint is refused as another engine version's (resuming it differently would
    silently break byte identity). `files`: the manifest's part list, which a state must agree with."""
    ckdir = Path(ckdir)
    if not ckdir.is_dir():
        return None
    rejected = [] if rejected is None else rejected
    metas = sorted((f for f in ckdir.iterdir() if _STATE.match(f.name)), key=lambda f: int(_STATE.match(f.name).group(1)),
                   reverse=True)
    other = None
    for f in metas:
        try:
            meta, arrays = _check_state(f, ckdir, flush_every_s, files)
        except OtherFormat as exc:
            other = other or str(exc)
            rejected.append(f"{f.name}: of another format: {exc}")
            continue
        except Corrupt as exc:
            rejected.append(f"{f.name}: corrupt: {exc}")
            continue
        return Checkpoint(meta, arrays, f)
    if other is not None:
        raise InputError(other)
    if rejected:
        raise InputError(f"{ckdir}: every checkpoint is corrupt ({'; '.join(rejected)}); no earlier good one to "
                         "resume from; expected an intact checkpoint (run the scenario again)")
    return None


__all__ = ["save", "load", "maybe_save", "covered_parts", "Checkpoint", "CheckpointError", "PART_NAME"]
