"""`golem-sim`: run | replay | resume | diff | sweep | report | import-tape | validate | schema | bench.

Bad input is reported as one line (file, key path, what was expected) with exit status 2 and no
traceback; whatever a failed run had already written stays readable.
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from sim.scenario import InputError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Simulate populations of Golems whose memory is shaped by emotion.")
err = Console(stderr=True)
out = Console()


def fail(msg: str, code: int = 2) -> None:
    err.print(f"[bold red]error:[/] {msg}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _default_out(scenario: Path, seed: Optional[int]) -> Path:
    stamp = f"{scenario.stem}-seed{seed}" if seed is not None else scenario.stem
    base = Path("runs") / stamp
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
        progress.update(task, completed=now_s, description=f"t={now_s / 3600:7.1f} h  {rate:9,.0f} ticks/s  alive {alive}")
    return cb


def summary_table(manifest: dict, world) -> Table:
    import numpy as np
    pop = world.pop
    t = Table(title=f"{manifest['scenario']['name']} (seed {manifest['seed']})", show_lines=False)
    for col in ("clade", "golems", "alive", "mean P", "mean A", "mean D", "value", "P&L %"):
        t.add_column(col, justify="right")
    price = world.tape.close[-1 if world.tape.bar_ms == 0 else max(0, world.market_step)]
    for ci, name in enumerate(pop.clade_names):
        m = pop.clade == ci
        if not m.any():
            continue
        val = pop.cash[m] + pop.units[m] * price[pop.asset[m].astype(int)]
        v0 = pop.value0[m]
        t.add_row(name, str(int(m.sum())), str(int(pop.alive[m].sum())), f"{pop.pad[m, 0].mean():+.2f}",
                  f"{pop.pad[m, 1].mean():+.2f}", f"{pop.pad[m, 2].mean():+.2f}", f"{val.sum():,.0f}",
                  f"{100 * (val.sum() / v0.sum() - 1):+.1f}")
    return t


@app.command()
def run(scenario: Path = typer.Argument(..., help="scenario YAML"),
        seed: Optional[int] = typer.Option(None, help="overrides the scenario's seed"),
        out_dir: Optional[Path] = typer.Option(None, "--out", help="run directory (default runs/<scenario>-seed<N>)"),
        set_: list[str] = typer.Option([], "--set", help="key=value: a config key (retrieval.top_k=4) or scenario key"),
        config: Optional[Path] = typer.Option(None, "--config", help="a config file layered over the defaults"),
        no_record: bool = typer.Option(False, "--no-record", help="run without writing tables (for timing)"),
        quiet: bool = typer.Option(False, "--quiet", "-q")) -> None:
    """Run a scenario and write its run directory."""
    from sim.run import execute, prepare
    try:
        sc, _, _, run_seed = prepare(scenario, seed=seed, sets=set_, config_file=str(config) if config else None)
        target = out_dir or _default_out(scenario, run_seed)
        with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
                      TimeElapsedColumn(), console=err, disable=quiet, transient=True) as progress:
            task = progress.add_task("starting", total=sc.duration_s)
            res = execute(scenario, target, seed=seed, sets=set_, config_file=str(config) if config else None,
                          record=not no_record, progress=_progress_cb(progress, task, sc.duration_s))
    except InputError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        fail("interrupted; the tables written so far are readable and the manifest says where the run stopped", 130)
    m = res.manifest
    if not quiet:
        out.print(summary_table(m, res.world))
        rate = m["golem_ticks"] / max(res.wall_s, 1e-9)
        out.print(f"{m['golem_ticks']:,} Golem-ticks in {res.wall_s:.2f} s ({rate:,.0f}/s); "
                  f"events {res.world.stats.events:,}; deaths {int((~res.world.pop.alive).sum())}")
        if not no_record:
            out.print(f"run directory: {res.run_dir}")


@app.command()
def validate(scenario: Path = typer.Argument(..., help="scenario YAML"),
             set_: list[str] = typer.Option([], "--set")) -> None:
    """Check a scenario (and its config overrides) without running it."""
    from sim.run import prepare
    try:
        sc, cfg, _, seed = prepare(scenario, sets=set_)
    except InputError as exc:
        fail(str(exc))
    n = sum(g.count for g in sc.golems)
    out.print(f"{scenario}: ok ({sc.name}: {n} Golems, {sc.duration_s / 86400:g} days, seed {seed})")


@app.command()
def schema(out_file: Optional[Path] = typer.Option(None, "--out", help="write to a file instead of stdout")) -> None:
    """Print the JSON Schema of scenario files (generated from the typed model)."""
    from sim.scenario import json_schema
    text = json.dumps(json_schema(), indent=2, sort_keys=True)
    if out_file:
        out_file.write_text(text + "\n")
    else:
        sys.stdout.write(text + "\n")


def main() -> None:  # pragma: no cover - console entry
    app()


if __name__ == "__main__":  # pragma: no cover
    app()
