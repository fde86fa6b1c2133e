"""One-line notices and warnings the command line prints before or while a run goes.

They say what a newcomer would otherwise have to discover from the tables: that the first run
spends most of its time compiling the numba kernels, that a scheduled event falls after the run's
end, or that Golems beat faster than the tape's bars change. Each is one line on stderr; none
changes a result.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

COMPILE_NOTICE = ("compiling the numba kernels (first run only, up to about a minute; later runs load them "
                  "from the cache)")


def shown(text) -> str:
    """Text from the input (a name, a path, a value) as rich prints it literally: markup escaped
    ('[/]' would raise, '[link=...]' would make a link), control characters (newlines, ANSI
    escapes) and undecodable bytes as visible escapes (sim.errors.escape)."""
    from rich.markup import escape as markup_escape

    from sim.errors import escape
    return markup_escape(escape(str(text)))


def human_span(seconds: float) -> str:
    """A length of time as people write it: '10 min', '2 h', '1.5 d', '45 s', '250 ms'."""
    s = float(seconds)
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("min", 60.0), ("s", 1.0)):
        if abs(s) >= size:
            v = s / size
            return f"{v:.0f} {unit}" if abs(v - round(v)) < 1e-9 else f"{v:.3g} {unit}"
    return f"{s * 1000:.3g} ms" if s else "0 s"


@contextmanager
def compile_notice(say: Callable[[str], None]) -> Iterator[None]:
    """Call `say(COMPILE_NOTICE)` once, as soon as numba starts compiling a kernel it did not find
    in its cache (numba broadcasts "numba:compile" only on a cache miss), so a cached run is silent."""
    try:
        from numba.core import event as ev
    except ImportError:   # pragma: no cover - numba is a dependency
        yield
        return
    state = {"said": False}

    class _Listener(ev.Listener):
        def on_start(self, event) -> None:
            if not state["said"]:
                state["said"] = True
                say(COMPILE_NOTICE)

        def on_end(self, event) -> None:
            pass

    with ev.install_listener("numba:compile", _Listener()):
        yield


def late_schedule(scenario) -> str | None:
    """One warning line naming the scheduled events and regime changes at or after the run's end
    (they never happen), or None."""
    end = scenario.duration_s
    late = [f"market.events.{i} ({e.kind} at {e.at})" for i, e in enumerate(scenario.market.events) if e.at_s >= end]
    late += [f"market.regime_schedule.{i} ({r.regime} at {r.at})"
             for i, r in enumerate(scenario.market.regime_schedule) if r.at_s >= end]
    if not late:
        return None
    return (f"{'; '.join(late)}: after the run's end at {human_span(end)}, so "
            f"{'it does' if len(late) == 1 else 'they do'} not happen (a longer duration reaches "
            f"{'it' if len(late) == 1 else 'them'})")


def tape_bar_ms(scenario) -> int | None:
    """The bar length of the scenario's tape file (one value read from the Parquet), or None when
    there is no tape or it cannot be read (the run itself then reports the problem)."""
    if scenario.market.tape is None:
        return None
    try:
        import polars as pl
        from pathlib import Path
        v = pl.scan_parquet(Path(scenario.market.tape.path).expanduser()).select(pl.col("bar_ms").first()).collect()
        return int(v.item())
    except Exception:   # noqa: BLE001 - a notice never replaces the run's own error
        return None


def bar_mismatch(scenario, cfg, bar_ms: int | None) -> str | None:
    """One warning line when Golems on a recorded tape beat at another cadence than its bars, or None.

    Faster than the bars, a Golem sees the same closed bar again and again (a market that seems to
    stand still); slower, it skips bars. `interval: bar` ticks once per bar."""
    bar_s = bar_ms / 1000 if bar_ms else 0.0
    if scenario.market.tape is None or not bar_s:
        return None
    from sim.scenario import parse_duration
    odd: dict[str, float] = {}
    for g in scenario.golems:
        if g.interval == "bar":
            continue
        iv = parse_duration(g.interval) if g.interval is not None else cfg.heartbeat.interval_s
        if abs(iv - bar_s) > 1e-9:
            odd.setdefault(g.clade, iv)
    if not odd:
        return None
    who = ", ".join(f"{c} every {human_span(iv)}" for c, iv in odd.items())
    return (f"the tape's bars are {human_span(bar_s)} long but Golems beat at another cadence ({who}); "
            "a faster beat reads the same closed bar again, a slower one skips bars; "
            "set `interval: bar` in golems to tick once per bar")


__all__ = ["COMPILE_NOTICE", "human_span", "compile_notice", "late_schedule", "tape_bar_ms", "bar_mismatch"]
