"""budget_pass's one rule of its own (pure): an app with no second measured in either burn window
is priced at the base price, not as a budget to spare. The seconds from real rows:
tests/integration/test_slo_budget.py."""

from __future__ import annotations

from streamops.budget_pass import app_budget
from streamops.plan.budget import BASE_PRICE, MAX_FACTOR, MIN_FACTOR, Seconds, windows

DAY = windows(86400, 60)
NOTHING = Seconds(0, 0)


def test_nothing_measured_is_the_base_price_not_a_budget_to_spare():
    b = app_budget(0.99, DAY, NOTHING, NOTHING, NOTHING)
    assert b.price == BASE_PRICE and b.factor == 1.0 and b.rule.startswith("nothing measured")


def test_a_day_s_budget_spent_stays_at_the_ceiling_while_nothing_is_measured():
    spent = app_budget(0.99, DAY, NOTHING, NOTHING, Seconds(50_000, 900))  # down now, the day's budget gone
    assert spent.factor == MAX_FACTOR and spent.rule == "the budget is spent"


def test_measured_and_within_is_a_budget_to_spare():
    spare = app_budget(0.99, DAY, Seconds(300, 0), Seconds(3600, 0), Seconds(3600, 0))
    assert spare.factor == MIN_FACTOR and spare.price == BASE_PRICE * MIN_FACTOR
