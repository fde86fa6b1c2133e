"""`golem-sim report`: one self-contained HTML page per run (or two runs side by side).

Everything the page needs is inside the file: the figures are matplotlib PNGs embedded as base64
data URIs and the style sheet is inline, so the report can be mailed, archived next to the run or
opened offline. A tiny inline script counts the images that decoded once the page has loaded and
appends "loaded N/N" to the title (the headless-browser test reads it).

The numbers come from `sim.analysis`; this module only draws them. Sections: summary, price with
regime bands and flashbulbs, PAD per Clade, emotions, retrieval bias with lock-in, curator /
contrarian / dream / reflex activity, the contagion wave, deaths, the Golems' lives and a Grimoire
map per Golem.
"""
from __future__ import annotations

import base64
import html
import io
from pathlib import Path
from typing import Callable, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

from sim import analysis as A  # noqa: E402

DPI = 100
MAX_GOLEMS = 8
LABEL_COLOURS = {"success": "#3ddc84", "frustration": "#ff4d4d", "risk": "#ffb000", "neutral": "#9aa0a6"}
EMOTION_COLOURS = {"joy": "#f7d13d", "trust": "#8fd16a", "fear": "#2e8b57", "surprise": "#35b7c9",
                   "sadness": "#4a78c2", "disgust": "#8e5cc2", "anger": "#d9413a", "anticipation": "#f08a24",
                   "neutral": "#c8c8c8"}
REGIME_COLOURS = {"calm": "#dfe9f5", "bull": "#d9f2dc", "bear": "#f7dede", "crash": "#f2b8b8",
                  "recovery": "#f4ecd0", "volatile": "#efe0f5"}
EXTRA_COLOURS = ["#e8e8e8", "#e0f0f0", "#f0e8d8", "#e8e0f0"]
CLADE_COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf", "#7f7f7f"]

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;color:#1d2330;background:#fafbfc}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #dde2ea;padding-bottom:4px}
.sub{color:#5b6475;font-size:13px} .note{color:#5b6475;font-size:12px;margin:4px 0 10px}
.row{display:grid;gap:16px} .row.c1{grid-template-columns:1fr} .row.c2{grid-template-columns:1fr 1fr}
.col{min-width:0} .col h3{font-size:13px;color:#5b6475;margin:0 0 6px}
img{max-width:100%;height:auto;display:block;border:1px solid #e3e7ee;border-radius:4px;background:#fff}
table{border-collapse:collapse;font-size:12px;margin:6px 0} th,td{padding:3px 8px;border-bottom:1px solid #e6e9ef;text-align:right}
th{background:#eef1f6} td.l,th.l{text-align:left}
.col table,body>table{display:block;max-width:100%;overflow-x:auto} th,td{white-space:nowrap} .none{color:#8a93a3;font-style:italic;font-size:13px;padding:8px 0}
"""
LOAD_SCRIPT = """<script>
window.addEventListener('load', function () {
  var im = document.images, ok = 0;
  for (var i = 0; i < im.length; i++) { if (im[i].complete && im[i].naturalWidth > 0) ok++; }
  document.title = document.title + ' - loaded ' + ok + '/' + im.length;
  document.body.setAttribute('data-images', ok + '/' + im.length);
  var d = document.documentElement;   // the page's width against the window's: equal when nothing overflows
  document.body.setAttribute('data-width', d.scrollWidth + '/' + d.clientWidth);
});
</script>"""


# ---------------------------------------------------------------------------------- helpers
def png_data_uri(fig) -> str:
    """Render a figure to a PNG data URI and close it (figures are never kept open)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight", facecolor=fig.get_facecolor())
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


class Figures:
    """Figures held until the page is assembled, so that a compare report can give run A's and run
    B's version of each chart the same y-axes before they are drawn (`share_y`)."""

    def __init__(self):
        self.figs: list[tuple[object, str]] = []
        self.keys: list[tuple[str, int]] = []   # (section, n-th figure of that section) per figure
        self.section = ""

    def add(self, fig, alt: str) -> str:
        self.keys.append((self.section, sum(k[0] == self.section for k in self.keys)))
        self.figs.append((fig, alt))
        return f"\x00fig{len(self.figs) - 1}\x00"

    def render(self, text: str) -> str:
        """Replace each figure's placeholder by its <img> (each figure is drawn once, then closed)."""
        import re
        if not hasattr(self, "_html"):
            self._html = [f'<img alt="{html.escape(alt)}" src="{png_data_uri(fig)}">' for fig, alt in self.figs]
        return re.sub("\x00fig([0-9]+)\x00", lambda m: self._html[int(m.group(1))], text)


_FIGURES: list[Figures] = []


def img(fig, alt: str) -> str:
    if _FIGURES:
        return _FIGURES[-1].add(fig, alt)
    return f'<img alt="{html.escape(alt)}" src="{png_data_uri(fig)}">'


def _y_axes(fig) -> list:
    """A figure's axes that carry data on y (twins included, hidden ones left out), in order."""
    return [ax for ax in fig.axes if ax.get_visible()]


def share_y(a: Figures, b: Figures) -> None:
    """Give each chart of run A and its counterpart in run B the union of their y-ranges, axis by
    axis, where the two charts have the same layout (same number of axes)."""
    other = dict(zip(b.keys, b.figs))
    for key, (fa, _) in zip(a.keys, a.figs):
        if key not in other:
            continue   # the chart exists in one run only ("none recorded" in the other)
        fb = other[key][0]
        xa, xb = _y_axes(fa), _y_axes(fb)
        if len(xa) != len(xb):
            continue
        for p, q in zip(xa, xb):
            if p.name != "rectilinear" or q.name != "rectilinear":
                continue
            (a0, a1), (b0, b1) = p.get_ylim(), q.get_ylim()
            lo, hi = min(a0, b0), max(a1, b1)
            p.set_ylim(lo, hi)
            q.set_ylim(lo, hi)


def none(text: str = "none recorded") -> str:
    return f'<div class="none">{html.escape(text)}</div>'


def table_html(df: pl.DataFrame, fmt: dict[str, str] | None = None, left: Sequence[str] = ()) -> str:
    """A small DataFrame as an HTML table (numbers formatted, text left-aligned)."""
    fmt = fmt or {}
    head = "".join(f'<th class="{"l" if c in left else ""}">{html.escape(c)}</th>' for c in df.columns)
    rows = []
    for r in df.iter_rows():
        cells = []
        for c, v in zip(df.columns, r):
            if v is None:
                s = "–"
            elif isinstance(v, float):
                s = "–" if np.isnan(v) else format(v, fmt.get(c, ".3g"))
            elif isinstance(v, list):
                s = ", ".join(map(str, v))
            else:
                s = str(v)
            cells.append(f'<td class="{"l" if c in left else ""}">{html.escape(s)}</td>')
        rows.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _tape_epoch(run: Path, depth: int = 0) -> int | None:
    """Epoch ms of simulated time 0 when the run's market is a recorded real tape: a file, or a run
    replayed from one (the chain of parent runs is followed); None for a generated market, and for
    a counterfactual of one, whose tape holds the generator's clock from 0."""
    tape = A.manifest(run).get("tape") or {}
    src = tape.get("source", "generator")
    if "t0_ms" not in tape or src == "generator":
        return None
    if src == "run" and depth < 8 and tape.get("run") and (Path(tape["run"]) / "manifest.json").exists():
        return int(tape["t0_ms"]) if _tape_epoch(Path(tape["run"]), depth + 1) is not None else None
    if src == "run":   # the parent is gone: a generated tape starts within the first day of 1970
        return int(tape["t0_ms"]) if int(tape["t0_ms"]) >= 8.64e7 * 365 else None
    return int(tape["t0_ms"])


class Clock:
    """Simulated time -> plot axis: hours (short runs) or days since the first bar; on a recorded
    real tape, calendar dates in UTC. One Clock serves every run of a page (`runs`: one or both
    arms of a compare), so both arms are drawn on the same axis: calendar dates only when every run
    is on a real tape starting at the same instant, else time since the earliest start."""

    def __init__(self, runs: Path | Sequence[Path]):
        runs = [runs] if isinstance(runs, (str, Path)) else list(runs)
        lo, hi = [], []
        for run in runs:
            t = A.market(run).select(pl.col("sim_ms").min().alias("a"), pl.col("sim_ms").max().alias("b")).collect()
            if t["a"][0] is None:
                t = A.scan_runs(run, "heartbeats").select(pl.col("time_ms").min().alias("a"),
                                                         pl.col("time_ms").max().alias("b")).collect()
            lo.append(int(t["a"][0] or 0))
            hi.append(int(t["b"][0] or 0))
        self.t0 = min(lo)
        span = (max(hi) - self.t0) / 3.6e6
        epochs = {_tape_epoch(Path(r)) for r in runs}
        #: epoch ms of simulated time 0 on a real tape shared by every run, else None
        self.epoch0 = epochs.pop() if len(epochs) == 1 else None
        if self.epoch0 is not None:
            self.unit_ms, self.label = 8.64e7, "date (UTC)"
        else:
            self.unit_ms, self.label = (8.64e7, "days") if span > 48 else (3.6e6, "hours")

    @property
    def calendar(self) -> bool:
        return self.epoch0 is not None

    def __call__(self, ms) -> np.ndarray:
        ms = np.asarray(ms, dtype=np.float64)
        if self.calendar:   # matplotlib date numbers: days since its epoch (1970-01-01)
            import matplotlib.dates as mdates
            return (ms + self.epoch0) / self.unit_ms + mdates.date2num(np.datetime64("1970-01-01"))
        return (ms - self.t0) / self.unit_ms

    def axis(self, ax) -> None:
        """Label the time axis (and, on a calendar, tick it with dates)."""
        if self.calendar:
            import matplotlib.dates as mdates
            loc = mdates.AutoDateLocator()
            ax.xaxis.set_major_locator(loc)
            ax.xaxis.set_major_formatter(mdates.ConciseDateFormatter(loc))

    def text(self, ms) -> list[str]:
        """Times as table text: calendar date-times on a real tape, else the axis' unit."""
        if self.calendar:
            from datetime import datetime, timezone
            return [datetime.fromtimestamp((m + self.epoch0) / 1000, tz=timezone.utc).strftime("%Y-%m-%d %H:%M")
                    for m in ms]
        return [f"{v:.2f}" for v in self(ms)]


def _golem_subset(life: pl.DataFrame, cap: int) -> list[int]:
    """Up to `cap` Golems, taken round-robin across Clades so each Clade is shown."""
    by = {c: g["golem_id"].to_list() for c, g in life.sort("golem_id").group_by("clade_id", maintain_order=True)}
    out: list[int] = []
    while len(out) < cap and any(by.values()):
        for c in sorted(by):
            if by[c] and len(out) < cap:
                out.append(by[c].pop(0))
    return sorted(out)


# ---------------------------------------------------------------------------------- sections
def section_price(run: Path, ck: Clock) -> str:
    market = A.market(run).collect()
    if market.is_empty():
        return none("no market table")
    spans = A.regime_spans(run).collect()
    assets = market["asset"].unique(maintain_order=True).to_list()
    fb = (A.scan_runs(run, "heartbeats").filter(pl.col("flashbulb")).select("golem_id", "time_ms", "price")
          .join(A.golem_assets(run).drop("run"), on="golem_id", how="left").collect())
    regimes = spans["regime"].unique(maintain_order=True).to_list()
    colour = {r: REGIME_COLOURS.get(r, EXTRA_COLOURS[i % len(EXTRA_COLOURS)]) for i, r in enumerate(regimes)}
    fig, axes = plt.subplots(len(assets), 1, figsize=(10, 2.2 * len(assets) + 0.4), sharex=True, squeeze=False)
    for ax, asset in zip(axes[:, 0], assets):
        m = market.filter(pl.col("asset") == asset)
        sp = spans.filter(pl.col("asset") == asset)
        for r, a, b in zip(sp["regime"], ck(sp["start_ms"]), ck(sp["end_ms"])):
            ax.axvspan(a, b, color=colour[r], lw=0)
        ax.plot(ck(m["sim_ms"]), m["close"].to_numpy(), color="#1d2330", lw=1)
        f = fb.filter(pl.col("asset") == asset)
        if f.height:
            ax.scatter(ck(f["time_ms"]), f["price"].to_numpy(), marker="*", s=70, color="#ffb000",
                       edgecolor="#7a4b00", lw=0.5, zorder=5, label=f"flashbulb ({f.height})")
            ax.legend(loc="lower left", fontsize=8, frameon=False)
        ax.set_ylabel(f"{asset} close")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colour[r]) for r in regimes]
    axes[0, 0].figure.legend(handles, regimes, loc="upper right", ncol=len(regimes), fontsize=8, frameon=False)
    axes[-1, 0].set_xlabel(ck.label)
    ck.axis(axes[-1, 0])
    return img(fig, "price with regime bands and flashbulbs")


def section_pad(run: Path, ck: Clock, names: dict[int, str]) -> str:
    b = A.pad_bands(run, "1h").collect()
    if b.is_empty():
        return none("no heartbeats")
    fig, axes = plt.subplots(3, 1, figsize=(10, 6), sharex=True)
    for ax, c, title in zip(axes, "pad", ("pleasure", "arousal", "dominance")):
        for ci, g in b.group_by("clade_id", maintain_order=True):
            ci = ci[0]
            x = ck(g["bucket_ms"])
            col = CLADE_COLOURS[ci % len(CLADE_COLOURS)]
            ax.fill_between(x, g[f"{c}_q25"].to_numpy(), g[f"{c}_q75"].to_numpy(), color=col, alpha=0.2, lw=0)
            ax.plot(x, g[f"{c}_median"].to_numpy(), color=col, lw=1.0, label=names.get(ci, f"clade {ci}"))
            ax.plot(x, g[f"mood_{c}_median"].to_numpy(), color=col, lw=2.2, ls="--",
                    label=f"{names.get(ci, f'clade {ci}')} mood")
        ax.axhline(0, color="#999", lw=0.6)
        ax.set_ylim(-1.05, 1.05)
        ax.set_ylabel(title)
    axes[0].legend(fontsize=8, frameon=False, ncol=4, loc="upper left")
    axes[-1].set_xlabel(ck.label + " (emotion: median and inter-quartile band per Clade; mood: dashed median; hourly)")
    ck.axis(axes[-1])
    return img(fig, "emotion and mood (PAD) per Clade")


def section_emotions(run: Path, ck: Clock) -> str:
    s = A.emotion_shares(run, "1h").collect()
    if s.is_empty():
        return none("no heartbeats")
    wide = s.pivot(on="emotion", index="bucket_ms", values="share").sort("bucket_ms").fill_null(0.0)
    order = [e for e in EMOTION_COLOURS if e in wide.columns] + \
            sorted(c for c in wide.columns if c not in EMOTION_COLOURS and c != "bucket_ms")
    fig, ax = plt.subplots(figsize=(10, 2.8))
    ax.stackplot(ck(wide["bucket_ms"]), *[wide[e].to_numpy() for e in order], labels=order,
                 colors=[EMOTION_COLOURS.get(e, "#bbbbbb") for e in order], lw=0)
    ax.set_ylim(0, 1)
    ax.set_ylabel("share of Golems")
    ax.set_xlabel(ck.label)
    ck.axis(ax)
    ax.legend(fontsize=7, ncol=len(order), loc="upper center", bbox_to_anchor=(0.5, -0.25), frameon=False)
    return img(fig, "emotions over time")


def _lock_in_count(ep: pl.DataFrame, edges_ms: np.ndarray) -> np.ndarray:
    """Golems inside a lock-in episode per bucket (difference array; no loop over episodes)."""
    cnt = np.zeros(edges_ms.size + 1)
    if ep.height:
        lo = np.searchsorted(edges_ms, ep["start_ms"].to_numpy(), side="right") - 1
        hi = np.searchsorted(edges_ms, ep["end_ms"].to_numpy(), side="right")
        np.add.at(cnt, np.clip(lo, 0, None), 1)
        np.add.at(cnt, hi, -1)
    return np.cumsum(cnt)[:-1]


def section_bias(run: Path, ck: Clock, threshold: float, min_ticks: int) -> str:
    b = A.bias_over_time(run, "1h").collect()
    if b.is_empty():
        return none("no retrievals with a pool")
    ep = A.lock_in_episodes(run, threshold=threshold, min_ticks=min_ticks).collect()
    ng = A.scan_runs(run, "retrievals").select(pl.col("golem_id").n_unique()).collect().item()
    x = ck(b["bucket_ms"])
    locked = _lock_in_count(ep, b["bucket_ms"].to_numpy())
    fig, axes = plt.subplots(2, 1, figsize=(10, 4.8), sharex=True)
    for ax, m, title in zip(axes, ("mood_congruence", "valence_bias"), ("mood congruence", "retrieval valence bias")):
        if ep.height:   # the lock-in share gets its own axis only when there is something to show
            tw = ax.twinx()
            tw.fill_between(x, 0, locked / max(ng, 1), step="post", color="#ff8c00", alpha=0.18, lw=0)
            tw.set_ylim(0, 1)
            tw.set_ylabel("share locked in", color="#c06a00", fontsize=8)
            ax.set_zorder(tw.get_zorder() + 1)
            ax.patch.set_visible(False)
        ax.fill_between(x, b[f"{m}_q25"].to_numpy(), b[f"{m}_q75"].to_numpy(), color="#4a78c2", alpha=0.25, lw=0)
        ax.plot(x, b[f"{m}_median"].to_numpy(), color="#1f3f7a", lw=1.2, label="median")
        ax.plot(x, b[f"{m}_mean"].to_numpy(), color="#1f3f7a", lw=0.8, ls="--", label="mean")
        ax.axhline(0, color="#999", lw=0.6)
        ax.set_ylabel(title)
    axes[0].axhline(threshold, color="#c06a00", lw=0.8, ls=":", label=f"lock-in threshold {threshold:g}")
    axes[0].legend(fontsize=8, frameon=False, loc="upper left", ncol=3)
    if ep.height:
        axes[-1].set_xlabel(ck.label + f" (orange: share of Golems in a lock-in episode, ≥ {min_ticks} ticks)")
    else:
        axes[-1].set_xlabel(ck.label + f" (no lock-in episode: mood congruence never above {threshold:g} "
                                       f"for {min_ticks} ticks)")
    ck.axis(axes[-1])
    return img(fig, "mood congruence and valence bias with lock-in")


def section_activity(run: Path, ck: Clock) -> str:
    ev = A.event_counts(run, A.ACTIVITY_KINDS, "6h").collect()
    totals = {k: int(ev.filter(pl.col("kind") == k)["n"].sum()) for k in A.ACTIVITY_KINDS}
    if not any(totals.values()):
        return none("; ".join(f"{k}: none recorded" for k in A.ACTIVITY_KINDS))
    fig, axes = plt.subplots(len(A.ACTIVITY_KINDS), 1, figsize=(10, 4.2), sharex=True)
    end = ck(A.scan_runs(run, "heartbeats").select(pl.col("time_ms").max()).collect().item() or ck.t0)
    start = float(ck(ck.t0))
    for ax, k in zip(axes, A.ACTIVITY_KINDS):
        e = ev.filter(pl.col("kind") == k)
        if e.height:
            ax.bar(ck(e["bucket_ms"]), e["n"].to_numpy(), width=ck(ck.t0 + 6 * 3.6e6) - ck(ck.t0), align="edge",
                   color="#4a78c2")
        else:
            ax.text(0.5, 0.5, "none recorded", transform=ax.transAxes, ha="center", va="center", color="#8a93a3")
            ax.set_yticks([])
        ax.set_xlim(start, max(float(end), start + 1e-9))
        ax.set_ylabel(k, rotation=0, ha="right", va="center")
    axes[-1].set_xlabel(ck.label + " (events per 6 h)")
    ck.axis(axes[-1])
    note = ", ".join(f"{k}: {n if n else 'none recorded'}" for k, n in totals.items())
    return img(fig, "curator, contrarian, dream and reflex events") + f'<div class="note">{html.escape(note)}</div>'


def _latency_group(distinct: int) -> pl.Expr:
    """Few distinct latencies: one curve each; otherwise split at the median."""
    lat = pl.col("latency_ms")
    if distinct <= 3:
        return lat.cast(pl.String) + pl.lit(" ms")
    return pl.when(lat <= lat.median()).then(pl.lit("short latency")).otherwise(pl.lit("long latency"))


def _step_response(w: pl.DataFrame, grid_ms: np.ndarray) -> np.ndarray:
    """Mean receiver arousal at each time after the push: a_before until the delivery (push +
    latency), a_after from then on, averaged over the deliveries."""
    lat = w["latency_ms"].to_numpy()[:, None].astype(np.float64)
    before, after = w["a_before"].to_numpy()[:, None], w["a_after"].to_numpy()[:, None]
    return np.where(grid_ms[None, :] >= lat, after, before).mean(axis=0)


def section_contagion(run: Path, ck: Clock) -> str:
    w = A.contagion_waves(run).collect()
    if w.is_empty():
        return none()
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 3.4), gridspec_kw={"width_ratios": [1.4, 1]})
    sig_col = {"THREAT": "#d9413a", "OPPORTUNITY": "#3ddc84", "WISDOM": "#4a78c2"}
    for sig, g in w.group_by("signal", maintain_order=True):
        a1.scatter(ck(g["time_ms"]), g["da"].to_numpy(), s=10, alpha=0.6, color=sig_col.get(sig[0], "#777"),
                   label=f"{sig[0]} ({g.height})")
    a1.axhline(0, color="#999", lw=0.6)
    a1.set_xlabel(ck.label)
    ck.axis(a1)
    a1.set_ylabel("receiver arousal shift at delivery")
    a1.legend(fontsize=8, frameon=False)
    # the wave on its own time scale: seconds from the push (deliveries arrive after the latency)
    span_ms = max(float(w["latency_ms"].max()), 1000.0) * 2.5
    grid = np.linspace(-0.2 * span_ms, span_ms, 241)
    w = w.with_columns(_latency_group(w["latency_ms"].n_unique()).alias("lat"))
    for (dist, lat), g in w.group_by("clade_distance", "lat", maintain_order=True):
        a2.plot(grid / 1000, _step_response(g, grid), lw=1.2, drawstyle="steps-post",
                label=f"{'same' if dist == 0 else 'other'} clade, {lat} ({g.height})")
    a2.axvline(0, color="#999", lw=0.6)
    a2.set_xlabel("seconds from the push")
    a2.set_ylabel("receivers' mean arousal")
    a2.legend(fontsize=8, frameon=False)
    pushes = w.select(pl.struct("sender", "sender_entry").n_unique()).item()
    note = (f"{w.height} deliveries of {pushes} pushes; mean arousal shift {w['da'].mean():+.3f}, "
            f"latency {int(w['latency_ms'].min())}–{int(w['latency_ms'].max())} ms")
    return img(fig, "contagion wave") + f'<div class="note">{html.escape(note)}</div>'


def section_deaths(run: Path, ck: Clock, life: pl.DataFrame, names: dict[int, str]) -> str:
    dead = life.filter(~pl.col("alive"))
    vit = (A.scan_runs(run, "heartbeats").with_columns((pl.col("time_ms") // 3_600_000 * 3_600_000).alias("b"))
           .group_by("clade_id", "b").agg(pl.col("vitality").median()).sort("clade_id", "b").collect())
    fig, ax = plt.subplots(figsize=(10, 2.4))
    for ci, g in vit.group_by("clade_id", maintain_order=True):
        ax.plot(ck(g["b"]), g["vitality"].to_numpy(), color=CLADE_COLOURS[ci[0] % len(CLADE_COLOURS)], lw=1.1,
                label=f"{names.get(ci[0], f'clade {ci[0]}')}: median vitality")
    if dead.height:
        ax.scatter(ck(dead["died_ms"]), dead["final_vitality"].to_numpy(), marker="x", color="#000", s=40,
                   zorder=5, label=f"death ({dead.height})")
    ax.legend(fontsize=8, frameon=False, loc="lower left", ncol=4)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("median vitality")
    ax.set_xlabel(ck.label)
    ck.axis(ax)
    out = img(fig, "vitality and deaths")
    if dead.height:
        col = f"died ({ck.label})"
        t = dead.select("golem_id", pl.col("clade_id").replace_strict(names, default=None, return_dtype=pl.String)
                        .fill_null(pl.col("clade_id").cast(pl.String)).alias("clade"),
                        pl.Series(col, ck.text(dead["died_ms"].to_numpy()), dtype=pl.String),
                        "cause", "final_value", "pnl_pct")
        return out + table_html(t, {"final_value": ",.0f", "pnl_pct": "+.1%"}, ["clade", col, "cause"])
    return out + none("no Golem died")


def section_lives(life: pl.DataFrame, names: dict[int, str]) -> str:
    t = life.select("golem_id", pl.col("clade_id").replace_strict(names, default=None, return_dtype=pl.String)
                    .fill_null(pl.col("clade_id").cast(pl.String)).alias("clade"), "ticks", "final_value", "pnl_pct", "flashbulbs", "dominant_emotion",
                    "n_emotions", pl.col("cause").fill_null("alive"))
    return table_html(t, {"final_value": ",.0f", "pnl_pct": "+.1%"}, ["clade", "dominant_emotion", "cause"])


def section_grimoire(run: Path, golems: list[int], names: dict[int, str] | None = None) -> str:
    gm = A.grimoire_map(run, golems).collect()
    if gm.is_empty():
        return none("no entries")
    n = len(golems)
    pad = 0.08
    xl = (max(-1.05, gm["x"].min() - pad), min(1.05, gm["x"].max() + pad))
    yl = (max(-1.05, gm["y"].min() - pad), min(1.05, gm["y"].max() + pad))
    cols = min(4, n)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.0 * cols, 3.0 * rows + 0.4), squeeze=False, facecolor="#0b0f1a")
    names = names or {}
    for ax in axes.flat:
        ax.set_facecolor("#0b0f1a")
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_xlabel("pleasure of the tag  →", color="#8a93a3", fontsize=8)
        ax.set_ylabel("arousal  →", color="#8a93a3", fontsize=8)
        for s in ax.spines.values():
            s.set_color("#2a3142")
    for ax, g in zip(axes.flat, golems):
        e = gm.filter(pl.col("golem_id") == g)
        x, y = e["x"].to_numpy(), e["y"].to_numpy()
        sal, heat = e["salience"].to_numpy(), e["heat"].to_numpy()
        col = np.array([matplotlib.colors.to_rgb(LABEL_COLOURS.get(lbl, "#9aa0a6")) for lbl in e["label"].to_list()])
        col = col.reshape(-1, 3)
        base = 6 + 110 * sal
        for scale, alpha in ((3.2, 0.035), (1.9, 0.07), (1.0, 0.16)):   # the glow: size follows salience
            ax.scatter(x, y, s=base * scale, c=col, alpha=alpha, lw=0)
        core = 0.55 * col + 0.45                                           # bright core: size follows heat
        ax.scatter(x, y, s=0.5 + 14 * heat, c=core, alpha=0.9, lw=0)
        ax.axhline(0, color="#2a3142", lw=0.5)
        ax.axvline(0, color="#2a3142", lw=0.5)
        ax.set_xlim(*xl)
        ax.set_ylim(*yl)
        clade = names.get(int(e["clade_id"][0]), f"clade {int(e['clade_id'][0])}") if e.height else "?"
        ax.set_title(f"Golem {g} · {clade} · {e.height} entries", color="#c9d1e0", fontsize=9)
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    handles = [plt.Line2D([], [], marker="o", ls="", color=c, label=k) for k, c in LABEL_COLOURS.items()]
    handles += [plt.Line2D([], [], marker="o", ls="", color="#c9d1e0", alpha=0.25, markersize=10,
                           label="glow size = salience"),
                plt.Line2D([], [], marker="o", ls="", color="#ffffff", markersize=4, label="core size = heat")]
    fig.legend(handles=handles, loc="lower center", ncol=6, fontsize=8, frameon=False, labelcolor="#c9d1e0",
               bbox_to_anchor=(0.5, -0.06))
    note = (f"x = pleasure of the entry's tag ({xl[0]:+.2f} to {xl[1]:+.2f}), y = arousal ({yl[0]:+.2f} to "
            f"{yl[1]:+.2f}); untagged entries sit at the origin. Glow size = salience, colour = [S] label, "
            "bright core = heat (log-scaled access count).")
    return img(fig, "Grimoire maps") + f'<div class="note">{html.escape(note)}</div>'


def summary(runs: list[Path], threshold: float, min_ticks: int) -> str:
    bs = A.bias_summary(runs, threshold, min_ticks).collect()
    life = A.life_summaries(runs).group_by("run").agg(
        pl.len().alias("golems"), (~pl.col("alive")).sum().alias("deaths"), pl.col("flashbulbs").sum())
    life = life.join(A.run_pnl(runs).select("run", "pnl_pct"), on="run", how="left")
    ev = A.scan_runs(runs, "events").group_by("run").agg((pl.col("kind") == "contagion").sum().alias("contagion"))
    t = (pl.LazyFrame({"run": A.run_names(runs)}).join(life, on="run", how="left")
         .join(bs.lazy().drop("golems"), on="run", how="left").join(ev, on="run", how="left")
         .select("run", "golems", "deaths", "pnl_pct", "flashbulbs", "contagion", "mean_mood_congruence",
                 "mean_valence_bias", "lock_in_episodes", "lock_in_share").collect())
    if t.height == 2:   # a compare: B - A of every number
        d = t.select(pl.lit("B − A").alias("run"), *[pl.col(c).cast(pl.Float64).last()
                                                     - pl.col(c).cast(pl.Float64).first() for c in t.columns[1:]])
        t = pl.concat([t, d], how="vertical_relaxed")
    return table_html(t, {"pnl_pct": "+.2%", "lock_in_share": ".1%", "mean_mood_congruence": "+.3f",
                          "mean_valence_bias": "+.3f"}, ["run"])


# ---------------------------------------------------------------------------------- page
def _header(run: Path) -> str:
    m = A.manifest(run)
    sc = m.get("scenario") or {}
    n = sum(g.get("count", 0) for g in sc.get("golems", []))
    bits = [f"scenario <b>{html.escape(str(sc.get('name', '?')))}</b>", f"seed {m.get('seed', '?')}",
            f"{n} Golems", f"status {html.escape(str(m.get('status', '?')))}"]
    if sc.get("description"):
        bits.append(html.escape(sc["description"]))
    return _status_banner(m) + f'<div class="sub">{html.escape(run.name)}: ' + " · ".join(bits) + "</div>"


def _status_banner(m: dict) -> str:
    """A run that did not complete says so first: the page shows only what it wrote before it stopped."""
    status = m.get("status")
    if status == "complete":
        return ""
    at = m.get("stopped_at_s")
    when = f" at t = {at / 3600:,.2f} h" if isinstance(at, (int, float)) else ""
    why = {"failed": f"FAILED{when}: {m.get('error', 'no error recorded')}",
           "interrupted": f"INTERRUPTED{when} ({m.get('signal') or m.get('error') or 'stopped'}); "
                          "golem-sim resume continues it",
           "running": "RUNNING or killed: the manifest was not closed; golem-sim resume continues a killed run"}
    text = why.get(status, f"status {status}")
    return (f'<div class="status" style="background:#fde2e2;color:#8a1c1c;padding:8px 12px;border-radius:4px;'
            f'margin:8px 0;font-weight:600">This run {html.escape(str(text))}. The figures show the tables written '
            'before it stopped.</div>')


def build_html(run: str | Path, compare: str | Path | None = None, threshold: float = 0.4,
               min_ticks: int = 12, max_golems: int = MAX_GOLEMS) -> str:
    """The report page as a string: one column per run (two with `compare`)."""
    runs = [Path(run)] + ([Path(compare)] if compare else [])
    for r in runs:
        A.run_dirs(r)  # raises a clear error for a missing run
    per: list[dict[str, str]] = []
    figures: list[Figures] = []
    ck = Clock(runs)   # both arms on one time axis
    for r in runs:
        figures.append(Figures())
        _FIGURES.append(figures[-1])
        try:
            per.append(_sections(r, threshold, min_ticks, max_golems, ck))
        finally:
            _FIGURES.pop()
    overlay = ""
    if len(runs) == 2:
        share_y(*figures)
        overlay = section_overlay(runs, Clock(runs))
    per = [{k: f.render(v) for k, v in s.items()} for s, f in zip(per, figures)]
    return _page(runs, per, threshold, min_ticks, section_lockin(runs), overlay)


#: the series the compare view overlays, (label, heartbeat expression per bucket)
OVERLAY = (("mean mood P", pl.col("mood_p").mean()), ("mean emotion A", pl.col("a").mean()))


def overlay_series(runs: list[Path], every: str | int = "1h") -> pl.DataFrame:
    """Both arms per time bucket on their shared simulated clock: the book's P&L % (`book_pnl`:
    Σ value at each Golem's last heartbeat in or before the bucket / Σ initial book - 1, after that
    tick's fees, the P&L of `analysis.golem_pnl`), the OVERLAY means over awake heartbeats and the
    mean mood congruence (retrievals that chose), one row per (run, bucket_ms)."""
    ms = A._ms(every)
    out = []
    for r, name in zip(runs, A.run_names(runs)):
        cap = A.golem_pnl(r).select(pl.col("capital").sum()).collect().item()
        hb = A.scan_table(r, "heartbeats").with_columns(A._bucket("time_ms", ms).alias("bucket_ms"))
        val = (hb.group_by("golem_id", "bucket_ms").agg(pl.col("value").sort_by("time_ms").last())
               .collect().pivot("golem_id", index="bucket_ms", values="value").sort("bucket_ms"))
        val = val.select("bucket_ms", (pl.sum_horizontal(pl.exclude("bucket_ms").forward_fill()) / cap - 1)
                         .alias("book_pnl"))
        # a Golem not yet ticked holds its capital; one that died keeps its last value (forward fill)
        awake = hb.filter(pl.col("state_path") != "DREAMING").group_by("bucket_ms").agg(
            *[e.alias(lbl) for lbl, e in OVERLAY]).collect()
        mc = (A.mood_congruence(r).with_columns(A._bucket("time_ms", ms).alias("bucket_ms")).group_by("bucket_ms")
              .agg(pl.col("mood_congruence").mean()).collect())
        out.append(val.join(awake, on="bucket_ms", how="full", coalesce=True)
                   .join(mc, on="bucket_ms", how="left").select(pl.lit(name).alias("run"), pl.all()))
    return pl.concat(out, how="vertical_relaxed").sort("run", "bucket_ms")


def section_overlay(runs: list[Path], ck: Clock) -> str:
    """Compare view: both arms on one time axis (one Clock), each series with B - A below it
    (buckets both arms have), so where and how far B departs from A reads off one chart."""
    s = overlay_series(runs)
    na, nb = A.run_names(runs)
    series = [("book P&L %", "book_pnl", 100), *[(lbl, lbl, 1) for lbl, _ in OVERLAY],
              ("mood congruence", "mood_congruence", 1)]
    fig, axes = plt.subplots(2 * len(series), 1, figsize=(10, 2.0 * len(series) + 1), sharex=True,
                             gridspec_kw={"height_ratios": [2, 1] * len(series)})
    wide = s.pivot("run", index="bucket_ms", values=[c for _, c, _ in series]).sort("bucket_ms")
    x = ck(wide["bucket_ms"].to_numpy())
    for i, (label, col, scale) in enumerate(series):
        a = wide[f"{col}_{na}"].cast(pl.Float64).to_numpy() * scale
        b = wide[f"{col}_{nb}"].cast(pl.Float64).to_numpy() * scale
        ax, dx = axes[2 * i], axes[2 * i + 1]
        ax.plot(x, a, color=CLADE_COLOURS[0], lw=1.2, label=f"A: {na}")
        ax.plot(x, b, color=CLADE_COLOURS[1], lw=1.2, label=f"B: {nb}")
        ax.set_ylabel(label, fontsize=8)
        dx.axhline(0, color="#999", lw=0.6)
        dx.plot(x, b - a, color="#333", lw=1)
        dx.set_ylabel("B − A", fontsize=8)
        if i == 0:
            ax.legend(fontsize=7, frameon=False, ncol=2, loc="lower left", bbox_to_anchor=(0, 1.0))
    ck.axis(axes[-1])
    axes[-1].set_xlabel(ck.label + " (one clock for both runs; hourly buckets)")
    return img(fig, "both runs overlaid on one time axis, with B minus A")


def _sections(r: Path, threshold: float, min_ticks: int, max_golems: int, ck: Clock | None = None) -> dict[str, str]:
    ck, names = ck or Clock(r), A.clade_names(r)
    life = A.life_summaries(r).collect()
    golems = _golem_subset(life, max_golems)
    s: dict[str, str] = {}
    builders: list[tuple[str, Callable[[], str]]] = [
        ("Price, regimes and flashbulbs", lambda: section_price(r, ck)),
        ("Emotion and mood per Clade", lambda: section_pad(r, ck, names)),
        ("Emotions", lambda: section_emotions(r, ck)),
        ("Mood congruence and retrieval valence bias", lambda: section_bias(r, ck, threshold, min_ticks)),
        ("Curator, contrarian, dream and reflex", lambda: section_activity(r, ck)),
        ("Contagion wave", lambda: section_contagion(r, ck)),
        ("Deaths", lambda: section_deaths(r, ck, life, names)),
        ("Golems", lambda: section_lives(life, names)),
        ("Grimoire map", lambda: f'<div class="note">{len(golems)} of {life.height} Golems</div>'
                                 + section_grimoire(r, golems, names)),
    ]
    for title, build in builders:
        if _FIGURES:
            _FIGURES[-1].section = title
        s[title] = build()
    return s


#: a fall this deep within 3 h is a crash whose recovery the lock-in panel follows (SPEC §2.9)
LOCKIN_DEPTH = -0.10


def section_lockin(runs: list[Path]) -> str:
    """The holders' mood against the price through a crash and its recovery (SPEC §2.9), every run on
    one axis of hours since its crash (on vs off under --compare): the mean mood P of the holders
    (`analysis.holder_mood`), the asset's close relative to its pre-crash level, the price's full
    recovery (dotted) and the mood's (solid marker), with the figures of `analysis.mood_recovery` in
    the caption. None without a fall of 10 % within 3 h."""
    eps = [A.crash_episode(r).collect().row(0, named=True) for r in runs]
    if not any(e["depth"] <= LOCKIN_DEPTH for e in eps):
        return none(f"no crash of {-LOCKIN_DEPTH:.0%} or more within 3 h to follow")
    fig, (ax, axp) = plt.subplots(2, 1, figsize=(10, 4.6), sharex=True, gridspec_kw={"height_ratios": [2, 1]})
    notes = []
    for i, (r, e) in enumerate(zip(runs, eps)):
        if e["depth"] > LOCKIN_DEPTH:
            notes.append(f"{html.escape(r.name)}: no crash of {-LOCKIN_DEPTH:.0%} within 3 h")
            continue
        col = CLADE_COLOURS[i % len(CLADE_COLOURS)]
        h = A.holder_mood(r).collect()
        rec = A.mood_recovery(r).collect().row(0, named=True)
        x = (h["bucket_ms"].to_numpy() - e["crash_ms"]) / 3.6e6
        ax.plot(x, h["mood_p"].to_numpy(), color=col, lw=2, label=f"{r.name}: holders' mood P")
        ax.plot(x, h["p"].to_numpy(), color=col, lw=0.8, alpha=0.5, label=f"{r.name}: holders' emotion P")
        if rec["pre_mood_p"] is not None:
            ax.axhline(rec["pre_mood_p"] - 0.1, color=col, lw=0.8, ls="--")
        axp.plot(x, h["close"].to_numpy() / e["pre_price"], color=col, lw=1)
        if e["price_recovered_ms"] is not None:
            for a in (ax, axp):
                a.axvline((e["price_recovered_ms"] - e["crash_ms"]) / 3.6e6, color=col, lw=0.8, ls=":")
        if rec["mood_recovered_ms"] is not None:
            ax.axvline((rec["mood_recovered_ms"] - e["crash_ms"]) / 3.6e6, color=col, lw=1.6)
        if rec["mood_recovery_s"] is None:
            notes.append(f"{html.escape(r.name)}: {e['asset']} fell {-e['depth']:.1%} and the price never got back "
                         "to its pre-crash level")
        else:
            share = rec["captured_share"]
            notes.append(f"{html.escape(r.name)}: {e['asset']} fell {-e['depth']:.1%} and was back "
                         f"{e['price_recovery_s'] / 3600:.1f} h after the crash began; the holders' mood was back "
                         f"within 0.1 of its pre-crash {rec['pre_mood_p']:+.2f} "
                         f"{rec['mood_recovery_s'] / 3600:.1f} h after the price{' (never: capped at the end)' if rec['capped'] else ''}; "
                         f"they captured {'n/a' if share is None else f'{share:.0%}'} of the recovery's gain")
    ax.axhline(0, color="#999", lw=0.6)
    ax.set_ylabel("mood / emotion P")
    ax.legend(fontsize=7, frameon=False, ncol=2, loc="lower left", bbox_to_anchor=(0, 1.0))
    axp.set_ylabel("close / pre-crash")
    axp.set_xlabel("hours since the crash began (dotted: the price's recovery; solid: the mood's; dashed: "
                   "pre-crash mood - 0.1)")
    return img(fig, "holders' mood against the price through the crash and its recovery") + \
        "".join(f'<div class="note">{n}</div>' for n in notes)


def _short(v) -> str:
    text = v if isinstance(v, str) else __import__("json").dumps(v, sort_keys=True, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def what_changed(a: Path, b: Path) -> str:
    """What run B changed against run A, in words: a counterfactual's --set list (and its parent),
    else the differences of seed, scenario keys and resolved config keys between the manifests."""
    ma, mb = A.manifest(a), A.manifest(b)
    parent = (mb.get("parent") or {}).get("path") if isinstance(mb.get("parent"), dict) else None
    bits = []
    if mb.get("changes"):
        src = f"a counterfactual of {Path(parent).name}" if parent else "a counterfactual"
        bits.append(f"{src} on the same tape, changing {', '.join(mb['changes'])}")
    else:
        if ma.get("seed") != mb.get("seed"):
            bits.append(f"seed {ma.get('seed')} → {mb.get('seed')}")
        sa, sb = ma.get("scenario") or {}, mb.get("scenario") or {}
        for k in sorted(set(sa) | set(sb)):
            if k != "description" and sa.get(k) != sb.get(k):
                bits.append(f"{k}: {_short(sa.get(k))} → {_short(sb.get(k))}")
        ca, cb = ma.get("config") or {}, mb.get("config") or {}
        for k in sorted(set(ca) | set(cb)):
            if ca.get(k) != cb.get(k):
                bits.append(f"{k}: {_short(ca.get(k))} → {_short(cb.get(k))}")
    return "; ".join(bits) if bits else "no difference in seed, scenario or config (same inputs)"


def _page(runs: list[Path], per: list[dict[str, str]], threshold: float, min_ticks: int, lockin: str = "",
          overlay: str = "") -> str:
    cls = "c2" if len(runs) == 2 else "c1"
    title = "golem-sim report: " + " vs ".join(r.name for r in runs)
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
             f"<style>{CSS}</style></head><body>", f"<h1>{html.escape(title)}</h1>"]
    parts += [_header(r) for r in runs]
    if len(runs) == 2:
        parts.append(f'<div class="sub"><b>{html.escape(runs[1].name)}</b> vs <b>{html.escape(runs[0].name)}</b>: '
                     f"{html.escape(what_changed(runs[0], runs[1]))}. Charts side by side share their y-axes.</div>")
    parts += ["<h2>Summary</h2>", summary(runs, threshold, min_ticks),
              f'<div class="note">lock-in: mood congruence &gt; {threshold:g} for ≥ {min_ticks} consecutive ticks; '
              "mood congruence = served minus pool mean emotional factor (0 = no mood bias).</div>"]
    if overlay:
        parts += ["<h2>B against A on one time axis</h2>", overlay]
    if lockin:
        parts += ["<h2>Lock-in: the holders' mood through the crash and its recovery</h2>", lockin]
    for key in per[0]:
        parts.append(f"<h2>{html.escape(key)}</h2><div class='row {cls}'>")
        for r, s in zip(runs, per):
            head = f"<h3>{html.escape(r.name)}</h3>" if len(runs) == 2 else ""
            parts.append(f"<div class='col'>{head}{s[key]}</div>")
        parts.append("</div>")
    parts += [LOAD_SCRIPT, "</body></html>"]
    return "\n".join(parts)


def render_report(run: str | Path, out: str | Path | None = None, compare: str | Path | None = None,
                  **kw) -> Path:
    """Write the report (default: RUN/report.html) and return its path. It replaces a regular file
    only: a link, FIFO or device of that name is refused (sim.rundir.write_out_file)."""
    from sim.rundir import check_out_file, write_out_file
    out = Path(out) if out else Path(run) / "report.html"
    check_out_file(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_out_file(out, build_html(run, compare, **kw).encode("utf-8"))
    return out


__all__ = ["build_html", "render_report", "png_data_uri", "table_html"]
