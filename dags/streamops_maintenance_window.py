"""streamops_maintenance_window: realize deferred disruptive actions while an app's window is open."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow.sdk import dag, task


@dag(
    dag_id="streamops_maintenance_window",
    schedule=timedelta(minutes=5),
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    tags=["streamops", "control"],
    doc_md="""
### Maintenance window
For each app whose maintenance window (apps.yaml `maintenance_window`) is open now, realizes
the scale-ins and migrations that re-plan granted inside the window (within its action budget),
one at a time. Once the window closes it starts nothing new. Outside every window it does nothing.
""",
    default_args={"retries": 1, "retry_delay": timedelta(seconds=30), "retry_exponential_backoff": True},
)
def streamops_maintenance_window():
    @task(pool="streamops_reconfigure")
    def realize_deferred() -> dict:
        from streamops.orchestrate import tasks

        return tasks.maintenance_window()

    realize_deferred()


streamops_maintenance_window()
