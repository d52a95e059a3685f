"""An SLO's error budget, and the price mpc puts on a second above R_max, which follows it
(issue 46 item 2). Pure: production (control.py, from stage_metrics) and the simulator (its
per-second response) hand in the seconds; both get the same price.

A user states `slo_target` (the share of seconds within R_max) and `r_max_ms`, as an SRE would.
The budget of a period (production: the UTC day the nightly report judges; the simulator: its
compressed day) is (1 − slo_target) of its seconds. A window's **burn rate** is its share of
seconds above R_max over (1 − slo_target): at 1 the budget lasts exactly the period.

The price follows the multiwindow rule of SRE practice (Google's SRE workbook, "Alerting on
SLOs"): a burn counts only when a short window (it is still going on) and a long one (it is no
blip) agree.
- the period's budget is spent: the price is at its ceiling;
- both windows burn faster than 1: the price is multiplied by the lesser of the two rates;
- both burn slower than 1, and so does the period so far, a budget to spare: by the greatest of
  the three, no lower than `MIN_FACTOR`, so mpc moves toward the cheapest plan while the
  target still holds;
- they disagree: the base price.
An explicit `slo_price` overrides all of this (plan/options.py).
"""

from __future__ import annotations

from dataclasses import dataclass

BASE_PRICE = 320.0  # core-seconds per second above R_max: the old default, trained on bench/suite.py's seeds
# The range the price moves in, chosen on bench/suite.py's training seeds (docs/policies.md §14.3):
# wider ranges met the target on no more families and cost 1-13 % more core-hours.
MIN_FACTOR = 1 / 2  # 160 core-s: the price of a budget to spare
MAX_FACTOR = 2.0  # 640 core-s: the price of a budget spent
STALE_AFTER_S = 300.0  # a stored budget older than this (5 re-plans at 60 s): the re-plan is not measuring it
SHORT_SHARE = 1 / 288  # of the period: 5 minutes of a day
LONG_SHARE = 1 / 24  # 1 hour of a day


@dataclass(frozen=True)
class Windows:
    """The budget's period and its two burn windows, seconds."""

    period_s: float
    short_s: float
    long_s: float


def windows(period_s: float, control_interval_s: float) -> Windows:
    """The burn windows of a period: 5 minutes and an hour of a day, scaled to the period, the
    short one at least two control intervals (one interval's seconds would be all or nothing)."""
    short = max(period_s * SHORT_SHARE, 2 * control_interval_s)
    return Windows(period_s, short, max(period_s * LONG_SHARE, short))


@dataclass(frozen=True)
class Seconds:
    """Seconds measured (a batch spoke for them) and seconds above R_max, in one window."""

    measured: float
    above: float

    def share_above(self) -> float:
        return self.above / self.measured if self.measured > 0 else 0.0


@dataclass(frozen=True)
class Budget:
    """An app's error budget now: what the period allows, what is spent, the two burn rates and
    the price they set. `left` is a share of the budget (negative: overspent)."""

    slo_target: float
    budget_s: float
    spent_s: float
    short_burn: float
    long_burn: float
    factor: float
    price: float
    rule: str

    @property
    def left(self) -> float:
        return 1.0 - self.spent_s / self.budget_s if self.budget_s > 0 else 0.0

    def text(self) -> str:
        return (f"budget {self.left:.0%} left ({self.spent_s:.0f} of {self.budget_s:.0f} s above R_max), burn "
                f"{self.short_burn:.2g}/{self.long_burn:.2g} short/long: {self.rule}")


def burn_rate(s: Seconds, slo_target: float) -> float:
    """The window's share of seconds above R_max over the share the SLO allows."""
    allowed = 1.0 - slo_target
    if allowed <= 0:  # a 100 % target allows nothing: any second above it burns without bound
        return MAX_FACTOR if s.above > 0 else 0.0
    return s.share_above() / allowed


def budget(slo_target: float, w: Windows, short: Seconds, long: Seconds, period: Seconds,
           base_price: float = BASE_PRICE) -> Budget:
    """The app's budget and the price of a second above R_max that follows it (the module's rule)."""
    budget_s = (1.0 - slo_target) * w.period_s
    bs, bl, bp = (burn_rate(x, slo_target) for x in (short, long, period))
    if period.above >= budget_s:
        factor, rule = MAX_FACTOR, "the budget is spent"
    elif bs > 1 and bl > 1:
        factor, rule = min(MAX_FACTOR, bs, bl), "burning faster than the budget allows"
    elif bs < 1 and bl < 1 and bp < 1:  # the period so far too: a calm hour after a fast burn spares nothing
        factor, rule = max(MIN_FACTOR, bs, bl, bp), "a budget to spare"
    else:
        factor, rule = 1.0, "the windows disagree"
    return Budget(slo_target, budget_s, period.above, bs, bl, factor, base_price * factor, rule)
