"""The nightly report: for one day (and one app, or all), a self-contained `index.html` (inline CSS,
charts as PNG data URIs) and one CSV per reporting view, under `reports/D/` (or
`reports/D/<app>/`); each report is recorded in the `reports` table.

Everything it shows comes from the `reporting` schema (sql/reports/) and named queries
(sql/queries/report_*.sql). SLO met: the app's `share_within_rmax` (observed time with response
time ≤ R_max) is at least its `slo_target` (apps.yaml, default 0.99).
"""

from __future__ import annotations

import base64
import csv
import itertools
import json
import logging
import os
import time
from dataclasses import asdict, dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import jinja2
from sqlalchemy import Connection, Engine

from streamops.paths import REPO_ROOT
from streamops.registry import App, stored_control
from streamops.report import charts
from streamops.store import db

log = logging.getLogger(__name__)

HA_VIEWS = ("ha_cost_daily", "ha_failures_daily", "ha_windows_daily")  # sql/reports/60_ha.sql
VIEWS = ("sla_daily", "downtime_daily", "reconfigurations", "cost_daily", *HA_VIEWS)
DEFAULT_SLO_TARGET: float = App.model_fields["slo_target"].default  # apps.yaml's
BUCKET_S = 10  # chart resolution: 8 640 points per app for a whole day
HA_CHART_STAGES = 25  # the high-availability chart shows at most this many stages, the most eventful


def yesterday_utc() -> date:
    return (datetime.now(UTC) - timedelta(days=1)).date()


def reports_dir() -> Path:
    """`STREAMOPS_REPORTS_DIR`, else `reports/` at the repo root (gitignored)."""
    return Path(os.environ.get("STREAMOPS_REPORTS_DIR", REPO_ROOT / "reports"))


def report_dir(day: date, app: str | None = None, out_dir: Path | None = None) -> Path:
    base = Path(out_dir) if out_dir else reports_dir()
    return base / day.isoformat() / app if app else base / day.isoformat()


@dataclass(frozen=True)
class AppSummary:
    """One row of the summary table."""

    app: str
    r_max_ms: int
    beta: float
    slo_target: float
    slo_met: bool
    share_within_rmax: float
    observed_s: float
    measured_s: int
    violated_windows: int
    response_p95_ms: float | None
    availability: float
    downtime_s: float
    downtime_reconfig_s: float
    downtime_failure_s: float
    reconfigurations: int
    failures: int
    failures_recovered: int
    mttr_s: float | None
    core_hours: float
    max_cores: int | None


def summarize(apps: list[dict], sla: list[dict], down: list[dict], cost: list[dict]) -> list[AppSummary]:
    """Join the day's view rows per app. Apps come from sla_daily: those observed that day."""
    opts = {a["app"]: a for a in apps}
    d = {r["app"]: r for r in down}
    c = {r["app"]: r for r in cost}
    out = []
    for s in sla:
        a = opts.get(s["app"], {})
        target = a.get("slo_target") or DEFAULT_SLO_TARGET
        dn, cs = d.get(s["app"], {}), c.get(s["app"], {})
        out.append(AppSummary(
            app=s["app"], r_max_ms=s["r_max_ms"], beta=stored_control(a.get("control")).beta,
            slo_target=target, slo_met=s["share_within_rmax"] >= target,
            share_within_rmax=s["share_within_rmax"], observed_s=s["observed_s"], measured_s=s["measured_s"],
            violated_windows=s["violated_windows"], response_p95_ms=s["response_p95_ms"],
            availability=dn.get("availability", 1.0), downtime_s=dn.get("downtime_s", 0.0),
            downtime_reconfig_s=dn.get("downtime_reconfig_s", 0.0),
            downtime_failure_s=dn.get("downtime_failure_s", 0.0),
            reconfigurations=dn.get("reconfigurations", 0), failures=dn.get("failures", 0),
            failures_recovered=dn.get("failures_recovered", 0), mttr_s=dn.get("mttr_s"),
            core_hours=cs.get("core_hours", 0.0), max_cores=cs.get("max_cores")))
    return out


def _rows(conn: Connection, name: str, **params: Any) -> list[dict]:
    return [dict(r._mapping) for r in conn.execute(db.query(name), params)]


def _write_csv(path: Path, rows: list[dict], columns: list[str]) -> None:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns)
        w.writeheader()
        for r in rows:
            w.writerow({k: "" if v is None else v for k, v in r.items()})


def _data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _break_gaps(series: list[dict]) -> list[dict]:
    """Insert an incomplete point where no batch arrived for a while (the app was down or stopped),
    so the lines break there instead of joining across the gap (the cores too: nothing ran). "A while":
    more than 3 times the usual spacing of the app's buckets (a slow trigger leaves regular empty buckets)."""
    steps = sorted(b["bucket"] - a["bucket"] for a, b in itertools.pairwise(series))
    if not steps:
        return series
    usual = steps[len(steps) // 2]
    out = [series[0]]
    for a, b in itertools.pairwise(series):
        if b["bucket"] - a["bucket"] > max(1, 3 * usual):
            out.append({**a, "ts": a["ts"] + timedelta(seconds=BUCKET_S), "complete": False, "cores": None})
        out.append(b)
    return out


def _app_chart(app: AppSummary, series: list[dict], reconfigs: list[dict], failures: list[dict],
               day: date) -> str | None:
    if not series:
        return None
    markers = []
    for r in reconfigs:
        # the moment the new run produced output: where the cores step in the chart below
        at = r["first_batch_done_at"] or r["finished_at"] or r["restarted_at"] or r["requested_at"]
        markers.append(charts.Marker(at, r["action"], str(r["chart_no"])))
    day_from = datetime(day.year, day.month, day.day, tzinfo=UTC)
    day_to = day_from + timedelta(days=1)
    spans = [charts.Span(max(f["gap_from"], day_from), min(f["gap_to"], day_to), f"F{i + 1}")
             for i, f in enumerate(failures)]
    series = _break_gaps(series)
    png = charts.response_chart(
        app.app, [p["ts"] for p in series],
        [p["response_ms"] if p["complete"] else None for p in series],
        [p["response_max_ms"] if p["complete"] else None for p in series],
        [p["cores"] for p in series], app.r_max_ms, app.beta, markers, spans,
        title=f"{app.app} · {day} · response time and cores ({BUCKET_S} s buckets)")
    return _data_uri(png)


def _dq_view(rows: list[dict]) -> list[dict]:
    out = []
    for r in rows:
        st, det = r["statistics"] or {}, r["details"] or {}
        failed = det.get("failed") if isinstance(det, dict) else None
        if isinstance(failed, list):
            what = "; ".join(
                " ".join(str(f.get(k)) for k in ("expectation", "column", "observed") if f.get(k) is not None)
                if isinstance(f, dict) else str(f) for f in failed)
        else:
            what = "" if not det else json.dumps(det)[:300]
        out.append({**r, "evaluated": st.get("evaluated_expectations"),
                    "successful": st.get("successful_expectations"), "failed_text": what})
    return out


def _seconds(values: list[float | None]) -> str:
    """MTTR p50s of several groups (kinds, detectors) of one stage and cause: one figure, or their range."""
    vals = sorted({round(v, 1) for v in values if v is not None})
    if not vals:
        return "–"
    return f"{vals[0]:,.1f} s" if len(vals) == 1 else f"{vals[0]:,.1f}–{vals[-1]:,.1f} s"


def ha_section(cost: list[dict], failures: list[dict], windows: list[dict], day: date) -> dict:
    """The High availability section: the day's rows of the three ha_* views, whether any run had
    company (a replica, a backup), and a chart of the stages that had a failure or redundancy (the
    most eventful HA_CHART_STAGES of them; None when there is none)."""
    causes: dict[str, dict[str, list[dict]]] = {}
    for f in failures:
        causes.setdefault(f["stage_id"], {"real": [], "injected": []}).setdefault(f["cause"], []).append(f)
    win = {w["stage_id"]: w for w in windows}
    shown = set(causes) | {w["stage_id"] for w in windows if w["windows_with_redundancy"]}

    def events(sid: str) -> tuple[int, int]:
        return (sum(f["failures"] for rows in causes.get(sid, {}).values() for f in rows),
                win.get(sid, {}).get("windows_violated", 0))

    stages = sorted(sorted(shown, key=events, reverse=True)[:HA_CHART_STAGES])
    bars = []
    for sid in stages:
        real, injected = causes.get(sid, {}).get("real", []), causes.get(sid, {}).get("injected", [])
        w = win.get(sid, {})
        bars.append(charts.HaStage(
            stage=sid, failures_real=sum(f["failures"] for f in real),
            failures_injected=sum(f["failures"] for f in injected),
            mttr_real=_seconds([f["mttr_p50_s"] for f in real]),
            mttr_injected=_seconds([f["mttr_p50_s"] for f in injected]),
            share_with=w.get("share_violated_with_redundancy"),
            share_without=w.get("share_violated_without_redundancy")))
    more = f" ({len(stages)} of {len(shown)} stages)" if len(shown) > len(stages) else ""
    png = charts.ha_chart(bars, title=f"failures by cause, and violated windows with and without redundancy, "
                                      f"on {day}{more}") if bars else None
    return {"cost": cost, "failures": failures, "windows": windows,
            "replicas": any(c["replica_runs"] or c["redundant_hours"] for c in cost),
            "chart": _data_uri(png) if png else None}


def _template() -> jinja2.Template:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["pct"] = lambda v, digits=2: "–" if v is None else f"{100 * v:.{digits}f} %"
    env.filters["num"] = lambda v, spec=",.1f": "–" if v is None else format(v, spec)
    return env.get_template("report.html.j2")


@dataclass
class _Day:
    """What one report reads, in one transaction: the apps, each view's rows and columns, the
    response series, the failures, the quarantine and the data-quality results."""

    apps: list[dict]
    views: dict[str, tuple[list[dict], list[str]]]
    series: list[dict]
    failures: list[dict]
    quarantined: list[dict]
    dq: list[dict]


def _read_day(conn: Connection, day: date, app: str | None) -> _Day:
    p = {"day": day, "app": app}
    conn.execute(db.query("report_tuning"))
    apps = _rows(conn, "report_apps", app=app)
    if app and not apps:
        raise ValueError(f"no app {app!r} in the database; known: run `streamops deploy` first")
    views = {}
    for v in VIEWS:
        res = conn.execute(db.query(f"report_{v}"), p)
        views[v] = ([dict(r._mapping) for r in res], list(res.keys()))
    return _Day(apps, views, _rows(conn, "report_response_series", bucket_s=BUCKET_S, **p),
                _rows(conn, "report_failures", **p), _rows(conn, "report_quarantine", **p),
                _dq_view(_rows(conn, "report_dq_results", **p)))


def _app_sections(summary: list[AppSummary], d: _Day, day: date) -> list[dict]:
    sections = []
    for s in summary:
        app_reconfigs = [{**r, "chart_no": i + 1}
                         for i, r in enumerate(x for x in d.views["reconfigurations"][0] if x["app"] == s.app)]
        failures = [f for f in d.failures if f["app"] == s.app]
        sections.append({
            "app": s, "reconfigurations": app_reconfigs, "failures": failures,
            "quarantine": [q for q in d.quarantined if q["app"] == s.app],
            "chart": _app_chart(s, [x for x in d.series if x["app"] == s.app], app_reconfigs, failures, day)})
    return sections


def _summary_record(summary: list[AppSummary], dq: list[dict], ha: dict) -> dict[str, Any]:
    """The `reports` row's summary: per app, the data-quality counts and the HA figures."""
    return {"apps": {s.app: asdict(s) for s in summary},
            "dq": {"results": len(dq), "failed": sum(1 for r in dq if not r["success"])},
            "ha": {"replica_hours": sum(c["replica_hours"] for c in ha["cost"]),
                   **{f"failures_{cause}": sum(f["failures"] for f in ha["failures"] if f["cause"] == cause)
                      for cause in ("real", "injected")}}}


def build_report(day: date | None = None, app: str | None = None, out_dir: Path | None = None,
                 engine: Engine | None = None) -> Path:
    """Write `<out_dir or reports/>/D[/app]/index.html` and the CSVs of the day's views, record the
    report in `reports`, and return the path of index.html. Day: yesterday (UTC) by default."""
    t0 = time.monotonic()
    day = day or yesterday_utc()
    scope = app or "all apps"
    target = report_dir(day, app, out_dir)
    target.mkdir(parents=True, exist_ok=True)
    with db.transaction(engine) as conn:
        d = _read_day(conn, day, app)
    log.info("report %s (%s): queries done in %.2f s", day, scope, time.monotonic() - t0)

    for v, (rows, cols) in d.views.items():
        _write_csv(target / f"{v}.csv", rows, cols)
    summary = summarize(d.apps, d.views["sla_daily"][0], d.views["downtime_daily"][0], d.views["cost_daily"][0])
    downtime_png = _data_uri(charts.downtime_chart(
        [s.app for s in summary], [s.downtime_reconfig_s for s in summary], [s.downtime_failure_s for s in summary],
        title=f"downtime on {day}: reconfigurations and failures")) if summary else None
    cost, ha_failures, ha_windows = (d.views[v][0] for v in HA_VIEWS)
    ha = ha_section(cost, ha_failures, ha_windows, day=day)
    html = _template().render(
        day=day, app=app, generated=datetime.now(UTC), summary=summary, sections=_app_sections(summary, d, day),
        downtime_chart=downtime_png, ha=ha, dq=d.dq, csvs=[f"{v}.csv" for v in VIEWS], bucket_s=BUCKET_S,
        default_target=DEFAULT_SLO_TARGET)
    index = target / "index.html"
    index.write_text(html)

    elapsed_ms = (time.monotonic() - t0) * 1000
    with db.transaction(engine) as conn:
        conn.execute(db.query("report_insert"), {"day": day, "app": app, "path": str(index.resolve()),
                                                 "duration_ms": elapsed_ms,
                                                 "summary": json.dumps(_summary_record(summary, d.dq, ha))})
    met = sum(s.slo_met for s in summary)
    log.info("report %s (%s): wrote %s and %d CSV files in %.2f s; SLO met by %d of %d apps", day, scope, index,
             len(VIEWS), elapsed_ms / 1000, met, len(summary))
    return index


def day_has_metrics(day: date, engine: Engine | None = None) -> bool:
    with db.connection(engine) as conn:
        return bool(conn.execute(db.query("day_has_metrics"), {"day": day}).scalar())


def last_report(engine: Engine | None = None) -> dict | None:
    """The most recently written report (`reports` row), or None."""
    with db.connection(engine) as conn:
        row = conn.execute(db.query("report_last")).first()
    return dict(row._mapping) if row else None


def day_of_run(override: str | None, data_interval_start: datetime | None, run_after: datetime) -> date:
    """The day a nightly DAG run reports: the Param if given, else the data interval's start day
    (UTC), else, for a manual run without a logical date, the day before it ran."""
    if override:
        return date.fromisoformat(override)
    if data_interval_start is not None:
        return data_interval_start.astimezone(UTC).date()
    return (run_after.astimezone(UTC) - timedelta(days=1)).date()


def missed_days(until: date, max_days: int = 7, engine: Engine | None = None) -> list[date]:
    """Days before `until` (at most `max_days` back) with metrics but no all-apps report."""
    with db.connection(engine) as conn:
        return [r.day for r in conn.execute(db.query("report_missed_days"), {"until": until, "max_days": max_days})]


def build_with_backfill(day: date, max_days: int = 7, *, asked: bool = False) -> list[Path]:
    """The night's report, preceded by those of missed nights (oldest first). A scheduled night
    with no batch at all (a fresh install's first run reports the day before any app ran) writes
    none: an empty report would say "missed" and become the linked last report; `asked` (a
    person named the day) writes it anyway."""
    days = missed_days(day, max_days)
    if asked or day_has_metrics(day):
        days.append(day)
    else:
        log.info("report %s: no batch that day, no report", day)
    return [build_report(d) for d in days]
