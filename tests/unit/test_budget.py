"""The error budget and the price that follows its burn rate (plan/budget.py, issue 46 item 2): pure."""

from __future__ import annotations

import random

import pytest

from streamops.analyze.stats import StageStats
from streamops.plan.budget import BASE_PRICE, MAX_FACTOR, MIN_FACTOR, Seconds, budget, burn_rate, windows
from streamops.plan.cost import CostModel
from streamops.plan.model import OperatorState
from streamops.plan.operator import OperatorContext, operator_cycle
from streamops.plan.options import OperatorOptions

DAY = windows(86400.0, 60.0)


def test_the_windows_are_five_minutes_and_an_hour_of_a_day_scaled_to_the_period():
    assert (DAY.short_s, DAY.long_s) == (300.0, 3600.0)
    sim_day = windows(7200.0, 60.0)  # the simulator's compressed day: the short window is two intervals
    assert (sim_day.short_s, sim_day.long_s) == (120.0, 300.0)


def test_a_burn_rate_of_one_spends_the_budget_in_exactly_the_period():
    assert burn_rate(Seconds(3600, 36), 0.99) == pytest.approx(1.0)
    assert burn_rate(Seconds(3600, 0), 0.99) == 0.0
    assert burn_rate(Seconds(0, 0), 0.99) == 0.0  # nothing measured: nothing burnt
    assert burn_rate(Seconds(10, 1), 1.0) == MAX_FACTOR  # a 100 % target allows no second above


def test_a_fast_burn_both_windows_see_raises_the_price_by_the_lesser_rate():
    b = budget(0.99, DAY, short=Seconds(300, 30), long=Seconds(3600, 54), period=Seconds(40000, 200))
    assert (b.short_burn, b.long_burn) == (pytest.approx(10.0), pytest.approx(1.5))
    assert b.price == pytest.approx(1.5 * BASE_PRICE) and "faster" in b.rule
    fierce = budget(0.99, DAY, short=Seconds(300, 30), long=Seconds(3600, 144), period=Seconds(40000, 200))
    assert fierce.price == pytest.approx(MAX_FACTOR * BASE_PRICE)  # no higher than the ceiling
    assert b.budget_s == pytest.approx(864.0) and b.left == pytest.approx(1 - 200 / 864)


def test_a_blip_the_long_window_does_not_confirm_keeps_the_base_price():
    b = budget(0.99, DAY, short=Seconds(300, 30), long=Seconds(3600, 30), period=Seconds(3600, 30))
    assert b.short_burn > 1 > b.long_burn and b.price == BASE_PRICE and "disagree" in b.rule


def test_a_budget_to_spare_lowers_the_price_toward_the_cheapest_plan():
    none_above = budget(0.99, DAY, Seconds(300, 0), Seconds(3600, 0), Seconds(40000, 0))
    assert none_above.price == pytest.approx(MIN_FACTOR * BASE_PRICE) and none_above.left == 1.0
    some = budget(0.99, DAY, Seconds(300, 2.25), Seconds(3600, 27), Seconds(40000, 100))
    assert some.factor == pytest.approx(0.75) and none_above.price < some.price < BASE_PRICE


def test_a_calm_hour_after_a_fast_burn_spares_nothing():
    """The windows are quiet, but the day so far spent faster than the budget allows."""
    b = budget(0.99, DAY, Seconds(300, 0), Seconds(3600, 0), Seconds(20000, 400))
    assert b.price == BASE_PRICE and "disagree" in b.rule


def test_a_spent_budget_prices_a_second_above_at_the_ceiling():
    b = budget(0.99, DAY, Seconds(300, 0), Seconds(3600, 0), Seconds(80000, 900))
    assert b.price == pytest.approx(MAX_FACTOR * BASE_PRICE) and b.left < 0 and "spent" in b.rule


def _stats(rate: float, cores: int) -> StageStats:
    span = 300.0
    rows = rate * span
    return StageStats("taxi.count", "taxi", "local", cores, 1, 12, 8, span, 60, int(rows),
                      busy_ms=rows / (100.0 * cores) * 1000.0, backlog_rows=0.0, backlog_growth_rps=0.0,
                      latency_p95_ms=90.0, state_bytes=200e6)


def test_mpc_buys_cores_while_the_budget_burns_and_gives_them_back_when_it_is_spare():
    """The same stage, the same load: only the budget differs."""
    stats = _stats(30.0, 6)  # 6 cores for 30 rows/s: idle
    spare = budget(0.99, DAY, Seconds(300, 0), Seconds(3600, 0), Seconds(40000, 0))
    burning = budget(0.99, DAY, Seconds(300, 60), Seconds(3600, 400), Seconds(40000, 500))

    def ask(b, opt=None):
        opt = opt or OperatorOptions()
        ctx = OperatorContext(200.0, CostModel(), {}, random.Random(0), budget=b)
        return operator_cycle("mpc", stats, opt, OperatorState(), ctx)[0]

    given_back = ask(spare)
    assert [r.action for r in given_back] == ["scale_in"]
    assert "a budget to spare" in given_back[0].reason and given_back[0].snapshot["slo_price"] == spare.price
    assert ask(burning) == []  # a restart's seconds above R_max are dear while the budget burns
    # an explicit slo_price overrides the budget
    assert ask(spare, OperatorOptions(slo_price=BASE_PRICE * MAX_FACTOR)) == []
