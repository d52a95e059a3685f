"""One entry point for every stage driver: load the run's spec, build the queries, attach the
agent, run until told to stop, and stop cleanly at a batch boundary.

    python spark_apps/run_stage.py --deployment-id N

The `deployments` row is the single source of the run's configuration (stage spec snapshot,
cores, state partitions, checkpoint), so a restart of the same row is the same run.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
import time
from pathlib import Path

from streamops.agent.agent import StageAgent
from streamops.agent.metrics import StageContext
from streamops.registry import Stage, resolve_path
from streamops.store import db

log = logging.getLogger("streamops.run_stage")


def _finish(dep_id: int, status: str, reason: str, exit_code: int) -> None:
    with db.engine().begin() as conn:
        conn.execute(db.query("deployment_finished"),
                     {"id": dep_id, "status": status, "reason": reason, "exit_code": exit_code})


def run(deployment_id: int, stop_deadline_s: float = 30.0) -> int:
    with db.engine().connect() as conn:
        dep = conn.execute(db.query("deployment_get"), {"id": deployment_id}).one()
    stage = Stage.model_validate(dep.config["spec"])
    sid = dep.stage_id
    logging.basicConfig(
        level=logging.INFO, stream=sys.stdout,
        format=f"%(asctime)s %(levelname)s [stage={sid} deployment={deployment_id}] %(name)s: %(message)s",
    )
    ctx = StageContext(sid, deployment_id, dep.cores, dep.state_partitions, stage.trigger_interval_ms)
    input_dir = resolve_path(stage.source.path)
    checkpoint = Path(dep.checkpoint)
    log.info("action=start cores=%d partitions=%d input=%s checkpoint=%s", dep.cores, dep.state_partitions, input_dir, checkpoint)

    # Imported here: the JVM start is the slow part and is logged as such.
    from spark_apps.stage import build_session, start_stage_queries

    spark = build_session(f"streamops:{sid}", dep.cores, dep.state_partitions)
    from streamops.plan.options import OperatorOptions

    opts = OperatorOptions.from_params(stage.policy.params)
    agent = StageAgent(spark, ctx, input_dir, checkpoint, operator_period_s=opts.local_period_s)
    signal.signal(signal.SIGTERM, lambda *_: agent.request_stop("SIGTERM"))
    signal.signal(signal.SIGINT, lambda *_: agent.request_stop("SIGINT"))
    agent.attach()
    status, reason, code = "stopped", None, 0
    try:
        agent.queries = start_stage_queries(spark, stage, ctx, input_dir, checkpoint, on_commit=agent.on_commit,
                                            abort=agent.stop_requested)
        with db.engine().begin() as conn:
            conn.execute(db.query("deployment_running"), {
                "id": deployment_id, "driver_id": spark.sparkContext.applicationId,
                "pid": os.getpid(), "host": socket.gethostname(),
            })
        log.info("action=running driver=%s", spark.sparkContext.applicationId)
        while not agent.stop_requested.wait(1.0):
            dead = [q for q in agent.queries if not q.isActive]
            if dead:
                exc = dead[0].exception()
                status, code = "failed", 1
                reason = f"query {dead[0].name} terminated: {str(exc).splitlines()[0] if exc else 'no exception'}"
                log.error("action=failed %s", reason)
                break
        if status == "stopped":
            at_boundary = agent.stop_at_batch_boundary(stop_deadline_s)
            reason = f"{agent.stop_reason}; {'at a batch boundary' if at_boundary else 'interrupted a batch at the deadline'}"
    except Exception as e:
        status, code, reason = "failed", 1, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        log.exception("action=failed")
    finally:
        for q in agent.queries:
            if q.isActive:
                q.stop()
        agent.detach()
        # Best effort: with the database gone the run still exits cleanly; the launcher or the
        # watchdog records the outcome instead.
        try:
            _finish(deployment_id, status, reason or status, code)
            if agent.stop_command_id is not None:
                with db.engine().begin() as conn:
                    conn.execute(db.query("command_done"), {"id": agent.stop_command_id, "outcome": reason})
        except Exception as e:
            log.warning("action=exit could not record the outcome: %s", str(e).splitlines()[0])
        spark.stop()
    log.info("action=exit status=%s reason=%s", status, reason)
    return code


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--deployment-id", type=int, required=True, help="the deployments row this run realizes")
    p.add_argument("--stop-deadline-s", type=float, default=30.0,
                   help="how long a stop waits for the running batch before interrupting it")
    args = p.parse_args(argv)
    started = time.monotonic()
    try:
        return run(args.deployment_id, args.stop_deadline_s)
    finally:
        logging.getLogger("streamops.run_stage").info("action=exit after %.1fs", time.monotonic() - started)


if __name__ == "__main__":
    sys.exit(main())
