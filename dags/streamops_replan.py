"""streamops_replan: the Application Managers' cycle, one mapped task per app (scheduled)."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta

from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import dag, task

# Default every minute; STREAMOPS_REPLAN_EVERY_S changes it (in the scheduler's environment).
EVERY = timedelta(seconds=int(os.environ.get("STREAMOPS_REPLAN_EVERY_S", "60")))


@dag(
    dag_id="streamops_replan",
    schedule=EVERY,
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    max_active_runs=1,
    tags=["streamops", "control"],
    doc_md="""
### Re-plan
Each app's Application Manager decides the requests its stages' Operator Managers made
(POLICIES.md §3–4: token bucket gated by the app's latency bound). Every decision and its
reason is logged and stored in `decisions`.

* granted **scale-outs** are realized now, each by a `streamops_reconfigure` run;
* granted **pre-stage / release** (no restart) are done in the app's task;
* **scale-ins and migrations** wait for the app's maintenance window (`streamops_maintenance_window`).
""",
    # A cycle only reads metrics and records decisions; retrying one is safe.
    default_args={"retries": 2, "retry_delay": timedelta(seconds=10), "retry_exponential_backoff": True},
)
def streamops_replan():
    @task
    def apps() -> list[str]:
        from streamops.orchestrate import tasks

        return tasks.replan_apps()

    @task(retries=0)  # a grant spends a token: never decide twice on one failure
    def replan(app: str) -> list[dict]:
        from streamops.orchestrate import tasks

        return tasks.replan(app)

    @task
    def to_realize(per_app: list[list[dict]]) -> list[dict]:
        # A slice is one request; iterating the lazy sequence reads item by item until a 404,
        # which the task SDK logs as an error ("XCom not found … offset=N") on every run.
        return [conf for confs in per_app[:] for conf in confs]

    TriggerDagRunOperator.partial(
        task_id="realize_scale_outs", trigger_dag_id="streamops_reconfigure", retries=0,
    ).expand(conf=to_realize(replan.expand(app=apps())))


streamops_replan()
