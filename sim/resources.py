"""Will the world fit? A run's memory, estimated before anything is allocated.

The Grimoire is most of a world (`Grimoire.bytes_for`, measured on the arena's real layout); the
tape, the population's state and the recorder's buffers come on top. The estimate is compared
with the least of: the memory the kernel says is available, the address-space limit
(`ulimit -v`), the cgroup's memory limit, and `GOLEM_MEMORY_LIMIT` (bytes, or `4GiB`, `512MB`) for
running several worlds side by side. A world over it is refused with the estimate, as bad input:
starting it would fail minutes later with a MemoryError (or the kernel's OOM killer) and leave a
run directory without a manifest.
"""
from __future__ import annotations

import os
import re
import resource
from pathlib import Path

from golem.grimoire import Grimoire
from golem.population import MARKER_REGIMES, PATTERNS_PER_REGIME
from sim.errors import InputError, clip, escape
from sim.scenario import BAR, Scenario, parse_duration

#: per Golem beside its Grimoire: the population's arrays but the somatic markers (3.4 kB), the
#: Mind's and the tick's buffers, with room to grow (everything beside the arena, markers
#: included, measured 14.6 KiB a Golem at 100,000 in ten cohorts)
PER_GOLEM = 16 * 1024
#: per somatic-marker pattern of a Golem (valence, arousal, target, count, 9 emotion counts)
PER_PATTERN = 8 * 3 + 4 + 4 * 9
#: bytes per market step per asset (bars, TVL and the generator's draws and temporaries)
PER_STEP_ASSET = 8 * 16
PER_STEP = 8 * 10
#: recorded rows of one Golem-tick across the tables, as buffered until a flush (x2: the writer
#: thread may still hold the previous flush)
PER_ROW = 2 * 1024
#: a recorded push wave (every member of a Clade pushing to every sibling in one instant, as an
#: exploit on a held asset does): its contagion rows and their payload text at the flush, per copy
#: (measured: 9,968,000 copies of ten 1,000-Golem Clades raised a recorded run's peak RSS by ~5.9 GB)
PER_COPY = 600
_UNITS = {"": 1, "b": 1, "k": 1e3, "kb": 1e3, "kib": 2**10, "m": 1e6, "mb": 1e6, "mib": 2**20, "g": 1e9, "gb": 1e9,
          "gib": 2**30, "t": 1e12, "tb": 1e12, "tib": 2**40}


def gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB" if n >= 2**30 / 10 else f"{n / 2**20:,.0f} MiB"


def parse_bytes(text: str, where: str) -> int:
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise InputError(f"{where}: expected a size in bytes such as 4GiB, 512MB or 1000000000, "
                         f"got {clip(escape(text))!r}")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def interval_s(scenario: Scenario, group, cfg) -> float:
    """A Golem group's heartbeat in seconds, as known before the run: `bar` is a generated market's
    step; a tape's bar length is not known before the tape is read, so the default heartbeat stands
    in for it."""
    if group.interval == BAR:
        return scenario.market.step_s if scenario.market.tape is None else cfg.heartbeat.interval_s
    return parse_duration(group.interval) if group.interval is not None else cfg.heartbeat.interval_s


def estimate(scenario: Scenario, cfg, record: bool = True) -> dict[str, int]:
    """Bytes the run will hold at its peak, by part."""
    n = sum(g.count for g in scenario.golems)
    cap, dim = cfg.grimoire.capacity, cfg.grimoire.embedding_dim
    # the markers are sized by the market's regimes; a tape's are not known before it is read
    regimes = len(scenario.market.regimes) if scenario.market.tape is None else MARKER_REGIMES
    parts = {"grimoire": Grimoire.bytes_for(n, cap, dim, fingerprints=cfg.retrieval.mode == "somatic_hdc",
                                            act_ring=max(1, cfg.reflex.promotion_min)),   # as the Mind sizes it
             "golems": n * (PER_GOLEM + PER_PATTERN * PATTERNS_PER_REGIME * min(MARKER_REGIMES, regimes))}
    if scenario.market.tape is None:
        steps = scenario.duration_s / scenario.market.step_s + 2
        parts["tape"] = int(steps * (len(scenario.market.assets) * PER_STEP_ASSET + PER_STEP))
    if record:
        ticks = 0.0
        for g in scenario.golems:
            ticks += g.count * min(scenario.duration_s, cfg.recording.flush_every_s) / interval_s(scenario, g, cfg)
        parts["buffers"] = int(ticks * PER_ROW)
        sizes: dict[str, int] = {}
        for g in scenario.golems:
            sizes[g.clade] = sizes.get(g.clade, 0) + g.count
        parts["push wave"] = PER_COPY * sum(c * (c - 1) for c in sizes.values())
    return parts


def available(environ=None) -> tuple[int, str]:
    """(bytes a new world may take, what limits it)."""
    environ = os.environ if environ is None else environ
    limits: list[tuple[float, str]] = []
    try:
        info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines() if ":" in line)
        limits.append((int(info["MemAvailable"].split()[0]) * 1024, "memory available"))
    except (OSError, KeyError, ValueError):
        pass
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        try:
            used = int(Path("/proc/self/statm").read_text().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError):
            used = 0
        limits.append((soft - used, "address space left under the limit (ulimit -v)"))
    for lim, cur in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                     ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            text = Path(lim).read_text().strip()
            if text != "max" and int(text) < 2**60:
                limits.append((int(text) - int(Path(cur).read_text()), "memory left in the cgroup limit"))
                break
        except (OSError, ValueError):
            continue
    if environ.get("GOLEM_MEMORY_LIMIT"):
        text = environ["GOLEM_MEMORY_LIMIT"]
        limits.append((parse_bytes(text, f"environment GOLEM_MEMORY_LIMIT={clip(escape(text))}"),
                       "GOLEM_MEMORY_LIMIT"))
    if not limits:
        return 2**62, "no known limit"
    n, why = min(limits)
    return max(int(n), 0), why


def check(scenario: Scenario, cfg, where: str, record: bool = True, environ=None) -> dict[str, int]:
    """Refuse a world whose estimate exceeds the memory it may use (InputError with the estimate)."""
    parts = estimate(scenario, cfg, record)
    total = sum(parts.values())
    room, why = available(environ)
    if total > room:
        n = sum(g.count for g in scenario.golems)
        per = Grimoire.bytes_for(1, 1, cfg.grimoire.embedding_dim, cfg.retrieval.mode == "somatic_hdc",
                                 max(1, cfg.reflex.promotion_min)) - 8
        rest = ", ".join(f"{k} {gib(v)}" for k, v in parts.items() if k != "grimoire" and v >= 2**20)
        unrecorded = total - parts.get("buffers", 0) - parts.get("push wave", 0)
        raise InputError(
            f"{where}: golems: this world needs about {gib(total)} of memory (Grimoire {gib(parts['grimoire'])} = "
            f"{n:,} Golems x {cfg.grimoire.capacity:,} entries x {per:,} B{'; ' + rest if rest else ''}), "
            f"more than the {gib(room)} of {why}; expected fewer Golems or a smaller grimoire.capacity"
            + (f", or --no-record (without tables it needs about {gib(unrecorded)})" if record and unrecorded <= room else ""))
    return parts


__all__ = ["estimate", "available", "check", "gib", "parse_bytes"]
