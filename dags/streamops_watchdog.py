"""streamops_watchdog: detect failed stages and restart them from their checkpoints (on each new
failure, and every minute)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow.sdk import AssetOrTimeSchedule, DeltaTriggerTimetable, Param, dag, task

from streamops.orchestrate.failure_events import failures_asset


@dag(
    dag_id="streamops_watchdog",
    # A run on each new `failures` row (an asset event from the triggerer), and the sweep every minute.
    schedule=AssetOrTimeSchedule(timetable=DeltaTriggerTimetable(timedelta(minutes=1)), assets=failures_asset()),
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    tags=["streamops", "recovery"],
    doc_md="""
### Watchdog
**Runs** on each new failure (event) and every minute (sweep). The event: a row in `failures`
(the supervisor records a dead driver within about a second) fires the asset `streamops_failures`
through its watcher in the triggerer, and this DAG runs within seconds, as the visible record
and the second line. The sweep: every minute, whatever the events said.

Finds failed stage runs (dead driver, stale heartbeat, failed query), records a `failures` row,
and restarts each from its checkpoint; the replayable source and idempotent sink keep the
output identical to a failure-free run. Records the time to recovery (MTTR) and the output gap.
Also finishes or rolls back reconfigurations a crashed executor left `running`.

**Alert:** after `max_restarts` failed restarts in a row the stage is marked `failed`
(`stages.health`) and this DAG's task fails, naming the stage, until it is redeployed.
""",
    params={
        "max_restarts": Param(3, type="integer", minimum=1, description="restarts in a row before giving up"),
        "stale_s": Param(60, type="integer", minimum=10, description="heartbeat age that counts as a failure"),
    },
    # Not retried: the next minute's run is the retry, and a give-up must stay a visible failure.
    default_args={"retries": 0},
)
def streamops_watchdog():
    @task
    def recover(params: dict | None = None) -> dict:
        from streamops.orchestrate import tasks

        assert params is not None  # Airflow passes the run's Params (the None default marks it as context)
        return tasks.watchdog(max_restarts=int(params["max_restarts"]), stale_s=float(params["stale_s"]))

    recover()


streamops_watchdog()
