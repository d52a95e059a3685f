"""streamops_nightly_report: stage_metrics retention, then the day's HTML report (daily, 00:15 UTC)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow.sdk import CronTriggerTimetable, Param, dag, task


@dag(
    dag_id="streamops_nightly_report",
    # Each run covers the day that just ended: data interval [D 00:15, D+1 00:15), reported day D.
    # The 15 minutes let drivers' buffered metric rows of the last seconds of D arrive.
    schedule=CronTriggerTimetable("15 0 * * *", timezone="UTC", interval=timedelta(days=1)),
    start_date=datetime(2026, 11, 15, tzinfo=UTC),
    # Not Airflow's catchup: a fresh install would replay every night since start_date. Each run
    # backfills instead the nights of the last week that have metrics but no report.
    catchup=False,
    max_active_runs=1,
    tags=["streamops", "report"],
    doc_md="""
### Nightly report
1. **retention**: drops `stage_metrics` day partitions older than `STREAMOPS_METRICS_RETENTION_DAYS`
   (30) and creates today's and tomorrow's.
2. **data_quality**: runs the Great Expectations suites for D (`streamops.quality.run_suites`) and
   stores each result in `dq_results`; failed expectations are recorded, not raised.
3. **report**: writes `reports/D/index.html` (summary per app: SLO met, availability, downtime,
   reconfigurations, core-hours, failures; response time against R_max and β·R_max with cores, as
   EDF's Fig. 4; downtime chart; data-quality results) and a CSV per `reporting` view, records it in
   the `reports` table, and logs a `file://` link to it. D is the day before the run's time (the data
   interval's start); Param `day` (YYYY-MM-DD) reports another day on a manual run.

Missed nights of the last 7 days (metrics but no report) are written first, oldest first.
See docs/reporting.md.
""",
    params={"day": Param(None, type=["null", "string"], format="date",
                         description="report this day (YYYY-MM-DD) instead of the run's data interval day")},
    # The report only reads, and retention is idempotent: retrying is always safe.
    default_args={"retries": 2, "retry_delay": timedelta(minutes=1), "retry_exponential_backoff": True},
)
def streamops_nightly_report():
    @task
    def retention() -> dict:
        import logging

        from streamops.report.retention import apply_retention

        r = apply_retention()
        logging.getLogger("streamops.airflow").info(
            "retention: kept %d days of stage_metrics; dropped %s; created %d partitions ahead (drained: %s); "
            "deleted rows older than %d days: %s", r.keep_days, ", ".join(r.dropped) or "nothing", r.created,
            ", ".join(r.drained) or "none", r.records_keep_days, r.deleted)
        return {"dropped": r.dropped, "created": r.created, "drained": r.drained, "deleted": r.deleted}

    @task
    def files() -> dict:
        from streamops.execute import housekeeping

        c = housekeeping.collect()
        return {"checkpoints": c.checkpoints, "logs": len(c.logs), "rotated": c.rotated, "bytes": c.bytes}

    @task
    def report(params: dict | None = None, data_interval_start=None, dag_run=None) -> str:
        import logging

        from streamops.report import nightly

        asked = (params or {}).get("day")
        day = nightly.day_of_run(asked, data_interval_start, dag_run.run_after)
        written = nightly.build_with_backfill(day, asked=bool(asked))
        for index in written:
            logging.getLogger("streamops.airflow").info("report %s: %s", index.parent.name, index.resolve().as_uri())
        return str(written[-1]) if written else f"no batch on {day}: no report"

    @task
    def data_quality(params: dict | None = None, data_interval_start=None, dag_run=None) -> dict:
        import logging

        from streamops.quality import run_suites
        from streamops.report import nightly

        results = run_suites(nightly.day_of_run((params or {}).get("day"), data_interval_start, dag_run.run_after))
        failed = [f"{r.suite} {r.target}" for r in results if not r.success]
        logging.getLogger("streamops.airflow").info("data quality: %d validations, failed: %s",
                                                    len(results), ", ".join(failed) or "none")
        return {"validations": len(results), "failed": failed}

    retention() >> files() >> data_quality() >> report()


streamops_nightly_report()
