"""`golem-sim`: run | replay | resume | diff | sweep | report | import-tape | validate | schema | bench.

Bad input is reported as one line (file, key path, what was expected) with exit status 2 and no
traceback; whatever a failed run had already written stays readable. Exit status (the README's
table, `EXIT`): 0 done, 1 a run that started and failed (its manifest says `failed`: an engine
error, whose traceback is in the run's log.jsonl, or a plug-in's), 2 bad input or an output
location that cannot be used (nothing was written), 130/143 interrupted by SIGINT/SIGTERM. No
command prints a traceback: an unexpected error is one line too. Everything taken from the input
(names, paths, values) is printed through `shown`: rich markup escaped, control characters visible.
"""
from __future__ import annotations

import errno
import functools
import json
import os
import sys
import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape as markup_escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from sim.errors import InputError, one_line
from sim.errors import escape as visible
from sim.notices import shown

#: exit statuses (README, "Exit status"); a signal's is 128 + its number (SIGINT 130, SIGTERM 143)
EXIT = {"ok": 0, "run failed": 1, "bad input": 2}

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Simulate populations of Golems whose memory is shaped by emotion.")
err = Console(stderr=True)
out = Console()
QUIET_HELP = "print no progress bar, notices or summary (errors still go to stderr)"
DEFAULT_OUT_HELP = ("run directory (default runs/<scenario>-seed<N>; when that already holds a run, "
                    "-2, -3, ... is appended and the summary says so)")


def _flags_without_type() -> None:
    """typer labels on/off flags `<bool>` in --help, which reads as if they took a value (they
    reject one): show no type for flags."""
    try:
        from typer.core import TyperOption
    except ImportError:   # pragma: no cover - older typer renders flags without a type
        return
    show = getattr(TyperOption, "display_type_rich", None)
    if show is None or getattr(show, "_golem_flags", False):
        return

    def display_type_rich(self, ctx):
        return None if getattr(self, "is_flag", False) and self.metavar is None else show(self, ctx)
    display_type_rich._golem_flags = True
    TyperOption.display_type_rich = display_type_rich


_flags_without_type()


def _version(value: bool) -> None:
    if value:
        from sim import versions
        v = versions()
        out.print(f"golem-sim {v['golem-sim']} (python {v['python']}, numpy {v['numpy']}, numba {v['numba']}, "
                  f"polars {v['polars']})", highlight=False)
        raise typer.Exit(0)


@app.callback()
def main_options(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                              help="print the version and exit")) -> None:
    """Simulate populations of Golems whose memory is shaped by emotion."""


def fail(msg: str, code: int = EXIT["bad input"]) -> None:
    err.print(f"[bold red]error:[/] {markup_escape(one_line(msg))}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def fail_input(exc: InputError) -> None:
    """Bad input exits 2; a plug-in that failed during a run (sim.plugins.PluginFailed, an
    InputError for Python callers) exits 1: the run started, and its manifest says failed."""
    plugins = sys.modules.get("sim.plugins")
    failed = plugins is not None and isinstance(exc, plugins.PluginFailed)
    fail(str(exc), EXIT["run failed"] if failed else EXIT["bad input"])


def warn(msg: str, console: Console | None = None) -> None:
    (console or err).print(f"[bold yellow]warning:[/] {shown(msg)}", highlight=False, soft_wrap=True)


def note(msg: str, console: Console | None = None) -> None:
    (console or err).print(f"[dim]note:[/] {shown(msg)}", highlight=False, soft_wrap=True)


def _default_out_base(scenario: Path, seed: Optional[int]) -> Path:
    return Path("runs") / (f"{scenario.stem}-seed{seed}" if seed is not None else scenario.stem)


def _run_failed() -> type | tuple:
    """sim.run's RunFailed once a command has imported it, else nothing to catch: a command that
    never loaded the engine cannot have failed a run, and --help or import-tape need not load it."""
    run = sys.modules.get("sim.run")
    return run.RunFailed if run is not None else ()


def _undecodable(fn, kwargs: dict) -> None:
    """Arguments are str decoded with surrogateescape: bytes that are not UTF-8 (a --set value,
    a path) become lone surrogates, which no file, YAML parser or terminal takes. Refuse them
    first, naming the option."""
    import inspect
    for name, value in kwargs.items():
        for v in value if isinstance(value, (list, tuple)) else [value]:
            text = str(v) if isinstance(v, (str, Path)) else ""
            if any("\ud800" <= c <= "\udfff" for c in text):
                info = inspect.signature(fn).parameters[name].default
                decls = [d for d in getattr(info, "param_decls", None) or () if d.startswith("--")]
                opt = decls[0] if decls else name.upper()
                raise InputError(f"{opt} {visible(text)[:80]}: bytes that are not UTF-8; expected UTF-8 text")


#: errors of an output location that cannot be used (bad input, exit 2): full, read-only, no permission, quota
_OUTPUT_ERRNOS = (errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EPERM, errno.EDQUOT, errno.ENOENT, errno.ENOTDIR,
                  errno.EISDIR)


def _os_errno(exc: BaseException) -> int | None:
    """The errno of a failed read or write: an OSError's, or the one polars' Rust I/O puts in its
    message ('... No space left on device (os error 28)')."""
    if isinstance(exc, OSError):
        return exc.errno
    import re
    m = re.search(r"\(os error (\d+)\)", str(exc))
    return int(m.group(1)) if m else None


def write_parquet(df, path: Path, flag: str = "--out") -> None:
    """`df` as Parquet at `path` (sim.rundir.write_out_file: beside it, then renamed; only over a
    regular file): a full disk leaves no half file and says so in one line (exit 2)."""
    import io

    from sim.rundir import write_out_file
    buf = io.BytesIO()
    df.write_parquet(buf)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_out_file(path, buf.getvalue(), flag)
    except OSError as exc:
        fail(f"{flag} {path}: cannot write it: {exc.strerror or exc}; nothing was written")


def _guarded(fn):
    """Every command's last line of defence: bad input that escaped a command's own handling is
    still one line with exit 2, a failed run one line with exit 1, and anything else (a bug) one
    line with exit 1 instead of a traceback."""
    @functools.wraps(fn)
    def run_guarded(*args, **kwargs):
        try:
            _undecodable(fn, kwargs)
            return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort, typer.TyperException):   # typer's own exits and usage errors
            raise
        except KeyboardInterrupt:   # Ctrl-C in a command that has no run to mark interrupted
            fail("interrupted", 128 + 2)
        except InputError as exc:
            fail_input(exc)
        except _run_failed() as exc:
            fail(str(exc), 1)
        except MemoryError:
            fail("out of memory; expected a smaller world (fewer Golems or a smaller grimoire.capacity)", 1)
        except OSError as exc:
            where = f"{exc.filename}: " if exc.filename else ""
            fail(f"{where}{exc.strerror or exc}", 2 if isinstance(exc, (PermissionError, FileNotFoundError,
                                                                        NotADirectoryError, IsADirectoryError))
                 or getattr(exc, "errno", None) in (28, 30) else 1)
        except RecursionError:
            fail("input nested too deeply to process; expected a scenario of a few levels", 2)
        except Exception as exc:   # noqa: BLE001 - never a traceback
            code = _os_errno(exc)
            if code is not None:   # polars' writer reports the disk's errors as ComputeError text
                fail(f"{type(exc).__name__}: {os.strerror(code)}", 2 if code in _OUTPUT_ERRNOS else 1)
            fail(f"internal error: {type(exc).__name__}: {exc} (a bug in golem-sim: please report it with the "
                 "command that caused it)", 1)
    return run_guarded


_command = app.command


def _command_guarded(*args, **kwargs):
    register = _command(*args, **kwargs)
    return lambda fn: register(_guarded(fn))


app.command = _command_guarded   # type: ignore[method-assign]


def _default_out(scenario: Path, seed: Optional[int]) -> Path:
    """runs/<scenario>-seed<N>, or the first free of -2, -3, ... (a run directory is never reused)."""
    base = _default_out_base(scenario, seed)
    p, i = base, 1
    while p.exists() and any(p.iterdir()):
        i += 1
        p = Path(f"{base}-{i}")
    return p


def _progress_cb(progress: Progress, task, duration_s: float):
    state = {"t": time.perf_counter(), "ticks": 0}

    def cb(now_s: float, ticks: int, alive: int) -> None:
        t = time.perf_counter()
        rate = (ticks - state["ticks"]) / max(t - state["t"], 1e-9)
        state.update(t=t, ticks=ticks)
        progress.update(task, completed=now_s,
                        description=f"t={now_s / 3600:7.1f} h  {rate:9,.0f} Golem-ticks/s now  alive {alive}")
    return cb


def summary_table(manifest: dict, world, run_dir: Path | None = None) -> Table:
    """Per Clade at the run's end. Value and P&L % are `sim.analysis.run_pnl`'s, read from the
    recorded tables (value at each Golem's last heartbeat against its capital), the figures diff and
    the report give; a run that recorded nothing shows its book at the last price instead."""
    pop = world.pop
    money = None
    if run_dir is not None and any((Path(run_dir) / "heartbeats").glob("part-*.parquet")):
        from sim.analysis import run_pnl
        money = {r["clade_id"]: r for r in run_pnl(run_dir, by=["clade_id"]).collect().iter_rows(named=True)}
    t = Table(title=f"{shown(manifest['scenario']['name'])} (seed {manifest['seed']})", show_lines=False,
              caption="final P/A/D: the Clade's mean emotion at the run's end (diff shows means over the run); "
                      "P&L: value at the last tick, after its fees, against the initial book")
    for col in ("clade", "golems", "alive", "final P", "final A", "final D", "value", "P&L %"):
        t.add_column(col, justify="right")
    for ci, name in enumerate(pop.clade_names):
        m = pop.clade == ci
        if not m.any():
            continue
        if money is not None and ci in money:
            val, v0 = money[ci]["final_value"], money[ci]["capital"]
        else:
            price = world.tape.close[-1 if world.tape.bar_ms == 0 else max(0, world.market_step)]
            val = float((pop.cash[m] + pop.units[m] * price[pop.asset[m].astype(int)]).sum())
            v0 = float(pop.value0[m].sum())
        t.add_row(shown(name), str(int(m.sum())), str(int(pop.alive[m].sum())), f"{pop.pad[m, 0].mean():+.2f}",
                  f"{pop.pad[m, 1].mean():+.2f}", f"{pop.pad[m, 2].mean():+.2f}", f"{val:,.0f}",
                  f"{100 * (val / v0 - 1):+.2f}")
    return t


def _scenario_warnings(sc, cfg) -> None:
    """One line each: scheduled items after the end; Golems beating apart from the tape's bars."""
    from sim import notices
    late = notices.late_schedule(sc)
    if late:
        warn(late)
    bar = notices.bar_mismatch(sc, cfg, notices.tape_bar_ms(sc))
    if bar:
        warn(bar)


SET_HELP = "key=value: a config key (retrieval.top_k=4) or a scenario key (duration=2d); repeatable"
CONFIG_HELP = "a config file layered over the defaults"


@app.command()
def run(scenario: Path = typer.Argument(..., help="scenario YAML"),
        seed: Optional[int] = typer.Option(None, help="overrides the scenario's seed"),
        out_dir: Optional[Path] = typer.Option(None, "--out", help=DEFAULT_OUT_HELP),
        set_: list[str] = typer.Option([], "--set", help=SET_HELP),
        config: Optional[Path] = typer.Option(None, "--config", help=CONFIG_HELP),
        no_record: bool = typer.Option(False, "--no-record", help="run without writing tables (for timing)"),
        quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP)) -> None:
    """Run a scenario and write its run directory.

    The first run on a machine compiles the numba kernels (about a minute, announced by a notice);
    later runs load them from numba's cache."""
    from sim.notices import compile_notice
    from sim.run import execute, prepare
    from sim.world import RunInterrupted
    target = out_dir
    try:
        sc, cfg, _, run_seed = prepare(scenario, seed=seed, sets=set_, config_file=str(config) if config else None,
                                       record=not no_record)
        target = out_dir or _default_out(scenario, run_seed)
        if not quiet:
            _scenario_warnings(sc, cfg)
        with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                      TimeElapsedColumn(), console=err, disable=quiet, transient=True) as progress, \
                compile_notice(lambda m: None if quiet else note(m, progress.console)):
            task = progress.add_task("starting", total=sc.duration_s)
            res = execute(scenario, target, seed=seed, sets=set_, config_file=str(config) if config else None,
                          record=not no_record, progress=_progress_cb(progress, task, sc.duration_s))
    except InputError as exc:
        fail_input(exc)
    except RunInterrupted as exc:
        _interrupted(target, exc.signum)
    except KeyboardInterrupt:
        fail("interrupted; the tables written so far are readable and the manifest says where the run stopped", 130)
    m = res.manifest
    if not quiet:
        out.print(summary_table(m, res.world, res.run_dir))
        rate = m["golem_ticks"] / max(res.wall_s, 1e-9)
        out.print(f"{m['golem_ticks']:,} Golem-ticks in {res.wall_s:.2f} s ({rate:,.0f} Golem-ticks/s on average, "
                  f"start-up included); events {res.world.stats.events:,}; deaths {int((~res.world.pop.alive).sum())}")
        if not no_record:
            taken = f" ({_default_out_base(scenario, run_seed)} already holds a run)" \
                if out_dir is None and res.run_dir != _default_out_base(scenario, run_seed) else ""
            out.print(f"run directory: {shown(res.run_dir)}{shown(taken)}", highlight=False)


@app.command()
def validate(scenario: Path = typer.Argument(..., help="scenario YAML"),
             set_: list[str] = typer.Option([], "--set", help=SET_HELP),
             config: Optional[Path] = typer.Option(None, "--config", help=CONFIG_HELP),
             no_record: bool = typer.Option(False, "--no-record", help="check the memory as `run --no-record` needs it"),
             quiet: bool = typer.Option(False, "--quiet", "-q", help="print nothing but errors")) -> None:
    """Check a scenario (with --config and --set layered as `run` does) without running it."""
    from sim.run import build_tape, prepare
    try:
        sc, cfg, _, seed = prepare(scenario, sets=set_, config_file=str(config) if config else None,
                                   record=not no_record)
        build_tape(sc, seed, cfg, str(scenario))   # the market too: a tape file that cannot be read, prices that overflow
    except InputError as exc:
        fail_input(exc)
    if quiet:
        return
    _scenario_warnings(sc, cfg)
    n = sum(g.count for g in sc.golems)
    out.print(f"{shown(scenario)}: ok ({shown(sc.name)}: {n} Golems, {sc.duration_s / 86400:g} days, seed {seed})",
              highlight=False, soft_wrap=True)


@app.command()
def schema(out_file: Optional[Path] = typer.Option(None, "--out", help="write to a file instead of stdout")) -> None:
    """Print the JSON Schema of scenario files (generated from the typed model)."""
    from sim.scenario import json_schema
    text = json.dumps(json_schema(), indent=2, sort_keys=True)
    if out_file:
        from sim.rundir import write_out_file
        write_out_file(out_file, (text + "\n").encode())   # over a regular file only (not a FIFO, device, link)
    else:
        sys.stdout.write(text + "\n")


@app.command()
def report(run_dir: Path = typer.Argument(..., help="run directory"),
           compare: Optional[Path] = typer.Option(None, "--compare", help="a second run, rendered side by side"),
           out_file: Optional[Path] = typer.Option(None, "--out", help="HTML file (default RUN/report.html)"),
           threshold: float = typer.Option(0.4, help="lock-in: mood-congruence threshold"),
           min_ticks: int = typer.Option(12, help="lock-in: minimum consecutive ticks"),
           quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP)) -> None:
    """Write a self-contained HTML report of a run (figures embedded), optionally next to another."""
    runs = [run_dir] + ([compare] if compare else [])
    for p in runs:
        if not (p / "heartbeats").is_dir():
            fail(f"{p}: not a run directory (no heartbeats table)")
    # what a report needs is loaded as the inputs pass their checks, so a refusal comes at once:
    # the run checks need the config models (and so numba), the charts matplotlib
    from sim.replay import read_run
    from sim.rundir import check_writable_file
    for p in runs:
        read_run(p, "a report")        # manifest shape, every part's schema and its recorded sha256
    target = out_file or run_dir / "report.html"
    check_writable_file(target)
    from sim.report import render_report
    try:
        path = render_report(run_dir, out_file, compare=compare, threshold=threshold, min_ticks=min_ticks)
    except OSError as exc:
        fail(f"--out {target}: cannot write the report: {exc.strerror or exc}")
    if not quiet:
        out.print(f"report: {shown(path)}", highlight=False, soft_wrap=True)


def _interrupted(run_dir: Path, signum: int) -> None:
    """SIGINT -> exit 130, SIGTERM -> 143 (128 + signal), one line, no traceback."""
    import signal as _signal
    name = _signal.Signals(signum).name
    fail(f"{name}: stopped; tables flushed and the manifest marked interrupted in {run_dir} "
         f"(continue with: golem-sim resume {run_dir})", 128 + signum)


TRUST_HELP = ("run the plug-in code the run directory names (its manifest's files and modules): a run directory "
              "is data, so this is refused unless asked")
PLUGIN_HELP = "a plug-in file the run used, given again: its code may run (repeatable; the narrow --trust-plugins)"


def _trusting(trust_plugins: bool, plugin: list[Path]):
    from sim.plugins import trusting
    return trusting(all=trust_plugins, files=plugin)


def _progress():
    return Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                    TimeElapsedColumn(), console=err, transient=True)


@app.command()
def replay(run_dir: Path = typer.Argument(..., help="a run directory"),
           verify: bool = typer.Option(False, "--verify", help="re-execute and compare every table (the default "
                                                                "without --set)"),
           set_: list[str] = typer.Option([], "--set", help="key=value: a counterfactual on the same recorded tape"),
           out_dir: Optional[Path] = typer.Option(None, "--out", help="counterfactual run directory "
                                                                      "(default RUN-cf, RUN-cf2, ...)"),
           keep: bool = typer.Option(False, "--keep", help="keep the verification replay's directory"),
           trust_plugins: bool = typer.Option(False, "--trust-plugins", help=TRUST_HELP),
           plugin: list[Path] = typer.Option([], "--plugin", help=PLUGIN_HELP),
           quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP)) -> None:
    """Verify a run (re-execute from its manifest and recorded tape) or run a counterfactual with --set."""
    from sim import replay as rp
    from sim.notices import compile_notice
    from sim.world import RunInterrupted
    target = None
    try:
        if set_ and verify:
            raise InputError("--verify and --set: a verification replays the run unchanged; expected one of them")
        if not set_:
            with compile_notice(lambda m: None if quiet else note(m)), _trusting(trust_plugins, plugin):
                rep = rp.verify(run_dir, keep=keep)
            for line in rep.lines:
                (out if rep.ok else err).print(shown(line), highlight=False, soft_wrap=True)
            raise typer.Exit(0 if rep.ok else 1)
        target = out_dir
        if target is None:
            target, i = Path(f"{run_dir}-cf"), 1
            while target.exists() and any(target.iterdir()):
                i += 1
                target = Path(f"{run_dir}-cf{i}")
        with compile_notice(lambda m: None if quiet else note(m)), _trusting(trust_plugins, plugin):
            res = rp.counterfactual(run_dir, set_, target)
    except InputError as exc:
        fail_input(exc)
    except RunInterrupted as exc:
        if target is None:
            fail("verification interrupted; nothing was written to the run", 128 + exc.signum)
        _interrupted(target, exc.signum)
    if not quiet:
        out.print(summary_table(res.manifest, res.world, res.run_dir))
    out.print(f"counterfactual of {shown(run_dir)} ({shown(', '.join(set_))}): {shown(res.run_dir)}", highlight=False,
              soft_wrap=True)


@app.command()
def resume(run_dir: Path = typer.Argument(..., help="an interrupted or killed run directory"),
           trust_plugins: bool = typer.Option(False, "--trust-plugins", help=TRUST_HELP),
           plugin: list[Path] = typer.Option([], "--plugin", help=PLUGIN_HELP),
           quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP)) -> None:
    """Continue a run from its latest checkpoint; the tables end byte-identical to an uninterrupted run."""
    from sim.resume import resume as do_resume
    from sim.notices import compile_notice
    from sim.world import RunInterrupted
    try:
        with compile_notice(lambda m: None if quiet else note(m)), _trusting(trust_plugins, plugin):
            res = do_resume(run_dir)
    except InputError as exc:
        fail_input(exc)
    except RunInterrupted as exc:
        _interrupted(run_dir, exc.signum)
    for note in res.manifest.get("checkpoint_rejected") or []:
        err.print(f"[yellow]warning:[/] {markup_escape(one_line(note))}; resumed from the previous good one",
                  highlight=False, soft_wrap=True)
    for note in res.manifest.get("ignored_parts") or []:
        err.print(f"[yellow]warning:[/] {markup_escape(one_line(note))}", highlight=False, soft_wrap=True)
    if not quiet:
        out.print(summary_table(res.manifest, res.world, res.run_dir))
    out.print(f"resumed from t={res.manifest['resumed_from_s'] / 3600:.1f} h; complete: {shown(res.run_dir)}",
              highlight=False, soft_wrap=True)


#: diff's P/A/D are means over every heartbeat of the run, not the final state the run summary shows
DIFF_LABELS = {"mean_p": "P, mean over the run", "mean_a": "A, mean over the run", "mean_d": "D, mean over the run"}


@app.command()
def diff(run_a: Path = typer.Argument(..., help="first run directory"),
         run_b: Path = typer.Argument(..., help="second run directory"),
         out_file: Optional[Path] = typer.Option(None, "--out", help="write the comparison as Parquet")) -> None:
    """Compare two runs per Clade: final P&L, deaths, flashbulbs, mean P/A/D, retrieval valence bias."""
    from sim.replay import diff_runs
    try:
        d = diff_runs(run_a, run_b)
    except InputError as exc:
        fail_input(exc)
    t = Table(title=f"A = {shown(run_a)}   B = {shown(run_b)}")
    names = [shown(c) for c in d["clade"].unique().to_list()]
    for col in ("clade", "metric", "A", "B", "B - A"):     # a Clade's name is shown whole (up to 60 characters)
        t.add_column(col, justify="left" if col in ("clade", "metric") else "right",
                     min_width=min(60, max(map(len, names), default=5)) if col == "clade" else None)

    def f(x, metric, signed=False):
        if x is None:
            return "-"
        if metric in ("golems", "deaths", "flashbulbs"):
            return f"{x:+,.0f}" if signed else f"{x:,.0f}"
        if metric in ("final_pnl", "final_pnl_pct"):
            return f"{x:+,.2f}"
        return f"{x:+.4f}"
    for row in d.iter_rows(named=True):
        k = row["metric"]
        t.add_row(shown(row["clade"]), DIFF_LABELS.get(k, k), f(row["a"], k), f(row["b"], k), f(row["delta"], k, True))
    out.print(t)
    if out_file:
        write_parquet(d, out_file)
        out.print(f"written: {shown(out_file)}", highlight=False, soft_wrap=True)


#: import-tape: the Python keyword in a sim.tapes hint -> the command's own option
_TAPE_FLAGS = {"order": "--order", "time_unit": "--time-unit", "time_format": "--time-format", "fmt": "--format",
               "gas_unit": "--gas-unit", "records_key": "--records-key", "time_col": "--time-col"}
_EXTRA_FLAGS = {"time_unit": "--extra-time-unit", "time_format": "--extra-time-format", "time_col": "--extra",
                "records_key": "--records-key"}


def _cli_hints(msg: str, extras: dict[str, str]) -> str:
    """Rewrite sim.tapes' Python spellings (order='sort', time_unit='s'|'ms') as the flags a user of
    import-tape types (--order sort, --time-unit s|ms); for an extra's file, its per-extra flag."""
    import re
    name = next((n for p, n in extras.items() if msg.startswith(f"{p}:")), None)

    def sub(m):
        key, val = m.group(1), m.group(2)
        values = "|".join(v.strip("'") for v in val.split("|"))
        if name is not None and key in _EXTRA_FLAGS:
            if key == "time_col":
                return f"--extra {name}=PATH:COLUMN@TIME_COLUMN"
            return f"{_EXTRA_FLAGS[key]} {name}={values}"
        return f"{_TAPE_FLAGS[key]} {values}"
    keys = "|".join(_TAPE_FLAGS)
    return re.sub(rf"\b({keys})=((?:'[^']*'(?:\|'[^']*')*)|\.\.\.)", sub, msg)


def _keyed(items: list[str], flag: str) -> dict[str, str]:
    out = {}
    for it in items:
        k, eq, v = it.partition("=")
        if not eq or k.strip() not in ("gas", "tvl", "funding_rate") or not v:
            raise InputError(f"{flag} {it!r}: expected NAME=VALUE with NAME one of gas, tvl, funding_rate")
        out[k.strip()] = v
    return out


@app.command("import-tape")
def import_tape_cmd(
        files: list[Path] = typer.Argument(..., help="OHLCV bar files (CSV, Parquet, JSON), concatenated in order"),
        out_file: Path = typer.Option(..., "--out", help="tape Parquet to write (e.g. tapes/NAME.parquet)"),
        asset: str = typer.Option("BTC", "--asset"),
        time_col: Optional[str] = typer.Option(None, "--time-col", help="the bars' time column (default: found by "
                                               "name, open times first; the summary says which)"),
        time_format: Optional[str] = typer.Option(None, "--time-format", help="strptime format of text times"),
        time_unit: Optional[str] = typer.Option(None, "--time-unit", help="s|ms|us|ns for epoch numbers"),
        col: list[str] = typer.Option([], "--col", help="canonical=file column, e.g. open=Open (repeatable)"),
        sep: str = typer.Option(",", "--sep"),
        fmt: Optional[str] = typer.Option(None, "--format", help="csv|parquet|json (default: from the extension)"),
        order: str = typer.Option("strict", "--order", help="strict | sort | dedupe"),
        records_key: Optional[str] = typer.Option(None, "--records-key", help="JSON: the key holding the records "
                                                  "(data for pandas' table orient; a.b for deeper)"),
        gas_unit: str = typer.Option("gwei", "--gas-unit", help="gwei | wei: the unit of the gas values (stored "
                                     "in gwei)"),
        extra: list[str] = typer.Option([], "--extra", help="name=path:column[@time_column], name one of gas|tvl|"
                                                            "funding_rate (joined as-of backward, repeatable)"),
        extra_time_format: list[str] = typer.Option([], "--extra-time-format", help="NAME=FORMAT: strptime format "
                                                    "of an extra's times, e.g. gas=%m/%d/%Y"),
        extra_time_unit: list[str] = typer.Option([], "--extra-time-unit", help="NAME=UNIT: an extra's epoch "
                                                  "numbers, e.g. gas=s")) -> None:
    """Import real OHLCV bars (optionally gas/TVL/funding series) as a tape for market.tape.

    An extra's times are read like the bars' (--time-format, --time-unit) unless its own
    --extra-time-format / --extra-time-unit say otherwise."""
    from sim.notices import human_span
    from sim.tapes import ExtraSeries, TapeError, detect_events, import_tape, write_tape
    notes: list[str] = []
    extra_paths: dict[str, str] = {}
    try:
        columns = {}
        for c in col:
            if "=" not in c:
                raise InputError(f"--col {c!r}: expected canonical=column, e.g. open=Open")
            k, v = c.split("=", 1)
            columns[k.strip()] = v.strip()
        formats = _keyed(extra_time_format, "--extra-time-format")
        units = _keyed(extra_time_unit, "--extra-time-unit")
        extras = []
        for e in extra:
            name, _, rest = e.partition("=")
            path, _, colspec = rest.rpartition(":")
            column, _, tcol = colspec.partition("@")
            if not name or not path or not column:
                raise InputError(f"--extra {e!r}: expected name=path:column[@time_column], e.g. "
                                 "funding_rate=funding.csv:funding_rate")
            if name not in ("gas", "tvl", "funding_rate"):
                raise InputError(f"--extra {e!r}: name {name!r}; expected gas, tvl or funding_rate")
            extra_paths[path] = name
            own = name in formats or name in units
            extras.append(ExtraSeries(path=path, column=column, name=name, time_col=tcol or None,
                                      time_format=formats.get(name, None if own else time_format),
                                      time_unit=units.get(name, None if own else time_unit), sep=sep,
                                      records_key=records_key))
        for k in set(formats) | set(units):
            if k not in extra_paths.values():
                raise InputError(f"--extra-time-{'format' if k in formats else 'unit'} {k}=...: no --extra {k}=...; "
                                 "expected the name of a given extra series")
        df = import_tape(files, asset=asset, time_col=time_col, time_format=time_format, time_unit=time_unit,
                         columns=columns, sep=sep, order=order, extras=extras, fmt=fmt, gas_unit=gas_unit,
                         records_key=records_key, notes=notes)
        try:
            write_tape(df, out_file)   # beside the target, then renamed: a failure leaves no half tape
        except Exception as exc:
            if _os_errno(exc) is None or isinstance(exc, (InputError, TapeError)):
                raise
            fail(f"--out {out_file}: cannot write the tape: {os.strerror(_os_errno(exc))}; nothing was written")
        n_events = detect_events(df).height
    except InputError as exc:
        fail_input(exc)
    except TapeError as exc:
        fail(_cli_hints(str(exc), extra_paths))
    from datetime import datetime, timezone

    def iso(ms):
        return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M")
    for n in notes:
        note(_cli_hints(n, extra_paths))
    present = [c for c in ("gas", "tvl", "funding_rate") if df[c].null_count() < df.height]
    msg = (f"{out_file}: {df.height:,} bars of {asset} ({human_span(int(df['bar_ms'][0]) / 1000)} bars), "
           f"{iso(df['time_ms'][0])} .. {iso(df['time_ms'][-1])} UTC; extras: {', '.join(present) or 'none'}; "
           f"{n_events:,} events detected with the default thresholds")
    out.print(shown(msg), highlight=False, soft_wrap=True)


@app.command()
def sweep(sweep_file: Path = typer.Argument(..., help="sweep YAML (scenarios, grid / override_sets, seeds, sets)"),
          out_dir: Optional[Path] = typer.Option(None, "--out", help="sweep directory (default runs/sweep-<file>); "
                                                                     "re-running into it reuses finished runs"),
          dask_local: Optional[int] = typer.Option(None, "--dask-local", help="run on a local Dask cluster of N "
                                                                              "one-thread worker processes"),
          scheduler: Optional[str] = typer.Option(None, "--scheduler", help="submit to a running Dask scheduler "
                                                  "(tls://host:port with the --tls options; tcp:// on loopback)"),
          tls_ca_file: Optional[str] = typer.Option(None, "--tls-ca-file", help="TLS: the CA certificate(s) (PEM)"),
          tls_cert: Optional[str] = typer.Option(None, "--tls-cert", help="TLS: this client's certificate (PEM)"),
          tls_key: Optional[str] = typer.Option(None, "--tls-key", help="TLS: this client's private key (PEM)"),
          worker_timeout: float = typer.Option(60.0, "--worker-timeout", help="seconds to wait for a Dask worker "
                                               "(at the start, or when all are gone) before giving up"),
          workers: Optional[int] = typer.Option(None, "--workers", help="local process pool size (default: CPUs)"),
          set_: list[str] = typer.Option([], "--set", help="key=value for every run (e.g. duration=1d)"),
          seeds: Optional[str] = typer.Option(None, "--seeds", help="replace the file's seeds: 1,2,3 or start:stop"),
          quiet: bool = typer.Option(False, "--quiet", "-q", help=QUIET_HELP)) -> None:
    """Run a scenario x parameter x seed sweep: a run directory per run and a Parquet summary.

    Exit status: 0 all runs ok, 1 some runs failed (see the summary's error column), 2 bad input,
    130 interrupted (finished runs kept and summarised; the same command continues the sweep)."""

    from sim import sweep as sw
    try:
        ex = sw.make_executor(workers=workers, dask_local=dask_local, scheduler=scheduler,
                              tls=(tls_ca_file, tls_cert, tls_key), worker_timeout=worker_timeout)
        address_warning = sw.address_warning(scheduler)
        if address_warning:
            warn(address_warning)
        with sw.RichProgress(err, disable=quiet) as progress:
            res = sw.run_sweep(sweep_file, out_dir, executor=ex, sets=set_,
                               seeds=sw.parse_seeds(seeds) if seeds else None, on_progress=progress)
    except InputError as exc:
        fail_input(exc)   # fail() escapes rich markup: messages hold [brackets] (golem-sim[distributed])
    except sw.SweepInterrupted as exc:
        r = exc.result
        fail(f"interrupted: {len(r.rows)} of {r.planned} runs finished and summarised in {r.out / 'summary'}; "
             "run the same command again to continue", 130)
    except KeyboardInterrupt:
        fail("interrupted before any run started", 130)
    if not quiet:   # piped output keeps the table's columns whole instead of 80 characters wide
        (out if out.is_terminal else Console(width=max(out.width, 200))).print(sw.summary_table(res))
    out.print(f"{res.planned} runs: {res.ok} ok ({res.reused} reused), {res.failed} failed, in {res.wall_s:.1f} s "
              f"on {shown(res.executor or 'no executor (nothing to run)')}; summary: {shown(res.out / 'summary')}",
              highlight=False, soft_wrap=True)
    if res.failed:
        raise typer.Exit(1)


def main() -> None:  # pragma: no cover - console entry
    app()


if __name__ == "__main__":  # pragma: no cover
    app()
