"""streamops_reconfigure: realize one reconfiguration of a stage (manual, and triggered by re-plan)."""

from __future__ import annotations

from datetime import UTC, datetime

from airflow.sdk import Param, dag, task

from streamops.orchestrate.tasks import ACTIONS, choices

CHOICES = choices()


@dag(
    dag_id="streamops_reconfigure",
    schedule=None,
    start_date=datetime(2026, 1, 1, tzinfo=UTC),
    catchup=False,
    tags=["streamops", "reconfigure"],
    doc_md="""
### Reconfigure a stage
Scale out, scale in or migrate a live stateful stage with one of the mechanisms of
`docs/reconfiguration.md` (by default `auto`: the cost rule picks live, active backup,
in-driver, pre-staged or pause–resume, and the log says why). The task log
shows every phase and the measured downtime (the output gap). A new run that fails is rolled
back and the task fails with the reason. **resume_pending** realizes what re-plan granted
(re-plan passes the reconfiguration's id).

Runs share the `streamops_reconfigure` pool; a per-stage database lock still serializes
changes to one stage, whoever asks.
""",
    params={
        # Required, no default: a run without a stage must be refused, not applied to the first one.
        "stage": Param(type="string", enum=CHOICES["stages"], description="app.stage (required)"),
        "action": Param("scale_out", enum=list(ACTIONS)),
        "cores": Param(None, type=["null", "integer"], minimum=1, maximum=CHOICES["max_cores"],
                       description=f"target cores, within the stage's bounds ({CHOICES['cores_bounds']}); "
                                   "the task refuses a target the stage already has"),
        "partitions": Param(None, type=["null", "integer"], minimum=1,
                            description="target state partitions (offline repartition)"),
        "pool": Param(None, type=["null", "string"], enum=[None, *CHOICES["pools"]],
                      description="target pool (migrate)"),
        "mechanism": Param("auto", enum=CHOICES["mechanisms"],
                           description="auto: the cost rule a policy's grant uses, the smallest outage the pool "
                                       "allows: live on a standalone pool when whole executors and the state's key "
                                       "groups allow it; else active_backup with room for both runs, in_driver, "
                                       "prestaged or pause_resume. The task log names the one chosen and why."),
        "reconfiguration": Param(None, type=["null", "integer"], minimum=1,
                                 description="resume_pending: the granted reconfiguration to realize (re-plan sets "
                                             "it); empty: the stage's pending or left-running one"),
    },
    # Not retried: a failed reconfiguration was rolled back, and repeating it is a new decision.
    default_args={"retries": 0},
)
def streamops_reconfigure():
    @task(pool="streamops_reconfigure")
    def reconfigure(params: dict | None = None, dag_run=None) -> dict:
        from streamops.orchestrate import tasks

        assert params is not None  # Airflow passes the run's Params (the None default marks it as context)
        user = getattr(dag_run, "triggering_user_name", None) or "airflow"
        return tasks.reconfigure(params["stage"], params["action"], params["cores"], params["partitions"],
                                 params["pool"], params["mechanism"], requested_by=f"user:{user} (airflow)",
                                 reconfiguration=params.get("reconfiguration"))

    reconfigure()


streamops_reconfigure()
