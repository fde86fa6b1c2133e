"""Report charts: legends and names, no empty lock-in axis, compare reports on shared
y-axes that say what changed, calendar dates on real tapes, the contagion wave in seconds.

The figures are caught before they become PNGs (sim.report.png_data_uri is swapped for a
recorder), so each test reads the matplotlib objects the page is drawn from."""
from __future__ import annotations

from pathlib import Path

import matplotlib.dates as mdates
import numpy as np
import polars as pl
import pytest

import sim.report as R
from sim import analysis as A
from conftest import shared_text_run
from test_report import CALM, SMALL_CRASH


@pytest.fixture()
def figs(monkeypatch):
    caught: list = []

    def record(fig):
        caught.append(fig)
        return "data:image/png;base64,"
    monkeypatch.setattr(R, "png_data_uri", record)
    yield caught
    import matplotlib.pyplot as plt
    plt.close("all")


def by_title(figs, alt_part: str) -> list:
    """The caught figures whose axes texts mention `alt_part` (helper for readability)."""
    return [f for f in figs if any(alt_part in (ax.get_xlabel() + ax.get_ylabel()) for ax in f.axes)]


# the same runs as tests/test_report.py's (conftest.shared_text_run)
@pytest.fixture(scope="module")
def crash(tmp_path_factory) -> Path:
    return shared_text_run(tmp_path_factory, SMALL_CRASH, "crash")


@pytest.fixture(scope="module")
def calm(tmp_path_factory) -> Path:
    return shared_text_run(tmp_path_factory, CALM, "calm")


def test_deaths_chart_has_a_legend_with_clade_names(crash, figs):
    R.build_html(crash)
    fig = next(f for f in figs if f.axes[0].get_ylabel() == "median vitality")
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == ["longs: median vitality", "frail: median vitality", "death (2)"]


def test_grimoire_maps_name_the_clade_and_label_the_axes(crash, figs):
    R.build_html(crash)
    fig = next(f for f in figs if any("entries" in ax.get_title() for ax in f.axes))
    titles = [ax.get_title() for ax in fig.axes if ax.get_visible()]
    assert all(" · longs · " in t or " · frail · " in t for t in titles), titles
    assert not any("clade 0" in t or "clade 1" in t for t in titles)
    ax = fig.axes[0]
    assert "pleasure" in ax.get_xlabel() and "arousal" in ax.get_ylabel()
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert {"success", "frustration", "risk", "neutral", "glow size = salience", "core size = heat"} <= set(legend)


def test_lock_in_axis_only_when_there_is_lock_in(crash, figs):
    def bias_fig():
        return next(f for f in figs if any(ax.get_ylabel() == "mood congruence" for ax in f.axes))
    assert A.lock_in_episodes(crash, threshold=0.99, min_ticks=50).collect().height == 0
    R.build_html(crash, threshold=0.99, min_ticks=50)
    f = bias_fig()
    assert len(f.axes) == 2                                        # no twin axes
    assert not any(ax.get_ylabel() == "share locked in" for ax in f.axes)
    assert "no lock-in episode" in f.axes[-1].get_xlabel()
    figs.clear()
    assert A.lock_in_episodes(crash, threshold=-1.0, min_ticks=1).collect().height > 0
    R.build_html(crash, threshold=-1.0, min_ticks=1)
    f = bias_fig()
    assert sum(ax.get_ylabel() == "share locked in" for ax in f.axes) == 2


def test_compare_shares_y_axes_and_says_what_changed(crash, calm, figs):
    made = []
    real = R.Figures.add

    def add(self, fig, alt):   # which run and section each figure belongs to
        made.append((self, self.section, fig))
        return real(self, fig, alt)
    R.Figures.add = add
    try:
        text = R.build_html(crash, calm)
    finally:
        R.Figures.add = real
    runs = list(dict.fromkeys(m[0] for m in made))
    a = [f for o, _, f in made if o is runs[0]]
    sec_b = [(s, f) for o, s, f in made if o is runs[1]]
    pairs = 0
    for (sa, fa) in [(s, f) for o, s, f in made if o is runs[0]]:
        match = [f for s, f in sec_b if s == sa]
        if len(match) != 1:
            continue
        fb = match[0]
        xa, xb = [x for x in fa.axes if x.get_visible()], [x for x in fb.axes if x.get_visible()]
        if len(xa) != len(xb):
            continue
        for p, q in zip(xa, xb):
            assert p.get_ylim() == pytest.approx(q.get_ylim())
            pairs += 1
    assert pairs >= 10
    price_a = next(f for f in a if f.axes[0].get_ylabel().endswith(" close"))
    eth_a = pl.read_parquet(crash / "market" / "*.parquet").filter(pl.col("asset") == price_a.axes[0].get_ylabel()
                                                                    .split()[0])
    eth_b = pl.read_parquet(calm / "market" / "*.parquet").filter(pl.col("asset") == price_a.axes[0].get_ylabel()
                                                                   .split()[0])
    lo, hi = price_a.axes[0].get_ylim()
    assert lo <= min(eth_a["close"].min(), eth_b["close"].min()) and hi >= max(eth_a["close"].max(), eth_b["close"].max())
    assert "seed 5 → 1" in text and "duration: 2d → 12h" in text and "share their y-axes" in text


def test_compare_with_a_counterfactual_names_the_change(crash, tmp_path, figs):
    from sim.replay import counterfactual
    cf = counterfactual(crash, ["clade.enabled=false"], tmp_path / "cf").run_dir
    text = R.build_html(crash, cf)
    assert "a counterfactual of crash on the same tape, changing clade.enabled=false" in text


@pytest.fixture(scope="module")
def tape_run(tmp_path_factory) -> Path:
    """Two days of hourly bars recorded from 2020-03-11, a -20 % bar on the 12th."""
    from sim.tapes import import_tape, write_tape
    d = tmp_path_factory.mktemp("tape")
    t0 = 1583884800000   # 2020-03-11 00:00 UTC
    n = 60
    close = 8000 * np.exp(np.cumsum(np.random.default_rng(3).normal(0, 0.004, n)))
    close[30:] *= 0.8
    opn = np.r_[close[0], close[:-1]]
    pl.DataFrame({"timestamp": t0 + 3_600_000 * np.arange(n), "open": opn, "high": np.maximum(opn, close) * 1.001,
                  "low": np.minimum(opn, close) * 0.999, "close": close}).write_csv(d / "bars.csv")
    write_tape(import_tape([d / "bars.csv"], time_unit="ms"), d / "t.parquet")
    text = (f"name: rt\nduration: 2d\nseed: 2\nmarket: {{tape: {{path: {d / 't.parquet'}}}}}\n"
            "golems:\n  - {count: 3, clade: btc, asset: BTC, interval: 1h}\n")
    return shared_text_run(tmp_path_factory, text, "rt")


def test_real_tape_reports_show_calendar_dates(tape_run, figs):
    R.build_html(tape_run)
    price = next(f for f in figs if f.axes[0].get_ylabel() == "BTC close")
    ax = price.axes[-1]
    assert isinstance(ax.xaxis.get_major_formatter(), mdates.ConciseDateFormatter)
    x = price.axes[0].get_lines()[0].get_xdata()
    first, last = mdates.num2date(x.min()), mdates.num2date(x.max())
    # the first bar (open 2020-03-11 00:00) is known at its close, 01:00; two days later the last
    assert first.strftime("%Y-%m-%d %H:%M") == "2020-03-11 01:00"
    assert last.strftime("%Y-%m-%d %H:%M") == "2020-03-13 01:00"
    assert ax.get_xlabel() == "date (UTC)"


def test_contagion_wave_in_seconds(crash, figs):
    w = A.contagion_waves(crash).collect()
    assert w.height > 0 and set(w["latency_ms"].unique()) == {2000}
    R.build_html(crash)
    fig = next(f for f in figs if any(ax.get_xlabel() == "seconds from the push" for ax in f.axes))
    ax = next(ax for ax in fig.axes if ax.get_xlabel() == "seconds from the push")
    line = ax.get_lines()[0]
    x, y = line.get_xdata(), line.get_ydata()
    step = x[np.flatnonzero(np.diff(y))[0] + 1]
    assert step == pytest.approx(2.0, abs=0.05)           # the receivers' arousal moves at the 2 s latency
    # before the delivery: the receivers' mean arousal before; after: their mean arousal after
    g = w.filter(pl.col("clade_distance") == w["clade_distance"][0])
    assert y[0] == pytest.approx(g["a_before"].mean()) and y[-1] == pytest.approx(g["a_after"].mean())


def test_compare_of_a_counterfactual_overlays_both_arms_on_one_clock(crash, tmp_path, figs):
    """A counterfactual of a generated market replays a recorded tape: both arms must still be drawn
    in the same unit from the same origin (not days on one side and 1970 dates on the other), the
    overlay must carry both arms and B - A, and the summary a B - A row."""
    from sim.replay import counterfactual
    cf = counterfactual(crash, ["clade.enabled=false"], tmp_path / "cf").run_dir
    ck = R.Clock([crash, cf])
    assert not ck.calendar and R.Clock(cf).calendar is False and ck.label == "hours"
    text = R.build_html(crash, cf)
    price = [f for f in figs if f.axes[0].get_ylabel().endswith(" close")]
    assert len(price) == 2
    xs = [f.axes[0].get_lines()[0].get_xdata() for f in price]
    assert xs[0].min() == pytest.approx(xs[1].min()) and xs[0].max() == pytest.approx(xs[1].max())
    assert 0 <= xs[0].min() < 1 and 40 < xs[0].max() < 49          # hours of a 2-day run, not dates
    over = next(f for f in figs if any(ax.get_ylabel() == "book P&L %" for ax in f.axes))
    ax = next(a for a in over.axes if a.get_ylabel() == "book P&L %")
    diff = over.axes[over.axes.index(ax) + 1]
    (xa, a), (_, b) = [(ln.get_xdata(), ln.get_ydata()) for ln in ax.get_lines()]
    assert diff.get_ylabel() == "B − A" and np.allclose(diff.get_lines()[-1].get_ydata(), b - a, equal_nan=True)
    # the overlay's last point is each arm's P&L by the one definition
    for run, y in ((crash, a), (cf, b)):
        assert y[-1] == pytest.approx(100 * A.run_pnl(run).collect()["pnl_pct"][0])
    assert "B against A on one time axis" in text and ">B − A<" in text
    import re
    row = re.search(r"<tr><td class=\"l\">B − A</td>(.*?)</tr>", text).group(1)
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", row)          # golems, deaths, pnl_pct, flashbulbs, ...
    fb = [A.life_summaries(r).collect()["flashbulbs"].sum() for r in (crash, cf)]
    assert cells[3] == format(float(fb[1]) - float(fb[0]), ".3g")    # unsigned counts subtract as signed
    pnl = [A.run_pnl(r).collect()["pnl_pct"][0] for r in (crash, cf)]
    assert cells[2] == f"{pnl[1] - pnl[0]:+.2%}"
    assert ".col table,body>table{display:block;max-width:100%;overflow-x:auto}" in text
