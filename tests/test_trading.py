"""ACTING (SPEC §5): the trade kernel by hand, and against the array expressions bit for bit."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from golem import trading
from golem.rng import mixed_seed, uniform

BOOK = ("units", "cash", "budget", "last_action", "last_dexp", "trade_ms", "trade_price", "trade_dexp", "lp_ema")


def _book(n, rng=None):
    rng = rng or np.random.default_rng(0)
    return dict(units=rng.choice([0.0, -0.0, 1e-14, 2.0, 7.5], n) * rng.uniform(0.5, 2, n),
                cash=rng.choice([0.0, -0.0, 50.0, 1000.0, -20.0], n) * rng.uniform(0.5, 2, n),
                budget=rng.uniform(-1, 10, n), tick=rng.integers(0, 10**6, n),
                last_action=rng.integers(-1, 2, n).astype(np.int8), last_dexp=rng.uniform(-1, 1, n),
                trade_ms=rng.integers(0, 10**9, n), trade_price=rng.uniform(50, 150, n),
                trade_dexp=rng.uniform(-1, 1, n), lp_ema=np.where(rng.random(n) < 0.2, np.nan, rng.uniform(3, 6, n)))


def _act_by_arrays(seed, ix, target, value, price, tier, now_ms, min_trade, fail_p, fee_bps, slippage_bps, gas_cost,
                   t1_cost, t2_cost, b):
    """ACTING as the cohort's array expressions (the kernel's reference)."""
    exposure = np.where(value > 0, b["units"][ix] * price / np.maximum(value, 1e-12), 0.0)
    dexp = target - exposure
    full_exit = (target <= 1e-9) & (exposure > 1e-3)
    trade = ((np.abs(dexp) >= min_trade) | full_exit) & (value > 0)
    u_fail = uniform(seed, ix, b["tick"][ix], trading.FAIL_STREAM)
    u_slip = uniform(seed, ix, b["tick"][ix], trading.SLIP_STREAM)
    failed = trade & (u_fail < fail_p)
    ok = trade & ~failed
    notional = np.abs(dexp) * value
    cost = np.where(ok, notional * (fee_bps + slippage_bps * (0.5 + u_slip)) / 1e4, 0.0)
    b["units"][ix] += np.where(ok, dexp * value / price, 0.0)
    b["cash"][ix] -= np.where(ok, dexp * value, 0.0) + cost
    b["budget"][ix] -= np.where(trade, gas_cost, 0.0) + np.where(tier == 1, t1_cost, np.where(tier == 2, t2_cost, 0.0))
    b["last_action"][ix] = np.where(ok, 1, np.where(failed, -1, 0))
    b["last_dexp"][ix] = np.where(ok, dexp, 0.0)
    b["trade_ms"][ix] = np.where(ok, now_ms, b["trade_ms"][ix])
    b["trade_price"][ix] = np.where(ok, price, b["trade_price"][ix])
    b["trade_dexp"][ix] = np.where(ok, dexp, b["trade_dexp"][ix])
    b["lp_ema"][ix] = np.where(ok, np.log(price), b["lp_ema"][ix])
    new_value = b["cash"][ix] + b["units"][ix] * price
    return (exposure, dexp, ok, failed, new_value,
            np.where(new_value > 0, b["units"][ix] * price / np.maximum(new_value, 1e-12), 0.0))


def _trade(seed, ix, target, value, price, tier, now_ms, min_trade, fail_p, fee_bps, slippage_bps, gas_cost, t1_cost,
           t2_cost, b):
    return trading.trade(ix, target, value, price, np.log(price), tier, now_ms, mixed_seed(seed), min_trade, fail_p,
                         fee_bps, slippage_bps, gas_cost, t1_cost, t2_cost, b["units"], b["cash"], b["budget"],
                         b["tick"], b["last_action"], b["last_dexp"], b["trade_ms"], b["trade_price"], b["trade_dexp"],
                         b["lp_ema"])


def test_a_fill_and_a_skip_by_hand():
    """Golem 0 (1,000 cash, nothing held, price 100) goes to exposure 0.6: it buys 600 of notional,
    6 units, and pays 5 bps fee + 5 x (0.5 + u) bps slippage of it and the gas; golem 1 (half
    invested) is asked for 0.1 more, below min_trade 0.25, and does nothing but pay its tier."""
    b = _book(2)
    b.update(units=np.array([0.0, 5.0]), cash=np.array([1000.0, 500.0]), budget=np.array([10.0, 10.0]),
             tick=np.array([3, 4]), lp_ema=np.array([1.0, 1.0]))
    price, value = np.array([100.0, 100.0]), np.array([1000.0, 1000.0])
    got = _trade(7, np.array([0, 1]), np.array([0.6, 0.6]), value, price, np.array([0, 2]), 42, 0.25, 0.0, 5.0, 5.0,
                 0.5, 0.001, 0.01, b)
    u_slip = uniform(7, np.array([0]), np.array([3]), trading.SLIP_STREAM)[0]
    assert got[0].tolist() == [0.0, 0.5] and got[2].tolist() == [True, False] and got[3].tolist() == [False, False]
    assert b["units"].tolist() == [6.0, 5.0]
    assert b["cash"][0] == 1000.0 - (600.0 + 600.0 * (5.0 + 5.0 * (0.5 + u_slip)) / 1e4)
    assert b["budget"].tolist() == [10.0 - 0.5, 10.0 - 0.01]
    assert (b["trade_ms"][0], b["trade_price"][0], b["lp_ema"][0], b["lp_ema"][1]) == (42, 100.0, np.log(100.0), 1.0)
    assert got[4][0] == b["cash"][0] + 600.0 and got[5][0] == 600.0 / got[4][0]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**63 - 1), st.integers(0, 2**31), st.integers(1, 30), st.sampled_from([0.0, 0.3, 1.0]))
def test_the_trade_kernel_is_the_array_expressions_bit_for_bit(seed, data_seed, n, fail_p):
    """Books with and without value (negative, zero and signed zeros among them), targets at 0, near
    and far, every tier, failures at 0, 30 and 100 %: the same trades, book and figures, bit for bit."""
    rng = np.random.default_rng(data_seed)
    m = n + int(rng.integers(0, 4))
    ix = np.sort(rng.permutation(m)[:n]).astype(np.int64)
    mine = _book(m, rng)
    ref = {k: v.copy() for k, v in mine.items()}
    price = rng.uniform(1, 200, n)
    value = mine["cash"][ix] + mine["units"][ix] * price
    target = rng.choice([0.0, 1e-10, 0.1, 0.5, 1.0], n) * rng.uniform(0.5, 1.5, n)
    tier = rng.integers(0, 3, n)
    args = (seed, ix, target, value, price, tier, int(rng.integers(0, 10**10)), 0.25, fail_p,
            float(rng.choice([5.0, 0.0, 30.0])), 5, float(rng.uniform(0, 2)), 0.001, 0.01)
    got = _trade(*args, mine)
    want = _act_by_arrays(*args, ref)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.tobytes() == w.tobytes()
    for k in BOOK:
        assert mine[k].tobytes() == ref[k].tobytes(), k
