"""Real market tapes as the market: import-tape, tape_from_file, the clock, real episodes."""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from conftest import cli

from sim.run import execute
from sim.tapes import read_tape

ROOT = Path(__file__).resolve().parents[1]
BTC = Path(__file__).resolve().parents[2] / "shared" / "data" / "btc"
H = 3_600_000


def ms(*args) -> int:
    return int(datetime(*args, tzinfo=timezone.utc).timestamp() * 1000)


CRASH_AT = ms(2021, 1, 2, 5)   # open time of the -15 % bar


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    """Five days of hourly ETH bars in a foreign layout (epoch seconds, capitalised names, a gas
    series in its own file), with one -15 % bar at 2021-01-02 05:00, imported with the CLI."""
    d = tmp_path_factory.mktemp("tape")
    rng = np.random.default_rng(1)
    t = ms(2021, 1, 1) + H * np.arange(120)
    close = 1000 * np.exp(np.cumsum(rng.normal(0, 0.004, 120)))
    opn = np.r_[1000.0, close[:-1]]
    k = int((CRASH_AT - t[0]) // H)
    close[k:] *= 0.85 * opn[k] / close[k]
    opn = np.r_[1000.0, close[:-1]]
    high, low = np.maximum(opn, close) * 1.001, np.minimum(opn, close) * 0.999
    pl.DataFrame({"Date": t // 1000, "Open": opn, "High": high, "Low": low, "Close": close,
                  "Vol": rng.uniform(10, 20, 120)}).write_csv(d / "eth.csv")
    pl.DataFrame({"ts": t[::6] // 1000, "gwei": 40.0 + np.arange(20)}).write_csv(d / "gas.csv")
    code, out = cli("import-tape", d / "eth.csv", "--asset", "ETH", "--time-col", "Date", "--time-unit", "s",
                    "--col", "open=Open", "--col", "high=High", "--col", "low=Low", "--col", "close=Close",
                    "--col", "volume=Vol", "--out", d / "eth.parquet")
    assert code == 0, out
    return d, t, opn, close


def scenario(d: Path, extra: str = "", start: str = "2021-01-02T00:00", duration: str = "1d") -> Path:
    f = d / f"s{abs(hash((extra, start, duration)))}.yaml"
    f.write_text(f"""name: synth
duration: {duration}
seed: 4
market:
  tape: {{path: {d / 'eth.parquet'}, start: "{start}"}}
golems:
  - {{count: 3, clade: c, asset: ETH, interval: 20m}}
{extra}""")
    return f


def test_import_tape_cli(synth, tmp_path):
    d, t, _, close = synth
    df = read_tape(d / "eth.parquet")
    assert df.height == 120 and df["bar_ms"][0] == H and df["asset"][0] == "ETH"
    assert np.allclose(df["close"].to_numpy(), close) and df["time_ms"][0] == t[0]
    # an extra series joined as-of backward, files in any order with --order sort
    rows = pl.read_csv(d / "eth.csv")
    rows.reverse().write_csv(tmp_path / "rev.csv")
    code, out = cli("import-tape", tmp_path / "rev.csv", "--time-col", "Date", "--time-unit", "s", "--order", "sort",
                    *sum((["--col", f"{c}={c.title()}"] for c in ("open", "high", "low", "close")), []),
                    "--extra", f"gas={d / 'gas.csv'}:gwei@ts", "--out", tmp_path / "g.parquet")
    assert code == 0, out
    g = read_tape(tmp_path / "g.parquet")
    assert g["gas"].to_list()[:7] == [40.0] * 6 + [41.0]
    for args, expect in ((["--order", "bogus"], "--order bogus"),
                         (["--extra", "gas=nofile.csv"], "expected name=path:column"),
                         (["--extra", "fees=x.csv:y"], "expected gas, tvl or funding_rate"),
                         (["--col", "open"], "expected canonical=column")):
        code, out = cli("import-tape", d / "eth.csv", "--time-col", "Date", "--time-unit", "s", *args,
                        "--out", tmp_path / "bad.parquet")
        assert code == 2, out
        assert expect in out and "Traceback" not in out
    code, out = cli("import-tape", d / "eth.csv", "--out", tmp_path / "bad.parquet")   # 'Date' found, epoch seconds
    assert code == 2 and "'Date'" in out and "--time-unit s" in out and "Traceback" not in out


def test_clock_reads_only_closed_bars(synth, tmp_path):
    d, t, opn, close = synth
    res = execute(scenario(d), tmp_path / "run", environ={})
    start = ms(2021, 1, 2)
    assert res.manifest["tape"]["t0_ms"] == start + H and res.manifest["tape"]["bar_ms"] == H
    hb = pl.read_parquet(tmp_path / "run" / "heartbeats" / "*.parquet")
    # sim time 0 = close of the start bar; a tick at time s sees the last bar closed at or before t0 + s
    now = res.manifest["tape"]["t0_ms"] + hb["time_ms"].to_numpy()
    last_closed = np.searchsorted(t + H, now, side="right") - 1
    assert np.array_equal(hb["price"].to_numpy(), close[last_closed])
    assert hb["price"][0] == close[np.searchsorted(t, start)]
    m = pl.read_parquet(tmp_path / "run" / "market" / "*.parquet")
    assert m["time_ms"][0] == start and m["time_ms"][-1] == start + 24 * H   # bars open..(closed by the end)
    # the crash bar is dated at its close and seen as a high probe from then on, not before
    ev = pl.read_parquet(tmp_path / "run" / "tape_events" / "*.parquet")
    crash = ev.filter(pl.col("kind") == "crash_bar")
    assert crash["time_ms"].to_list() == [CRASH_AT + H] and crash["severity"][0] == "high"
    assert crash["tokens"][0].startswith("eth crash-bar") and crash["impact"][0] == pytest.approx(np.log(0.85))
    high = hb.filter(pl.col("probe") == "high")["time_ms"].to_numpy() + res.manifest["tape"]["t0_ms"]
    assert high.min() == CRASH_AT + H and high.max() < CRASH_AT + 2 * H
    assert set(m["regime"]) <= {"calm", "bull", "bear", "crash"}
    assert m.filter(pl.col("time_ms") == CRASH_AT)["regime"][0] == "crash"
    # gas absent from the file: the scenario's base gas, constant
    assert set(m["gas"]) == {30.0}
    # the recorded tape replays to the same run
    code, out = cli("replay", tmp_path / "run", "--verify")
    assert code == 0, out


def test_derive_regimes_rule():
    from sim.tape_market import REGIMES, derive_regimes
    T, bar = 200, 2 * H
    rng = np.random.default_rng(0)
    r = rng.normal(0, 0.005, T)
    r[100:112] = 0.01          # a strong day up: bull
    r[150] = -0.08             # one -8 % bar: crash
    close = 100 * np.exp(np.cumsum(r))
    opn = np.r_[100.0, close[:-1]]
    reg = derive_regimes(opn, close, bar, -0.05)
    names = [REGIMES[i] for i in reg]
    assert names[111] == "bull" and names[150] == "crash"
    assert names[:12] == ["calm"] * 12         # no day of history yet
    # no look-ahead: a bar's regime does not change when later bars change
    close2 = close.copy()
    close2[160:] *= 0.5
    assert np.array_equal(derive_regimes(opn, close2, bar, -0.05)[:160], reg[:160])


@pytest.mark.parametrize("kind", ["past_end", "late_start", "bad_start", "asset", "not_parquet", "missing"])
def test_bad_tape_input_is_one_line_exit_2(synth, tmp_path, kind):
    d = synth[0]
    if kind == "past_end":
        f, expect = scenario(d, duration="5d"), "past the tape's last bar close"
    elif kind == "late_start":
        f, expect = scenario(d, start="2022-01-01"), "is after the tape's last bar"
    elif kind == "bad_start":
        f, expect = scenario(d, start="yesterday"), "market.tape.start"
    elif kind == "asset":
        f = scenario(d, extra="  - {count: 1, asset: BTC}\n")
        expect = "'BTC' is not in the tape"
    elif kind == "not_parquet":
        (tmp_path / "junk.parquet").write_text("not a tape")
        f = scenario(d)
        f.write_text(f.read_text().replace(str(d / "eth.parquet"), str(tmp_path / "junk.parquet")))
        expect = "not a readable Parquet file"
    else:
        f = scenario(d)
        f.write_text(f.read_text().replace(str(d / "eth.parquet"), str(tmp_path / "none.parquet")))
        expect = "none.parquet: file not found; expected a Parquet tape file"
    code, out = cli("run", f, "--out", tmp_path / "out", "-q")
    assert code == 2, out
    assert expect in out and "Traceback" not in out and len(out.strip().splitlines()) <= 2


# ------------------------------------------------------------------------------ real BTC data
needs_btc = pytest.mark.skipif(not (BTC / "BTC_USDT_2h.csv").exists(), reason="shared BTC data absent")


@pytest.fixture(scope="module")
def btc_tape(tmp_path_factory):
    out = tmp_path_factory.mktemp("btc") / "BTC_USDT_2h.parquet"
    code, msg = cli("import-tape", BTC / "BTC_USDT_2h.csv", "--asset", "BTC",
                    "--extra", f"funding_rate={BTC / 'funding_rate_BTCUSDT.csv'}:funding_rate", "--out", out)
    assert code == 0, msg
    return out


@needs_btc
def test_black_thursday_flashbulbs_on_the_crash_bars(btc_tape, tmp_path):
    sets = [f"market.tape.path={btc_tape}", "market.tape.start=2020-03-11T12:00", "duration=2d"]
    res = execute(ROOT / "scenarios" / "real_tape.yaml", tmp_path / "bt", sets=sets, environ={})
    t0 = res.manifest["tape"]["t0_ms"]
    ev = pl.read_parquet(tmp_path / "bt" / "events" / "*.parquet")
    fb = ev.filter(pl.col("kind") == "flashbulb")["time_ms"].to_numpy() + t0
    # the 2020-03-12 10:00 and 22:00 bars (-17.5 % each) are known at their closes (12:00, 00:00)
    for bar_open in (ms(2020, 3, 12, 10), ms(2020, 3, 12, 22)):
        seen = (fb >= bar_open + 2 * H) & (fb < bar_open + 4 * H)
        assert seen.any(), f"no flashbulb while the {bar_open} bar is the latest"
    m = pl.read_parquet(tmp_path / "bt" / "market" / "*.parquet")
    crash = m.filter(pl.col("time_ms").is_in([ms(2020, 3, 12, 10), ms(2020, 3, 12, 22)]))
    assert ((crash["close"] / crash["open"] - 1).to_numpy() < -0.17).all()
    assert set(crash["regime"]) == {"crash"}
    snaps = pl.read_parquet(tmp_path / "bt" / "snapshots" / "*.parquet")
    assert snaps.height > 0
    tev = pl.read_parquet(tmp_path / "bt" / "tape_events" / "*.parquet")
    assert {"crash_bar", "funding_extreme"} <= set(tev["kind"])


@needs_btc
def test_real_tape_runs_are_deterministic(btc_tape, tmp_path):
    sets = [f"market.tape.path={btc_tape}"]
    a = execute(ROOT / "scenarios" / "real_tape.yaml", tmp_path / "a", sets=sets, environ={})
    b = execute(ROOT / "scenarios" / "real_tape.yaml", tmp_path / "b", sets=sets, environ={})
    assert a.manifest["hashes"] == b.manifest["hashes"]
    assert a.manifest["tape"]["source"] == "file" and a.manifest["tape"]["sha256"]
    assert json.loads((tmp_path / "a" / "manifest.json").read_text())["status"] == "complete"
