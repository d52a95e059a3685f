"""Each app's SLO error budget in the control loop (issue 46 item 2, docs/policies.md §14.3):
the seconds measured and above R_max in the short and long burn windows and the UTC day so far,
counted from stage_metrics in one set-based statement for every app (`slo_seconds.sql`: the
day's seconds before the last cycle's long window are kept in `slo_budgets`, not counted again), then
`plan.budget.budget` (pure) turns them into the budget and the price mpc puts on a second above
R_max. The re-plan measures and stores them (`slo_budgets`: what `streamops status`, the Streams
page and /metrics show); a stage driver's own Operator Manager, every local period, reads its
app's stored row instead of counting the day again, and prices at the base price when the row
is older than plan.budget.STALE_AFTER_S (no re-plan runs).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from streamops.plan.budget import BASE_PRICE, STALE_AFTER_S, Budget, Seconds, Windows, budget, windows
from streamops.registry import App, stored_control
from streamops.store import db

log = logging.getLogger("streamops.budget")

PERIOD_S = 86400.0  # the UTC day the nightly report judges


def default_slo_target() -> float:
    """apps.yaml's default slo_target: a spec stored without one (or before it existed) has it."""
    return float(App.model_fields["slo_target"].default)


def _seconds(row: Any, window: str) -> Seconds:
    return Seconds(float(row[f"{window}_measured_s"] or 0), float(row[f"{window}_above_s"] or 0))


def app_budget(slo_target: float, w: Windows, short: Seconds, long: Seconds, period: Seconds) -> Budget:
    """plan.budget's rule, except that windows with no second measured leave no budget to spare:
    an app not running (or just deployed) prices at the base price, not at the cheapest."""
    b = budget(slo_target, w, short, long, period)
    if short.measured == 0 and long.measured == 0 and period.above < b.budget_s:
        return replace(b, factor=1.0, price=BASE_PRICE, rule="nothing measured in either window: the base price")
    return b


@dataclass(frozen=True)
class Measured:
    """An app's budget now, its burn windows, and the day's seconds counted once and kept: those
    before `settled_to` (slo_seconds.sql counts only the ones after it next time)."""

    budget: Budget
    windows: Windows
    settled_to: datetime
    settled_measured_s: int
    settled_above_s: int


def measure(conn: Connection, now: datetime, app: str | None = None) -> dict[str, Measured]:
    """Every app's (of `app`) budget at `now`, from stage_metrics and the day's settled seconds
    (slo_budgets): three statements whatever the number of apps."""
    apps = conn.execute(db.query("report_apps"), {"app": app}).mappings().all()
    if not apps:
        return {}
    target = {a["app"]: a["slo_target"] if a["slo_target"] is not None else default_slo_target() for a in apps}
    wins = {a["app"]: windows(PERIOD_S, stored_control(a["control"]).control_interval_s) for a in apps}
    conn.execute(db.query("slo_seconds_settings"))
    rows = conn.execute(db.query("slo_seconds"), {
        "now": now, "apps": list(wins), "short_s": [w.short_s for w in wins.values()],
        "long_s": [w.long_s for w in wins.values()]}).mappings().all()
    out: dict[str, Measured] = {}
    for r in rows:
        w = wins[r["app"]]
        b = app_budget(target[r["app"]], w, _seconds(r, "short"), _seconds(r, "long"), _seconds(r, "period"))
        out[r["app"]] = Measured(b, w, r["settled_to"], int(r["settled_measured_s"]), int(r["settled_above_s"]))
        log.info("app %s: action=budget %s (measured %s/%s/%s s short/long/day)", r["app"], b.text(),
                 r["short_measured_s"], r["long_measured_s"], r["period_measured_s"])
    return out


def save(conn: Connection, measured: dict[str, Measured], now: datetime) -> None:
    db.bulk("slo_budgets_save", [
        {"app": app, "slo_target": m.budget.slo_target, "budget_s": m.budget.budget_s, "spent_s": m.budget.spent_s,
         "short_s": m.windows.short_s, "long_s": m.windows.long_s, "short_burn": m.budget.short_burn,
         "long_burn": m.budget.long_burn, "factor": m.budget.factor, "price": m.budget.price, "rule": m.budget.rule,
         "measured_at": now, "settled_to": m.settled_to, "settled_measured_s": m.settled_measured_s,
         "settled_above_s": m.settled_above_s}
        for app, m in measured.items()], conn)


def stored(conn: Connection, now: datetime, app: str) -> Budget | None:
    """`app`'s budget as the last re-plan stored it; None when there is none, or it is older than
    STALE_AFTER_S."""
    row = conn.execute(db.query("slo_budgets_get"), {"app": app}).mappings().first()
    if row is None or (now - row["measured_at"]).total_seconds() > STALE_AFTER_S:
        return None
    return Budget(row["slo_target"], row["budget_s"], row["spent_s"], row["short_burn"], row["long_burn"],
                  row["factor"], row["price"], row["rule"])


def app_budgets(conn: Connection, now: datetime, app: str | None = None,
                stage_app: str | None = None) -> dict[str, Budget]:
    """The budgets an operator pass prices with: a re-plan's (of every app, or `app`) measured now
    and stored; a stage's own pass (`stage_app`: its app) the stored one of its app."""
    if stage_app is not None:
        b = stored(conn, now, stage_app)
        return {} if b is None else {stage_app: b}
    measured = measure(conn, now, app)
    save(conn, measured, now)
    return {name: m.budget for name, m in measured.items()}
