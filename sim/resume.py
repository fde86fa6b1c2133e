"""Resume (`golem-sim resume`): an interrupted, killed or (for a machine's reason) failed run
continues from its latest good checkpoint (sim.checkpoint) to its end, in its own run directory.

A driver above the checkpoint, the run and the replay modules: it reads the run's inputs from its
manifest (sim.replay), rebuilds the world (sim.run), restores the saved state into it and drives
it on (sim.run.drive).
"""
from __future__ import annotations

import os
from pathlib import Path

from sim import resources, rundir
from sim.checkpoint import PART_NAME, Checkpoint, load, maybe_save
from sim.errors import InputError, clip, escape
from sim.plugins import resolve as resolve_plugins, source_changes
from sim.recorder import TABLES, Recorder, table_files, warm_up as recorder_warm_up
from sim.replay import config_from_manifest, read_manifest, scenario_from_manifest
from sim.run import Hold, build_world, configure_logging, drive


def _check_parts(run_dir: Path, ck: Checkpoint, manifest: dict) -> list[tuple[Path, str]]:
    """The parts before the state, as the state (and the manifest, where it lists them) recorded
    them. Returns the part files neither lists, which the resumed run must not take in: before the
    state, not written by the run; at or after it, where the manifest lists the run's parts, not
    the run's either (a killed run's manifest lists none: those after the state are its own)."""
    listed, recorded = ck.meta["parts"], manifest.get("files")
    for rel, h in listed.items():
        f = run_dir / rel
        if not f.is_file():
            raise InputError(f"{f}: part file missing (the checkpoint {ck.path.name} covers it); the run directory "
                             "is damaged: run the scenario again")
        if rundir.sha256_file(f) != h:
            raise InputError(f"{f}: content differs from the sha256 in checkpoint {ck.path.name} (damaged or "
                             "changed after it was written); run the scenario again")
        if recorded is not None and recorded.get(rel, h) != h:
            raise InputError(f"{f}: the sha256 in manifest.json differs from the one in checkpoint {ck.path.name}; "
                             "the run directory was changed after the run: run the scenario again")
    stray = []
    for t in TABLES:
        for f in table_files(run_dir, t):
            m = PART_NAME.fullmatch(f.name)
            rel = f"{t}/{f.name}"
            if m is None or rel in listed or (recorded is None and int(m.group(1)) >= ck.part) or \
                    (recorded is not None and rel in recorded and int(m.group(1)) >= ck.part):
                continue
            if recorded is None:      # a killed run: nothing else says which parts the run wrote
                raise InputError(f"{f}: a part file the checkpoint {ck.path.name} does not list; expected only the "
                                 "parts the run wrote (move it away to resume)")
            stray.append((f, rel))
    return stray


def _set_aside(stray: list[tuple[Path, str]]) -> list[str]:
    """Rename stray part files out of their table (`part-N.parquet.ignored`, kept beside it), so
    no reader and no hash of the resumed run includes them; returns one note per file."""
    notes = []
    for f, rel in stray:
        kept = f.with_name(f.name + IGNORED)
        os.replace(f, kept)
        notes.append(f"{f}: a part file neither manifest.json nor the checkpoint lists; ignored (kept as "
                     f"{kept.name})")
    return notes


#: the suffix a stray part file is renamed with by `resume`
IGNORED = ".ignored"


def _drop_parts_from(run_dir: Path, part: int) -> list[str]:
    """Remove the part files the run wrote after the checkpoint (index >= part; they are rewritten
    identically) and its half-written temporaries; nothing else. Returns what it removed."""
    removed = []
    for t in TABLES:
        d = run_dir / t
        if not rundir.check_dir(d, f"the folder of the {t} table"):
            continue
        for f in d.iterdir():
            m = PART_NAME.fullmatch(f.name)
            tmp = f.name.endswith(".parquet.tmp") and PART_NAME.fullmatch(f.name[:-4])
            if (m and int(m.group(1)) >= part) or tmp:
                f.unlink()
                removed.append(f"{t}/{f.name}")
    return removed


def resume(run_dir: str | Path, progress=None):
    """Continue an interrupted, killed or (for a machine's reason: a full disk) failed run from its
    latest good checkpoint to its end.

    The scenario, config and seed come from the manifest, the tape from the checkpoint (so neither
    a changed tape file nor key order lost in JSON can change the market). The finished tables are
    byte-identical to an uninterrupted run's. `result.manifest["checkpoint_rejected"]` lists
    states skipped as corrupt, `result.manifest["ignored_parts"]` the part files neither the
    manifest nor the checkpoint lists, set aside (`_set_aside`) instead of taken in.
    """
    run_dir = Path(run_dir)
    manifest = read_manifest(run_dir)
    mpath = run_dir / "manifest.json"
    if manifest.get("status") == "complete":
        raise InputError(f"{mpath}: status: the run is complete; nothing to resume")
    failure = manifest.get("failure") or {}
    if manifest.get("status") == "failed" and not failure.get("resumable"):
        raise InputError(f"{mpath}: status: the run failed ({clip(escape(str(manifest.get('error'))), 160)}); it was "
                         "not interrupted and resuming would repeat the failure; expected an interrupted or killed run")
    ckdir = run_dir / "checkpoint"
    if ckdir.is_symlink() or (ckdir.exists() and not ckdir.resolve().is_relative_to(run_dir.resolve())):
        raise InputError(f"{ckdir}: points outside the run directory; expected the run's own checkpoint folder")
    rundir.check_entries(run_dir)     # no link or special file is followed, read or written into
    hold = Hold(rundir.lock_existing(run_dir), None)
    try:
        rejected: list[str] = []
        flush = manifest["config"].get("recording.flush_every_s")
        ck = load(ckdir, rejected, flush if isinstance(flush, (int, float)) and not isinstance(flush, bool) else None,
                  manifest.get("files"))
        if ck is None:
            raise InputError(f"{ckdir}: no complete checkpoint (the run stopped before its first one: a big world's "
                             "first comes after 100 x its save time, see BUDGET); expected a run that checkpointed "
                             "at least once — run it again")
        scenario = scenario_from_manifest(manifest, run_dir)
        cfg = config_from_manifest(manifest, run_dir)
        stray = _check_parts(run_dir, ck, manifest)
        resources.check(scenario, cfg, str(mpath), record=True)
        recorder_warm_up()
        seed = int(manifest["seed"])
        tape = ck.tape()
        plugins = resolve_plugins(scenario, None, manifest.get("plugins"), from_run=True,   # the code the run loaded
                                  source=f"{mpath} scenario")
        for changed in source_changes(manifest.get("plugins"), plugins)[:1]:   # one run runs one code
            raise InputError(f"{mpath}: {changed}; expected the code the run ran (restore that file, or run the "
                             "scenario again)")
        world = build_world(scenario, cfg, tape, seed, progress, str(mpath), plugins=plugins)
        hold.reserve = rundir.Reserve(run_dir)
        ignored = _set_aside(stray)
        _drop_parts_from(run_dir, ck.part)
        configure_logging(run_dir)
        rec = Recorder(run_dir, part_start=ck.part)
        rec.part_sha = dict(ck.meta["parts"])
        world.rec = rec
        world.checkpoint_dir, world.checkpointer = ckdir, maybe_save
        ck.restore(world)
    except BaseException:
        hold.release()
        raise
    stop = {k: manifest.get(k) for k in ("status", "stopped_at_s", "error", "signal", "failure") if manifest.get(k)}
    manifest.setdefault("stops", []).append(stop)
    manifest.update(status="running", resumed_from_s=ck.now_s, resumes=int(manifest.get("resumes", 0)) + 1,
                    checkpoint=ck.path.name, checkpoint_rejected=rejected, ignored_parts=ignored)
    for k in ("stopped_at_s", "error", "signal", "failure", "hashes", "files", "row_counts", "flush_error",
              "hash_error"):
        manifest.pop(k, None)
    rundir.write_manifest(run_dir, manifest)
    return drive(world, manifest, run_dir, True, scenario.duration_s, resume=ck, hold=hold)


__all__ = ["resume"]
