"""ACTING (SPEC §5): a cohort's trades against its targets, and what they do to the book.

One pass over the cohort (`trade`) instead of some forty array expressions, each a call over a
thousand Golems that costs more than its arithmetic; every operation is the expression's own, in
its order, so the book comes out bit for bit the same (tests/test_trading.py holds the array
expressions as the reference). The one transcendental, the log price a new position is judged
from, is numpy's, computed by the caller.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from golem.rng import draw

#: `golem.rng` streams of the trade's draws: whether it fails, its slippage
FAIL_STREAM, SLIP_STREAM = 1, 2


@njit(cache=True, error_model="numpy")
def trade(ix, target, value, price, log_price, tier, now_ms, z0, min_trade, fail_p, fee_bps, slippage_bps, gas_cost,
          t1_cost, t2_cost, units, cash, budget, tick, last_action, last_dexp, trade_ms, trade_price, trade_dexp,
          lp_ema):
    """The cohort `ix` (distinct Golems) trades toward `target` exposure at `price`, its book worth
    `value`; returns (exposure before, exposure change asked, filled, failed, value after, exposure
    after) and updates the book in place.

    The exposure is units x price / value (0 without value). A change smaller than min_trade is
    skipped (hysteresis against churn), but a full exit (target ~0 from above 0.1 %) never is: a
    Golem that de-risked early would otherwise keep a residual position through a crash. A Golem
    with no value trades nothing. An attempt fails with probability fail_p (a uniform of (seed, Golem,
    tick, FAIL_STREAM) under the mixed seed z0) and costs gas either way; a fill moves units and
    cash by the change at this price and pays fee + slippage (slippage_bps x (0.5 + a uniform of
    SLIP_STREAM)) bps of its notional, and becomes the last filled trade (time, price, change, the
    log price its trend is judged from). The tier's inference cost comes out of the budget."""
    n = ix.size
    exposure = np.empty(n)
    dexp = np.empty(n)
    traded = np.empty(n, np.bool_)
    failed = np.empty(n, np.bool_)
    value_after = np.empty(n)
    exposure_after = np.empty(n)
    for i in range(n):
        g, v, p = ix[i], value[i], price[i]
        e = units[g] * p / max(v, 1e-12) if v > 0 else 0.0
        d = target[i] - e
        full_exit = (target[i] <= 1e-9) & (e > 1e-3)
        attempt = ((abs(d) >= min_trade) | full_exit) & (v > 0)
        t = np.uint64(tick[g])
        u_fail = draw(z0, np.uint64(g), t, np.uint64(FAIL_STREAM))
        u_slip = draw(z0, np.uint64(g), t, np.uint64(SLIP_STREAM))
        fail = attempt & (u_fail < fail_p)
        ok = attempt and not fail
        cost = abs(d) * v * (fee_bps + slippage_bps * (0.5 + u_slip)) / 1e4 if ok else 0.0
        units[g] = units[g] + (d * v / p if ok else 0.0)
        cash[g] = cash[g] - ((d * v if ok else 0.0) + cost)
        budget[g] = budget[g] - ((gas_cost if attempt else 0.0) + (t1_cost if tier[i] == 1 else (t2_cost if tier[i] == 2 else 0.0)))
        last_action[g] = 1 if ok else (-1 if fail else 0)
        last_dexp[g] = d if ok else 0.0
        if ok:
            trade_ms[g] = now_ms
            trade_price[g] = p
            trade_dexp[g] = d
            lp_ema[g] = log_price[i]
        nv = cash[g] + units[g] * p
        exposure[i], dexp[i], traded[i], failed[i], value_after[i] = e, d, ok, fail, nv
        exposure_after[i] = units[g] * p / max(nv, 1e-12) if nv > 0 else 0.0
    return exposure, dexp, traded, failed, value_after, exposure_after
