"""streamops_deploy: make every stage of an app run (manual)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from airflow.sdk import Param, dag, task

from streamops.orchestrate.tasks import choices

CHOICES = choices()


@dag(
    dag_id="streamops_deploy",
    schedule=None,
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    tags=["streamops", "deploy"],
    doc_md="""
### Deploy an app
Validates `apps.yaml`, syncs the app's pools and stages into PostgreSQL, and makes sure every
stage of the app runs with its configured pool and cores. Idempotent: running stages are left
alone unless **restart** is set (then each is stopped at a batch boundary and started again from
its checkpoint). A deploy also puts a stage the watchdog gave up on back under its care.

**replicas** (optional) runs every stage of the app as that many replicas, each its own driver
with its own checkpoint, in another pool when one has room; empty keeps `apps.yaml`'s count.
""",
    params={
        "app": Param(CHOICES["apps"][0] if CHOICES["apps"] else "", enum=CHOICES["apps"],
                     description="the app, from apps.yaml"),
        "restart": Param(False, type="boolean", description="restart stages that are already running"),
        "replicas": Param(None, type=["null", "integer"], minimum=1, maximum=4,
                          description="replicas per stage (empty: apps.yaml's)"),
    },
    # Starting a stage is safe to retry: a running one is left alone.
    default_args={"retries": 2, "retry_delay": timedelta(seconds=20), "retry_exponential_backoff": True},
)
def streamops_deploy():
    @task
    def deploy(params: dict | None = None) -> dict:
        from streamops.orchestrate import tasks

        assert params is not None  # Airflow passes the run's Params (the None default marks it as context)
        replicas = params.get("replicas")
        return tasks.deploy(params["app"], bool(params["restart"]),
                            replicas_override=None if replicas in (None, "") else int(replicas))

    deploy()


streamops_deploy()
