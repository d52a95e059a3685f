"""Changes of a stage's state partitions made by its driver: offline before the queries start
(a new run of a pause–resume), or inside the running driver (`InDriverChange`, the in_driver
mechanism). Each phase is stamped on the reconfiguration that asked for it."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from spark_apps.executors import SCALING
from spark_apps.query_supervisor import QuerySupervisor, Restart
from streamops import checkpoint_layout as checkpoint
from streamops.agent.agent import StageAgent
from streamops.agent.metrics import StageContext
from streamops.checkpoint_layout import QUERIES
from streamops.registry import Stage, input_dir
from streamops.run_spec import CommandOutcome, RepartitionArgs
from streamops.store import ledger
from streamops.store import reconfigurations as rstore

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("streamops.run_stage")


def stamp(reconfiguration_id: int, phase: str) -> None:
    rstore.stamp(reconfiguration_id, phase)
    log.info("action=reconfigure phase=%s reconfiguration=%d", phase, reconfiguration_id)


def finish_pending_batch(spark: SparkSession, stage: Stage, ctx: StageContext, input_dir: Path | None, ckpt: Path,
                         agent: StageAgent,
                         excluded: dict[str, list[str]] | None = None) -> bool:
    """Run the batch an interrupted stop left planned but uncommitted (offsets/N without
    commits/N), with the checkpoint's old layout, and stop. The repartitioner refuses such a
    checkpoint (LAST_BATCH_FAILED), and a stage that runs batches back to back cannot be
    stopped between two of them, so the new run finishes the old run's batch first."""
    from spark_apps.stage import start_stage_queries

    planned, committed = checkpoint.last_planned_batch(ckpt), checkpoint.last_committed_batch(ckpt)
    if planned is None or committed == planned:
        return False
    log.info("action=finish-pending-batch batch=%d last_committed=%s", planned, committed)
    queries = start_stage_queries(spark, stage, ctx, input_dir, ckpt, on_commit=agent.on_commit,
                                  abort=agent.stop_requested, once=True, exclude_files=excluded)
    for q in queries:
        q.awaitTermination()
    if checkpoint.last_committed_batch(ckpt) != planned:
        raise RuntimeError(f"the pending batch {planned} did not commit; last committed is "
                           f"{checkpoint.last_committed_batch(ckpt)}")
    return True


def repartition_offline(spark: SparkSession, stage: Stage, ckpt: Path, partitions: int) -> float | None:
    """Rewrite the checkpoint's state to `partitions` before the query starts (it must be
    stopped: it is not started yet). Needs RocksDB state and at least one committed batch,
    and no pending batch (see finish_pending_batch).
    Returns the seconds it took, or None when there was nothing to do."""
    current = checkpoint.state_partitions(ckpt)
    # No state in the checkpoint: the query is stateless (or has not committed yet); nothing to do.
    if current in (None, partitions) or checkpoint.last_committed_batch(ckpt) is None:
        return None
    started = time.monotonic()
    spark._streamingCheckpointManager.repartition(str(ckpt), partitions)
    took = time.monotonic() - started
    log.info("action=repartition partitions=%d->%d took %.1fs", current, partitions, took)
    return took


def prepare_state(spark: SparkSession, stage: Stage, ctx: StageContext, ckpt: Path, agent: StageAgent,
                  excluded: dict[str, list[str]],
                  partitions: int, reconfiguration_id: int | None) -> float | None:
    """Bring a stopped checkpoint's state to `partitions` before the queries (re)start: finish a
    batch an interrupted stop left pending (the repartitioner refuses it), repartition, and stamp
    `state_ready` on the reconfiguration. Returns the repartition's seconds, or None."""
    if checkpoint.state_partitions(ckpt) not in (None, partitions):
        finish_pending_batch(spark, stage, ctx, input_dir(stage), ckpt, agent, excluded)
    took = repartition_offline(spark, stage, ckpt, partitions)
    if reconfiguration_id:
        stamp(reconfiguration_id, "state_ready")
        if took is not None:
            rstore.record_repartition(reconfiguration_id, took * 1000)
    return took


class InDriverChange:
    """A `repartition` command (the `in_driver` mechanism): stop the queries at a batch boundary,
    repartition the state in this driver's own session, restart the queries, no new JVM. On a
    standalone pool the executors change too: added before the pause (they start while the query
    still runs), removed during the pause (idle then: no task is killed). Holds `lock`, which the
    main loop's supervisor takes, so nothing restarts a query while it is paused on purpose."""

    def __init__(self, spark: SparkSession, agent: StageAgent, stage: Stage, ckpt: Path, deployment_id: int,
                 restart: Restart, supervisor: QuerySupervisor, executor_cores: int, standalone: bool) -> None:
        self.spark, self.agent, self.stage, self.ckpt, self.deployment_id = spark, agent, stage, ckpt, deployment_id
        self.restart, self.supervisor = restart, supervisor
        self.executor_cores, self.standalone = executor_cores, standalone
        self.lock = threading.Lock()

    def __call__(self, args: RepartitionArgs) -> CommandOutcome:
        partitions, cores = args.partitions, args.cores or self.agent.ctx.cores
        if cores != self.agent.ctx.cores and not self.standalone:
            return CommandOutcome(status="refused", detail="a local driver's cores are fixed at start")
        with SCALING:
            return CommandOutcome(status="done", detail=self._change(partitions, cores, args))

    def _change(self, partitions: int, cores: int, args: RepartitionArgs) -> str:
        rid, timeout_s = args.reconfiguration_id, args.timeout_s
        before, executors = self.agent.ctx.cores, []
        if cores > before:
            executors.append(self._executors(cores, timeout_s))
        with self.lock:
            paused = time.monotonic()
            self.agent.stop_at_batch_boundary(args.stop_deadline_s)
            if rid:
                stamp(rid, "stopped")
            self.spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
            took = prepare_state(self.spark, self.stage, self.agent.ctx, self.ckpt, self.agent,
                                 self.supervisor.excluded, partitions, rid)
            ledger.record_partitions(self.deployment_id, partitions)
            # the paused queries produce no progress: their listener reads the new context from now
            self.agent.state.change(cores=cores, state_partitions=partitions)
            if cores < before:  # now, while no task runs: nothing re-runs, and no wait for the removal
                executors.append(self._executors(cores, timeout_s, wait=False))
            self.agent.state.change(queries=[self.restart(q, self.supervisor.excluded[q]) for q in QUERIES])
            if rid:
                stamp(rid, "restarted")
            restarted_in = time.monotonic() - paused
        log.info("action=in-driver-change partitions=%d cores=%d paused=%.1fs", partitions, cores, restarted_in)
        return (f"{partitions} state partitions, queries back in {restarted_in:.1f}s "
                f"(repartition {took or 0:.1f}s){'; ' + '; '.join(executors) if executors else ''}")

    def _executors(self, cores: int, timeout_s: float, wait: bool = True) -> str:
        from spark_apps.executors import scale_to

        return scale_to(self.spark.sparkContext, cores // self.executor_cores, timeout_s, wait=wait)
