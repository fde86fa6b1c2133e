"""Replay (SPEC §13): verified re-execution, counterfactuals on the same tape, and run diffs.

A run directory holds everything needed to run it again: the validated scenario and the fully
resolved config in `manifest.json`, the seed, and the market it saw in its `market` and
`tape_events` tables. Replays read exactly those, never the scenario file, the environment or a
regenerated market, so a replay means the same thing on any machine and any later day.

* `verify(run)` re-executes into a temporary directory and compares every table's bytes; the
  first difference is named by table, row and column.
* `counterfactual(run, sets, out)` re-executes with changed parameters on the recorded tape into a
  new run directory whose manifest links to its parent (path and hashes) and lists the changes.
* `clade_summary(run)` / `diff_runs(a, b)` compare two runs per Clade.
"""
from __future__ import annotations

import copy
import math
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow.parquet as pq
from pydantic import ValidationError

from golem.config import build_config, config_model, default_table
from sim import config_layers, rundir
from sim.analysis import chose, run_pnl
from sim.errors import clip, escape, key
from sim.plugins import resolve as resolve_plugins
from sim.plugins import source_changes
from sim.recorder import SCHEMAS, TABLES, content_hashes, table_files
from sim.scenario import (InputError, Scenario, _matches, error_path, format_validation_error, set_dotted,
                          set_text)


# --------------------------------------------------------------------------- manifest -> run inputs
def read_manifest(run_dir: str | Path) -> dict:
    """The run's manifest, its shape checked (sim.rundir.read_manifest)."""
    return rundir.read_manifest(run_dir)


def scenario_from_manifest(manifest: dict, run_dir: str | Path, sets: dict[str, Any] | None = None) -> Scenario:
    """The scenario as recorded (with --set scenario keys applied on top)."""
    raw = copy.deepcopy(manifest["scenario"])
    # the manifest's JSON sorts keys; the generator numbers regimes in scenario order, which the
    # tape's regime_names kept
    names = (manifest.get("tape") or {}).get("regime_names")
    regimes = raw.get("market", {}).get("regimes")
    if names and isinstance(regimes, dict) and set(names) == set(regimes):
        raw["market"]["regimes"] = {n: regimes[n] for n in names}
    _reset_strategy_params(raw, sets or {})
    for k, v in (sets or {}).items():
        set_dotted(raw, k, v, source=set_text(k, v))
    try:
        return Scenario.model_validate(raw)
    except ValidationError as err:
        src = f"{Path(run_dir) / 'manifest.json'} scenario"
        raise InputError(format_validation_error(err, src, model=Scenario, sets=sets)) from None


def _reset_strategy_params(raw: dict, sets: dict[str, Any]) -> None:
    """A --set that changes group i's strategy (golems.i.strategy) starts the new strategy from its
    own defaults: the recorded strategy_params belong to the old one (a built-in would refuse a
    plug-in's keys), so they are dropped unless the same --set list gives golems.i.strategy_params."""
    golems = raw.get("golems")
    for k, v in sets.items():
        parts = k.split(".")
        if len(parts) != 3 or parts[0] != "golems" or parts[2] != "strategy" or not parts[1].isdigit():
            continue
        i = int(parts[1])
        if isinstance(golems, list) and i < len(golems) and isinstance(golems[i], dict) \
                and golems[i].get("strategy") != v and f"golems.{i}.strategy_params" not in sets:
            golems[i].pop("strategy_params", None)


def config_from_manifest(manifest: dict, run_dir: str | Path, sets: dict[str, Any] | None = None):
    """The resolved config as recorded, --set config keys on top. The environment is ignored on
    purpose: the recorded config already holds the run's environment, and a replay must not pick
    up the current one. Keys added to the defaults since the run take their default values."""
    tree = copy.deepcopy(default_table())
    where = f"{Path(run_dir) / 'manifest.json'}"
    for flat, v in manifest["config"].items():
        section, _, name = str(flat).partition(".")
        if section not in tree or name not in tree[section]:
            raise InputError(f"{where}: config.{key(flat)}: unknown config key in this version; expected the keys "
                             "of configs/default.yaml")
        tree[section][name] = v
    try:
        build_config(tree)
    except ValidationError as err:
        raise InputError(format_validation_error(err, f"{where} config", model=config_model())) from None
    items = [(k, v, set_text(k, v)) for k, v in (sets or {}).items()]
    for k, v, label in items:
        config_layers._assign(tree, k, v, label)
    try:
        return build_config(tree)
    except ValidationError as err:
        e = err.errors()[0]
        path = ".".join(str(p) for p in error_path(e))
        label = next((lbl for d, _, lbl in reversed(items) if _matches(d, path)), "--set")
        raise InputError(format_validation_error(err, label, model=config_model())) from None


def read_run(run_dir: str | Path, purpose: str, *, verify_hashes: bool = True,
             need_complete: bool = False) -> dict:
    """Manifest read and tables checked before `purpose` (report, diff ...) reads anything."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise InputError(f"{run_dir}: not found; expected a run directory (made by golem-sim run)")
    m = rundir.read_manifest(run_dir)
    if need_complete and m["status"] != "complete":
        raise InputError(f"{run_dir / 'manifest.json'}: status: {m['status']!r}; expected a complete run for "
                         f"{purpose}")
    rundir.check_tables(run_dir, m, verify_hashes=verify_hashes)    # whatever the run's status
    scenario_from_manifest(m, run_dir)        # the recorded scenario and config, as the model reads them
    config_from_manifest(m, run_dir)
    return m


def run_tape_info(tape, run_dir: Path) -> dict:
    """manifest["tape"] of a run whose market is another run's recorded tape."""
    from sim.tape_market import tape_facts
    return {"source": "run", "run": str(Path(run_dir).resolve()), **tape_facts(tape)}


def _check_fits(scenario: Scenario, tape, parent_duration_s: float, where: str) -> None:
    """A counterfactual may not outlast its parent: the recorded tape ends where the parent did."""
    if scenario.duration_s > parent_duration_s:
        raise InputError(f"--set duration: {scenario.duration_s:g} s is longer than the recorded tape of {where} "
                         f"({parent_duration_s:g} s); expected at most the parent's duration")
    for i, g in enumerate(scenario.golems):
        if g.asset is not None and g.asset not in tape.assets and not (g.asset == "tape" and len(tape.assets) == 1):
            raise InputError(f"--set golems.{i}.asset: {g.asset!r} is not on the recorded tape; expected one of "
                             f"{list(tape.assets)}")


# ------------------------------------------------------------------------------------- verify
@dataclass
class VerifyReport:
    ok: bool
    lines: list[str] = field(default_factory=list)
    first: dict | None = None   # {table, row, column, part, part_row, recorded, replayed}


def _same(x, y) -> bool:
    if isinstance(x, float) and isinstance(y, float):
        return x == y or (math.isnan(x) and math.isnan(y))
    if isinstance(x, list) and isinstance(y, list):
        return len(x) == len(y) and all(_same(a, b) for a, b in zip(x, y))
    return type(x) is type(y) and x == y


def first_difference(recorded: Path, replayed: Path, table: str) -> dict:
    """First differing (row, column) of `table` between two run directories.

    Parts are compared byte-wise first so only the first differing pair is decoded; `row` is the
    0-based row in the whole table, `part_row` the row inside that part file.
    """
    fa, fb = table_files(recorded, table), table_files(replayed, table)
    offset = 0
    for i in range(max(len(fa), len(fb))):
        a = fa[i] if i < len(fa) else None
        b = fb[i] if i < len(fb) else None
        if a is not None and b is not None and a.name == b.name and rundir.read_bytes(a) == rundir.read_bytes(b):
            offset += _read(a).num_rows
            continue
        ta = _read(a) if a is not None else SCHEMAS[table].empty_table()
        tb = _read(b) if b is not None else SCHEMAS[table].empty_table()
        part = (a or b).name
        if a is not None and b is not None and a.name != b.name:
            return dict(table=table, row=offset, part=part, part_row=0, column=None,
                        recorded=a.name, replayed=b.name, what="part files differ")
        best = None
        for col in ta.schema.names:
            if col not in tb.schema.names:
                return dict(table=table, row=offset, part=part, part_row=0, column=col, recorded="(column)",
                            replayed="(missing)", what="schema differs")
            xa, xb = ta.column(col).to_pylist(), tb.column(col).to_pylist()
            for r in range(min(len(xa), len(xb))):
                if best is not None and r >= best[0]:
                    break
                if not _same(xa[r], xb[r]):
                    best = (r, col, xa[r], xb[r])
                    break
        if best is not None:
            r, col, va, vb = best
            return dict(table=table, row=offset + r, part=part, part_row=r, column=col, recorded=va, replayed=vb,
                        what="value differs")
        if ta.num_rows != tb.num_rows:
            r = min(ta.num_rows, tb.num_rows)
            return dict(table=table, row=offset + r, part=part, part_row=r, column=None,
                        recorded=f"{ta.num_rows} rows", replayed=f"{tb.num_rows} rows", what="row count differs")
        return dict(table=table, row=offset, part=part, part_row=0, column=None, recorded="(bytes)",
                    replayed="(bytes)", what="same values, different bytes")
    return dict(table=table, row=offset, part=None, part_row=0, column=None, recorded=None, replayed=None,
                what="no difference found")


def _read(f: Path):
    """A part file's table, opened as a run's file (sim.rundir: no link followed, no FIFO read)."""
    with rundir.open_file(f, "rb") as fh:
        return pq.read_table(fh)


def describe(d: dict) -> str:
    col = f", column {d['column']!r}" if d.get("column") else ""
    where = f" ({d['part']} row {d['part_row']})" if d.get("part") else ""
    vals = f": recorded {d['recorded']!r}, replayed {d['replayed']!r}" if d.get("recorded") is not None else ""
    return f"{d['table']}: row {d['row']}{where}{col}: {d['what']}{vals}"


def _readable_or_damaged(run_dir: Path, table: str) -> None:
    """A changed part that still reads is a difference to report; one that does not is damage."""
    for f in table_files(run_dir, table):
        try:
            _read(f)
        except Exception as exc:   # noqa: BLE001 - pyarrow raises several kinds for damaged pages
            raise InputError(f"{f}: damaged: its pages cannot be read ({clip(escape(str(exc)), 80)}); expected the "
                             "part the run wrote") from None


def verify(run_dir: str | Path, keep: bool = False) -> VerifyReport:
    """Re-execute `run_dir` from its manifest and recorded tape, then compare every table."""
    from sim.run import execute_prepared
    from sim.tape_market import tape_from_run
    run_dir = Path(run_dir)
    m = read_manifest(run_dir)
    if m.get("status") != "complete":
        raise InputError(f"{run_dir / 'manifest.json'}: status: {m.get('status')!r}; expected a complete run "
                         "(resume it first: golem-sim resume)")
    # unreadable or foreign part files are a damaged directory (exit 2); readable ones whose bytes
    # differ from the manifest are what a verification reports (below)
    rundir.check_tables(run_dir, m, verify_hashes=False)
    lines: list[str] = []
    on_disk = content_hashes(run_dir)
    for t in TABLES:
        if t in m.get("hashes", {}) and m["hashes"][t] != on_disk[t]:
            _readable_or_damaged(run_dir, t)
            lines.append(f"{t}: the files differ from the hash in manifest.json (changed after the run)")
    scenario = scenario_from_manifest(m, run_dir)
    cfg = config_from_manifest(m, run_dir)
    tape = tape_from_run(run_dir)
    plugins = resolve_plugins(scenario, None, m.get("plugins"), source=f"{run_dir / 'manifest.json'} scenario",
                              from_run=True)
    changed_code = source_changes(m.get("plugins"), plugins)
    lines.extend(changed_code)
    tmp = Path(tempfile.mkdtemp(prefix="golem-verify-"))
    try:
        execute_prepared(scenario, cfg, int(m["seed"]), tmp / "replay", scenario_path=m.get("scenario_path", ""),
                         sets=m.get("sets"), tape=tape, checkpoint=False, tape_info=m.get("tape"), plugins=plugins)
        replayed = content_hashes(tmp / "replay")
        first = None
        for t in TABLES:
            if replayed[t] != on_disk[t]:
                d = first_difference(run_dir, tmp / "replay", t)
                first = first or d
                lines.append(describe(d))
        ok = not lines
        if changed_code and len(lines) == len(changed_code):
            lines.append(f"the {len(TABLES)} tables are identical to the recorded ones, but the plug-in code that made "
                         "them is not the code the run recorded")
        if ok:
            lines.append(f"ok: {len(TABLES)} tables identical ({', '.join(f'{t} {on_disk[t][:8]}' for t in TABLES)})")
        if keep:
            lines.append(f"replay kept in {tmp / 'replay'}")
        return VerifyReport(ok, lines, first)
    finally:
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)


# ------------------------------------------------------------------------------- counterfactual
def counterfactual(run_dir: str | Path, sets: list[str], out_dir: str | Path, progress=None):
    """Re-run `run_dir` on its recorded tape with `sets` (key=value) changed, into `out_dir`.

    Config keys change the config; scenario keys the scenario (golems, clades, duration up to the
    recorded one, seed). `market.*` cannot change: the market IS the recorded tape.
    """
    from sim.run import execute_prepared
    from sim.tape_market import tape_from_run
    run_dir = Path(run_dir)
    m = read_run(run_dir, "a counterfactual", need_complete=True)
    cfg_sets, scen_sets = config_layers.split_sets(sets)
    for k in scen_sets:
        if k.split(".")[0] == "market":
            raise InputError(f"--set {k}: a counterfactual replays the recorded market; expected config or "
                             "golems/clades/duration/seed keys (run the scenario again to change the market)")
    scenario = scenario_from_manifest(m, run_dir, scen_sets)
    cfg = config_from_manifest(m, run_dir, cfg_sets)
    seed = scenario.seed if "seed" in scen_sets else int(m["seed"])
    tape = tape_from_run(run_dir)
    _check_fits(scenario, tape, scenario_from_manifest(m, run_dir).duration_s, str(run_dir))
    parent = {"path": str(run_dir.resolve()), "hashes": m.get("hashes"), "seed": m["seed"],
              "scenario": m["scenario"].get("name")}
    sources = dict(m.get("config_sources") or {})
    sources.update({k: "--set (counterfactual)" for k in cfg_sets})
    return execute_prepared(scenario, cfg, seed, out_dir, scenario_path=m.get("scenario_path", ""), sources=sources,
                            sets=list(m.get("sets") or []) + list(sets), progress=progress, parent=parent,
                            changes=list(sets), tape=tape, tape_info=run_tape_info(tape, run_dir),
                            plugins=resolve_plugins(scenario, None, m.get("plugins"), from_run=True, source="--set" if scen_sets else
                                                    f"{run_dir / 'manifest.json'} scenario"))


# ----------------------------------------------------------------------------------------- diff
METRICS = ("golems", "final_pnl", "final_pnl_pct", "deaths", "flashbulbs", "mean_p", "mean_a", "mean_d",
           "retrieval_valence_bias")


def _clade_names(scen: dict) -> list[str]:
    """Clade index -> name, as the world numbers them (declared Clades, then Golem groups' order)."""
    names = [c["name"] for c in scen.get("clades", [])]
    for g in scen["golems"]:
        if g["clade"] not in names:
            names.append(g["clade"])
    return names


def clade_summary(run_dir: str | Path) -> pl.DataFrame:
    """Per Clade: final P&L (`sim.analysis.run_pnl`: last heartbeat value, after that tick's fees,
    minus capital; a Golem that never ticked keeps its capital), deaths and flashbulbs (events),
    mean P/A/D over all heartbeats, and the retrieval valence bias = mean of served_mean_valence -
    pool_mean_valence over the retrievals that chose (SPEC §14, `sim.analysis.chose`)."""
    run_dir = Path(run_dir)
    m = read_manifest(run_dir)
    scen = scenario_from_manifest(m, run_dir).model_dump(mode="json")   # a damaged scenario is named
    names = _clade_names(scen)
    money = run_pnl(run_dir, by=["clade_id"]).collect().select(
        pl.col("clade_id").cast(pl.Int32), pl.col("golems").cast(pl.Int64), pl.col("pnl").alias("final_pnl"),
        (100 * pl.col("pnl_pct")).alias("final_pnl_pct"))

    def scan(t: str) -> pl.DataFrame:
        files = table_files(run_dir, t)
        return pl.read_parquet(files) if files else pl.from_arrow(SCHEMAS[t].empty_table())

    hb, ev, rt = scan("heartbeats"), scan("events"), scan("retrievals")
    pad = hb.group_by("clade_id").agg(pl.col("p").mean().alias("mean_p"), pl.col("a").mean().alias("mean_a"),
                                      pl.col("d").mean().alias("mean_d"))
    counts = ev.group_by("clade_id").agg((pl.col("kind") == "death").sum().cast(pl.Int64).alias("deaths"),
                                         (pl.col("kind") == "flashbulb").sum().cast(pl.Int64).alias("flashbulbs"))
    bias = rt.filter(chose()).with_columns(
        (pl.col("served_mean_valence") - pl.col("pool_mean_valence")).fill_nan(None).alias("_b")) \
        .group_by("clade_id").agg(pl.col("_b").mean().alias("retrieval_valence_bias"))
    out = money
    for f in (counts, pad, bias):
        out = out.join(f.with_columns(pl.col("clade_id").cast(pl.Int32)), on="clade_id", how="left")
    out = out.with_columns(pl.col("deaths").fill_null(0), pl.col("flashbulbs").fill_null(0),
                           pl.col("clade_id").replace_strict(dict(enumerate(names)), return_dtype=pl.String).alias("clade"))
    return out.sort("clade_id").select("clade", *METRICS)


def diff_runs(run_a: str | Path, run_b: str | Path) -> pl.DataFrame:
    """Side by side per Clade and metric: a, b and b - a (long form: clade, metric, a, b, delta).
    Both runs' manifests and part files are checked first (`read_run`: schemas and the
    recorded sha256 of every part), so a damaged run is named instead of compared."""
    for r in (run_a, run_b):
        read_run(r, "diff")
    sa, sb = clade_summary(run_a), clade_summary(run_b)
    clades = list(dict.fromkeys(sa["clade"].to_list() + sb["clade"].to_list()))
    rows = []
    for c in clades:
        ra = sa.filter(pl.col("clade") == c).to_dicts()
        rb = sb.filter(pl.col("clade") == c).to_dicts()
        for k in METRICS:
            a = float(ra[0][k]) if ra and ra[0][k] is not None else None
            b = float(rb[0][k]) if rb and rb[0][k] is not None else None
            rows.append((c, k, a, b, None if a is None or b is None else b - a))
    return pl.DataFrame(rows, schema={"clade": pl.String, "metric": pl.String, "a": pl.Float64, "b": pl.Float64,
                                      "delta": pl.Float64}, orient="row")
