"""What the Airflow page shows, read from PostgreSQL: every stage's row of `streamops status`
(sql/queries/stage_status.sql) with its last failure, and per app the last hour's response
time against R_max, the last day's failures and its SLO error budget today. The same model feeds the page and its JSON.
Every read is `streamops_observer`'s (observe.page_engine): the page can write nothing."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import Row

from streamops.store import db, observe


def _rows(name: str, **params: Any) -> list[Row[Any]]:
    with db.connection(observe.page_engine()) as conn:
        return list(conn.execute(db.query(name), params).all())


@dataclass(frozen=True)
class Slo:
    """The last hour, per minute with input: how many minutes the app's response (the sum of its
    stages' p95) stayed within R_max, and the worst minute."""
    minutes: int
    within: int
    worst_ms: float | None

    @property
    def share_within(self) -> float | None:
        return self.within / self.minutes if self.minutes else None


def slo(series: list[tuple[datetime, float]], r_max_ms: float) -> Slo:
    return Slo(minutes=len(series), within=sum(1 for _, v in series if v <= r_max_ms),
               worst_ms=max((v for _, v in series), default=None))


@dataclass(frozen=True)
class Budget:
    """The app's SLO error budget today (UTC), as the last re-plan stored it (slo_budgets): what
    is left of it, the short and long burn rates, and the price mpc puts on a second above R_max."""
    slo_target: float
    budget_s: float
    spent_s: float
    left_ratio: float
    short_s: float
    long_s: float
    short_burn: float
    long_burn: float
    price: float
    rule: str
    measured_at: datetime

    @property
    def windows(self) -> str:
        """The burn windows as a reader says them: "5 min / 1 h"."""
        def say(s: float) -> str:
            return f"{s / 3600:g} h" if s >= 3600 else f"{s / 60:g} min" if s >= 60 else f"{s:g} s"
        return f"{say(self.short_s)} / {say(self.long_s)}"


def budget(a: Row[Any]) -> Budget | None:
    """A ui_apps row's budget; None before the re-plan first measured it."""
    if a.budget_s is None:
        return None
    return Budget(a.slo_target, a.budget_s, a.spent_s, a.left_ratio, a.short_s, a.long_s, a.short_burn,
                  a.long_burn, a.price, a.rule, a.budget_measured_at)


@dataclass
class StageView:
    status: dict[str, Any]                # the stage_status row
    last_failure: dict[str, Any] | None
    runs: list[dict[str, Any]] = field(default_factory=list)  # DAG runs that changed it (newest first)


@dataclass
class AppView:
    app: str
    r_max_ms: int
    failures_24h: int
    failures_open: int
    downtime_24h_s: float
    slo: Slo
    series: list[tuple[datetime, float]]
    stages: list[StageView]
    budget: Budget | None = None


def response_series() -> dict[str, list[tuple[datetime, float]]]:
    """app → its response time per minute over the last hour (sql/queries/ui_app_response.sql)."""
    series: dict[str, list[tuple[datetime, float]]] = {}
    for r in _rows("ui_app_response"):
        series.setdefault(r.app, []).append((r.minute, float(r.response_ms)))
    return series


def r_max_ms() -> dict[str, int]:
    return {r.name: r.r_max_ms for r in _rows("apps_r_max")}


def streams() -> list[AppView]:
    """Every registered app and stage, as the page shows them (four small queries)."""
    rows = [dict(r._mapping) for r in _rows("stage_status")]
    failures = {r.stage_id: dict(r._mapping) for r in _rows("ui_last_failures")}
    series = response_series()
    out = []
    for a in _rows("ui_apps"):
        s = series.get(a.app, [])
        out.append(AppView(app=a.app, r_max_ms=a.r_max_ms, failures_24h=a.failures_24h,
                           failures_open=a.failures_open, downtime_24h_s=float(a.downtime_24h_s),
                           slo=slo(s, a.r_max_ms), series=s,
                           stages=[StageView(r, failures.get(r["stage_id"])) for r in rows if r["app"] == a.app],
                           budget=budget(a)))
    return out


def attach_runs(apps: list[AppView], runs: dict[str, list[dict[str, Any]]], per_stage: int = 3) -> None:
    """Give each stage the newest DAG runs that changed it: streamops_reconfigure runs whose conf
    names the stage, streamops_deploy runs whose conf names its app (`runs`: dag_id → runs)."""
    changed = [(dag_id, r) for dag_id, rs in runs.items() for r in rs]
    changed.sort(key=lambda dr: dr[1].get("run_after") or "", reverse=True)
    for a in apps:
        for s in a.stages:
            sid = s.status["stage_id"]
            s.runs = [{"dag_id": d, **r} for d, r in changed
                      if (r.get("conf") or {}).get("stage") == sid or
                      (d == "streamops_deploy" and (r.get("conf") or {}).get("app") == a.app)][:per_stage]


def report_row(report_id: int) -> Any:
    """The `reports` row of a written report, or None."""
    found = _rows("ui_report", id=report_id)
    return found[0] if found else None


def as_json(apps: list[AppView]) -> dict[str, Any]:
    """The page's model as JSON (GET /streamops/api/streams): what a script or a test reads."""
    def plain(v: Any) -> Any:
        if isinstance(v, datetime):
            return v.astimezone(UTC).isoformat()
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        if isinstance(v, Decimal):
            return float(v)
        return v if v is None or isinstance(v, (str, int, float, bool)) else str(v)

    return {"generated_at": datetime.now(UTC).isoformat(),
            "apps": [plain({**asdict(a), "slo": {**asdict(a.slo), "share_within": a.slo.share_within}})
                     for a in apps]}
