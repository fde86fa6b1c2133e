"""Tapes as markets (SPEC §12, §13): a real OHLCV tape file, or a run's recorded market, as a `Tape`.

Two doors into the same `sim.market.Tape`:

* `tape_from_file(scenario)` reads a tape written by `golem-sim import-tape` (sim.tapes), derives
  a regime per bar and the market events with the tape detectors, and cuts out the bars the run
  can reach, starting at `market.tape.start`.
* `tape_from_run(run_dir)` rebuilds the tape a run actually saw from its `market` and
  `tape_events` tables (plus the tape facts kept in its manifest), so that replays and
  counterfactuals read the recorded market, never a regenerated one.

How the clock reads a real tape (docs/replay.md): bar i opens at time_ms[i] and is known from its
close, time_ms[i] + bar_ms (`Tape.index_at`). Sim time 0 is the close of the start bar
(`World.t0_ms`), so the first heartbeat sees the first CLOSED bar and nothing later.

polars is imported inside the functions that read a tape or a run's tables: every run asks this
module for its tape's facts, and a generated market's run need not load polars (0.3 s of start-up).
"""
from __future__ import annotations

import hashlib
import json
import math
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from sim.market import SEVERITIES, MarketEvent, Tape
from sim.recorder import read_table
from sim.scenario import TAPE_ASSET, InputError, Scenario, parse_duration

#: regimes a real tape is cut into (same names as the generator's defaults, so scenarios and
#: analyses read the same words for both)
REGIMES = ("calm", "bull", "bear", "crash")
#: detector kind (sim.tapes.detect_events) -> market event kind (sim.market.EVENT_KINDS)
KIND_MAP = {"crash-bar": "crash_bar", "crash-wick": "flash_crash", "pump-bar": "pump_bar",
            "gas-spike": "gas_spike", "funding-extreme": "funding_extreme", "vol-spike": "volatility_spike"}
#: event kinds whose detector magnitude is a simple return (impact is stored as a log-return)
_RETURN_KINDS = {"crash-bar", "crash-wick", "pump-bar"}
DAY_MS = 86_400_000


def parse_start(text: str | None, where: str = "market.tape.start") -> int | None:
    """ISO date or date-time (UTC unless an offset is given) -> epoch ms."""
    if text is None:
        return None
    try:
        dt = datetime.fromisoformat(str(text).strip())
    except ValueError:
        raise InputError(f"{where}: {text!r}: expected an ISO date or date-time such as '2020-03-09' or "
                         f"'2020-03-09T00:00Z'") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return int(round(dt.timestamp() * 1000))


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def derive_regimes(open_: np.ndarray, close: np.ndarray, bar_ms: int, crash_return: float) -> np.ndarray:
    """Regime per bar from the bar itself and bars before it (no look-ahead); index into REGIMES.

    With r the bar's log-return (close/open), R the trailing one-day log-return (close over the
    close one day of bars earlier) and s the standard deviation of r over the trailing week:
    crash if r <= log(1 + crash_return) or R <= log(1 + 2 * crash_return); else bull if
    R >= s * sqrt(bars per day) (a one-sigma day up), bear if R <= -that, else calm. Bars
    without a full day (or week) of history are calm (or judged by r alone).
    """
    import polars as pl
    T = close.size
    w = max(2, int(round(DAY_MS / max(bar_ms, 1))))
    r = np.log(close / open_)
    R = np.full(T, np.nan)
    if T > w:
        R[w:] = np.log(close[w:] / close[:-w])
    s = pl.Series(r).rolling_std(window_size=7 * w, min_samples=w).to_numpy()
    band = s * math.sqrt(w)
    reg = np.zeros(T, dtype=np.int16)
    with np.errstate(invalid="ignore"):
        reg[R >= band] = 1
        reg[R <= -band] = 2
        crash = (r <= math.log1p(crash_return)) | (R <= math.log1p(2 * crash_return))
    reg[crash] = 3
    return reg


def tape_window(time_ms: np.ndarray, bar_ms: int, start_ms: int | None, duration_s: float,
                where: str) -> tuple[int, int]:
    """Bars [lo, hi) a run of `duration_s` reaches when it starts at the bar opening at `start_ms`.

    The start bar is the first bar opening at or after `start`; the run ends at t0 + duration with
    t0 = its close, and the last bar it reads is the last one closed by then.
    """
    T = time_ms.size
    lo = 0 if start_ms is None else int(np.searchsorted(time_ms, start_ms, side="left"))
    if lo >= T:
        raise InputError(f"{where}: market.tape.start {_iso(start_ms)} is after the tape's last bar "
                         f"({_iso(int(time_ms[-1]))}); expected a start inside the tape")
    t0 = int(time_ms[lo]) + bar_ms
    end = t0 + int(round(duration_s * 1000))
    last_close = int(time_ms[-1]) + bar_ms
    if end > last_close:
        raise InputError(f"{where}: duration {duration_s / 86400:g} d from {_iso(int(time_ms[lo]))} runs to "
                         f"{_iso(end)}, past the tape's last bar close {_iso(last_close)}; expected a shorter "
                         "duration or an earlier market.tape.start")
    hi = int(np.searchsorted(time_ms + bar_ms, end, side="right"))
    return lo, max(hi, lo + 1)


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def tape_from_file(scenario: Scenario, cfg=None) -> Tape:
    """The scenario's `market.tape` file as a Tape for the bars the run reaches (docstring above).

    Gas and TVL absent from the file become constants (the scenario's `market.gas.base_gwei`, the
    TVL of a scenario asset of the same name or 1e8), so trading costs stay finite; funding stays
    NaN where absent. Events come from `sim.tapes.detect_events` with the TapeSpec thresholds: an
    event detected on a bar is dated at the bar's CLOSE (when it becomes knowable) and is visible
    (after `detect_lag`) until just before the next bar closes (duration bar_ms - 1: the probe
    window is inclusive at both ends). The regime follows `derive_regimes` on the tape's first asset.
    Bad tape data raises TapeError (the CLI prints it as one line, exit 2).
    """
    import polars as pl
    from sim.tapes import TapeError, detect_events, read_tape

    spec = scenario.market.tape
    path = Path(spec.path).expanduser()
    where = str(path)
    df = read_tape(path)
    assets = tuple(dict.fromkeys(df["asset"].to_list()))
    first = df.filter(pl.col("asset") == assets[0])
    time_ms = first["time_ms"].to_numpy().astype(np.int64)
    bar_ms = int(first["bar_ms"][0])
    for a in assets[1:]:
        t_a = df.filter(pl.col("asset") == a)["time_ms"].to_numpy()
        if t_a.size != time_ms.size or not np.array_equal(t_a, time_ms):
            raise TapeError(f"{where}: asset {a!r} has other bar times than {assets[0]!r}; expected every asset "
                            "on the same bars (import each asset over the same period)")
    for i, g in enumerate(scenario.golems):
        if g.asset == TAPE_ASSET and len(assets) != 1:
            raise InputError(f"{where}: golems.{i}.asset: 'tape' means the tape's only asset, but the tape holds "
                             f"{len(assets)} ({', '.join(assets)}); expected one of them by name")
        if g.asset is not None and g.asset != TAPE_ASSET and g.asset not in assets:
            raise InputError(f"{where}: golems asset {g.asset!r} is not in the tape (assets {list(assets)}); "
                             "expected one of the tape's assets")

    def grid(col: str) -> np.ndarray:
        wide = df.pivot(on="asset", index="time_ms", values=col, aggregate_function=None).sort("time_ms")
        return np.column_stack([wide[a].cast(pl.Float64).fill_null(float("nan")).to_numpy() for a in assets])

    o, h, l, c, v = (grid(k) for k in ("open", "high", "low", "close", "volume"))
    tvl = grid("tvl")
    # scenario asset settings apply only where the scenario names assets itself (not the defaults)
    known = {a.name: a for a in scenario.market.assets} if "assets" in scenario.market.model_fields_set else {}
    for j, a in enumerate(assets):
        fill = known[a].tvl if a in known else 1e8
        tvl[:, j] = np.where(np.isnan(tvl[:, j]), fill, tvl[:, j])
    gas = grid("gas")[:, 0]
    gas = np.where(np.isnan(gas), scenario.market.gas.base_gwei, gas)
    funding = grid("funding_rate")[:, 0]
    regime = derive_regimes(o[:, 0], c[:, 0], bar_ms, spec.crash_return)

    try:
        ev = detect_events(df, crash_return=spec.crash_return, crash_high=spec.crash_high,
                           funding_abs=spec.funding_abs)
    except TapeError:
        raise
    except ValueError as exc:
        raise InputError(f"{where}: market.tape: {exc}") from None
    start_ms = parse_start(spec.start)
    lo, hi = tape_window(time_ms, bar_ms, start_ms, scenario.duration_s, where)
    t0 = int(time_ms[lo]) + bar_ms
    t_end = t0 + int(round(scenario.duration_s * 1000))
    lag = int(round(parse_duration(spec.detect_lag) * 1000))
    events = []
    for row in ev.iter_rows(named=True):
        at = int(row["time_ms"]) + bar_ms            # known at the bar's close
        if at + lag + bar_ms < t0 or at > t_end:
            continue
        mag = float(row["magnitude"])
        events.append(MarketEvent(
            time_ms=at, kind=KIND_MAP[row["kind"]], asset=assets.index(row["asset"]),
            severity=SEVERITIES.index(row["severity"]),
            impact=math.log1p(mag) if row["kind"] in _RETURN_KINDS else 0.0,
            duration_ms=bar_ms - 1, tokens=row["tokens"], detect_lag_ms=lag))
    normal, source = normal_volatility(time_ms, c, bar_ms, lo, hi)
    sl = slice(lo, hi)
    protocols = tuple(known[a].protocol if a in known else f"{a.lower()}-pool" for a in assets)
    tape = Tape(time_ms=time_ms[sl].copy(), bar_ms=bar_ms, assets=assets, protocols=protocols,
                open=o[sl].copy(), high=h[sl].copy(), low=l[sl].copy(), close=c[sl].copy(), volume=v[sl].copy(),
                tvl=tvl[sl].copy(), gas=gas[sl].copy(), funding=funding[sl].copy(), regime=regime[sl].copy(),
                regime_names=REGIMES, events=events, normal_vol=normal, normal_interval_ms=bar_ms, normal_source=source)
    if cfg is not None:   # the run's own check of its reference (World reads it the same way), before any run
        try:
            tape.reference_rate(cfg.appraisal.reference_vol, cfg.appraisal.reference_interval_s)
        except ValueError as exc:
            raise InputError(f"{where}: {exc}") from None
    return tape


NORMAL_DAYS = 30
#: bars of a day or longer: the normal is the standard deviation of this many bars' log returns
NORMAL_BARS = 60


def normal_volatility(time_ms: np.ndarray, close: np.ndarray, bar_ms: int, lo: int, hi: int) -> tuple[np.ndarray, str]:
    """Each asset's normal volatility per bar (SPEC §2.1, reference_vol: auto): the median over days
    of the day's realised volatility (root mean square of its bars' log returns), over the
    NORMAL_DAYS days before the run's first bar, so arousal is relative to that asset's usual market
    whatever its bar length. A tape with less than a day of history before the start uses its
    first NORMAL_DAYS days from the start instead (look-ahead of the reference only; the manifest
    says which). Bars of a day or longer have no intraday volatility: their normal is the sample
    standard deviation of the NORMAL_BARS close-to-close log returns up to the start (NORMAL_BARS + 1
    closes before the run's first bar). An asset with too few priced bars gets NaN (an error only
    under `auto`, whose message gives the source)."""
    day = 86_400_000
    if bar_ms >= day:
        need = NORMAL_BARS + 1
        if lo < need:
            return np.full(close.shape[1], np.nan), (f"the standard deviation of the log returns of the {NORMAL_BARS} "
                                                    f"bars before the start, which needs {need} bars before it; the "
                                                    f"tape has {lo}")
        lr = np.log(close[lo - need + 1:lo] / close[lo - need:lo - 1])
        with np.errstate(invalid="ignore"):
            out = np.array([np.std(r, ddof=1) if np.isfinite(r).all() else np.nan for r in lr.T])
        return out, f"standard deviation of the log returns of the {NORMAL_BARS} bars before the start"
    before = (time_ms < time_ms[lo]) & (time_ms >= time_ms[lo] - NORMAL_DAYS * day)
    source = f"median daily realised volatility of the {NORMAL_DAYS} days before the start"
    if before.sum() * bar_ms < day:
        before = (time_ms >= time_ms[lo]) & (time_ms < time_ms[lo] + NORMAL_DAYS * day) & (np.arange(time_ms.size) < hi)
        source = f"median daily realised volatility of the first {NORMAL_DAYS} days from the start (no history before it)"
    idx = np.flatnonzero(before)
    lr = np.log(close[idx[1:]] / close[idx[:-1]])            # returns between consecutive bars
    days = time_ms[idx[1:]] // day
    out = np.empty(close.shape[1])
    for j in range(close.shape[1]):
        r = lr[:, j]
        ok = np.isfinite(r)
        per_day = [np.sqrt(np.mean(r[ok & (days == d)] ** 2)) for d in np.unique(days[ok])
                   if (ok & (days == d)).sum() >= 2]
        out[j] = float(np.median(per_day)) if per_day else float("nan")
    return out, source


def tape_facts(tape: Tape) -> dict:
    """What the tables do not hold about a tape and a replay needs to rebuild it exactly: regime and
    protocol names in order, bar length, start, and each asset's normal volatility."""
    return {"bar_ms": int(tape.bar_ms), "t0_ms": int(tape.time_ms[0]) + int(tape.bar_ms),
            "assets": list(tape.assets), "protocols": list(tape.protocols), "regime_names": list(tape.regime_names),
            "steps": int(tape.n_steps), "normal_vol": [float(x) for x in tape.normal_vol],
            "normal_interval_ms": int(tape.normal_interval_ms), "normal_source": tape.normal_source}


def tape_meta(tape: Tape, scenario: Scenario) -> dict:
    """manifest["tape"]: the tape's facts (`tape_facts`), where it came from, and for a file its
    checksum (a replay checks the file is unchanged)."""
    meta = {"source": "generator", **tape_facts(tape)}
    spec = scenario.market.tape
    if spec is not None:
        p = Path(spec.path).expanduser().resolve()
        meta.update(source="file", path=str(p), sha256=file_sha256(p))
    return meta


def tape_from_run(run_dir: str | Path) -> Tape:
    """The market a run saw, rebuilt from its `market` (long: time_ms, step, asset, ...; sorted by
    time then asset) and `tape_events` tables. Bars are the ones the run recorded (all it could
    read); regime/protocol names and bar_ms come from manifest["tape"] (runs without it: the
    generator defaults, regimes in order of first appearance)."""
    import polars as pl
    run_dir = Path(run_dir)
    mpath = run_dir / "manifest.json"
    try:
        manifest = json.loads(mpath.read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"{mpath}: cannot read the run manifest ({exc}); expected a run directory") from None
    meta = manifest.get("tape") or {}
    m = pl.from_arrow(read_table(run_dir, "market"))
    if m.height == 0:
        raise InputError(f"{run_dir / 'market'}: no recorded bars; expected the market table of a run")
    m = m.sort("step", "asset")
    steps = m["step"].unique().sort().to_numpy()
    if not np.array_equal(steps, np.arange(steps.size)):
        raise InputError(f"{run_dir / 'market'}: recorded steps are not 0..{steps.size - 1}; expected every bar once")
    assets = tuple(meta.get("assets") or dict.fromkeys(m.filter(pl.col("step") == 0)["asset"].to_list()))
    A, T = len(assets), steps.size
    if m.height != A * T:
        raise InputError(f"{run_dir / 'market'}: {m.height} rows for {T} bars x {A} assets; expected one row per bar and asset")
    order = {a: i for i, a in enumerate(assets)}
    m = m.with_columns(pl.col("asset").replace_strict(order, return_dtype=pl.Int64).alias("_a")).sort("step", "_a")

    def grid(col: str) -> np.ndarray:
        return m[col].to_numpy().reshape(T, A).astype(np.float64)

    first = m.filter(pl.col("_a") == 0)
    names = tuple(meta.get("regime_names") or dict.fromkeys(first["regime"].to_list()))
    ridx = {n: i for i, n in enumerate(names)}
    regime = np.array([ridx[r] for r in first["regime"].to_list()], dtype=np.int16)
    ev = read_table(run_dir, "tape_events").to_pylist()
    events = [MarketEvent(time_ms=e["time_ms"], kind=e["kind"], asset=-1 if e["asset"] == "*" else assets.index(e["asset"]),
                          severity=SEVERITIES.index(e["severity"]), impact=e["impact"], duration_ms=e["duration_ms"],
                          tokens=e["tokens"], detect_lag_ms=e["detect_lag_ms"], detect_jitter_ms=e["detect_jitter_ms"],
                          early_detectors=tuple(e["early_detectors"] or ())) for e in ev]
    protocols = tuple(meta.get("protocols") or (f"{a.lower()}-pool" for a in assets))
    return Tape(time_ms=first["time_ms"].to_numpy().astype(np.int64), bar_ms=int(meta.get("bar_ms", 0)), assets=assets,
                protocols=protocols, open=grid("open"), high=grid("high"), low=grid("low"), close=grid("close"),
                volume=grid("volume"), tvl=grid("tvl"), gas=first["gas"].to_numpy().astype(np.float64),
                funding=first["funding_rate"].to_numpy().astype(np.float64), regime=regime, regime_names=names,
                events=events, normal_vol=np.array(meta["normal_vol"], dtype=np.float64) if "normal_vol" in meta else None,
                normal_interval_ms=int(meta.get("normal_interval_ms", 300_000)),
                normal_source=meta.get("normal_source", "declared"))
