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
import threading
import time
from pathlib import Path
from typing import Callable

from spark_apps.executors import SCALING, ExecutorKeeper, scale_executors
from streamops.agent.agent import StageAgent
from streamops.agent.faults import BatchPause, FaultInjector
from streamops.agent.input_watch import Landing
from streamops.agent.metrics import SinkStats, StageContext
from streamops.agent.errors import is_transient
from streamops.agent.poison import FailedBatch, PoisonBook, error_signature, isolate
from streamops import checkpoint_layout as checkpoint
from streamops.checkpoint_layout import QUERIES, query_checkpoint
from streamops.registry import Stage, resolve_path
from streamops.spark_cluster import RUN_MASTER_ENV
from streamops.store import db, ledger
from streamops.store import reconfigurations as rstore
from streamops.waiting import wait_until

log = logging.getLogger("streamops.run_stage")


class QuerySupervisor:
    """Restarts a failed query in this driver (no new JVM) and, through the poison book, counts
    its failed batch: retried, quarantined whole after the stage's `poison_after_failures`, or
    (when the run itself looks broken) the run fails and the watchdog or the rollback takes over."""

    GENERIC_LIMIT = 3  # failures in a row that no batch can be blamed for

    def __init__(self, stage: Stage, ckpt: Path, book: PoisonBook, restart, stopping: threading.Event,
                 fails_alone: Callable[[tuple[str, ...]], str | None] | None = None):
        self.stage, self.ckpt, self.book, self.restart, self.stopping = stage, ckpt, book, restart, stopping
        self.fails_alone = fails_alone  # a dry run of some of a batch's files: its error, or None
        self.excluded = book.excluded_files()
        self.failures_in_a_row = 0
        self.open: dict[str, int] = {}  # query → the failed batch awaiting its commit

    def check(self, queries: list) -> str | None:
        """Restart what died; returns why the run must fail, or None."""
        for i, q in enumerate(queries):
            if q.isActive:
                continue
            which = QUERIES[i]
            exc = q.exception()
            text = str(exc) if exc else "the query stopped by itself"
            why, backoff_s = self._handle(which, text)
            if why:
                return f"query {q.name} terminated: {why}"
            if self.stopping.wait(backoff_s):
                return None  # a stop came while backing off: nothing to restart
            queries[i] = self.restart(which, self.excluded[which])
            log.info("action=restart-query query=%s excluded_files=%d", which, len(self.excluded[which]))
        self._closed_episodes()
        return None

    def _handle(self, which: str, text: str) -> tuple[str | None, float]:
        """(why the run must fail, or None; seconds to wait before the restart)."""
        error = error_signature(text)
        self.failures_in_a_row += 1
        backoff_s = min(2 ** self.failures_in_a_row, 30)
        if is_transient(text):
            log.warning("action=query-failed query=%s transient, restarting: %s", which, error)
            return None, backoff_s
        qckpt = query_checkpoint(which, self.ckpt)
        planned, committed = checkpoint.last_planned_batch(qckpt), checkpoint.last_committed_batch(qckpt)
        if planned is None or planned == committed:
            log.error("action=query-failed query=%s no batch to blame (%d in a row): %s", which,
                      self.failures_in_a_row, error)
            return (error if self.failures_in_a_row >= self.GENERIC_LIMIT else None), backoff_s
        fb = FailedBatch(which, planned, tuple(checkpoint.batch_files(qckpt, planned)), error)
        verdict = self.book.record(fb, self.stage.poison_after_failures)
        self.open[which] = planned
        if verdict.action == "fail":
            return f"{error} (batch {planned}: {verdict.why})", 0
        if verdict.action == "quarantine":
            blamed = fb.files
            if which == "main" and self.fails_alone is not None:
                blamed = isolate(fb.files, error, self.fails_alone)
                log.info("action=isolate batch=%d blamed %d of %d file(s): %s", planned, len(blamed), len(fb.files),
                         ", ".join(Path(f).name for f in blamed))
            self.book.quarantine(fb, verdict.attempts, blamed)
            self.excluded[which] = sorted(set(self.excluded[which]) | set(blamed))
            return None, 0  # the cause is gone: restart at once
        return None, backoff_s

    def on_commit(self, batch_id: int) -> None:
        """The main query committed a batch (called from its sink)."""
        self.failures_in_a_row = 0
        if "main" in self.open:
            self.open.pop("main")
            self.book.committed("main", batch_id)

    def _closed_episodes(self) -> None:
        if "quarantine" in self.open:
            done = checkpoint.last_committed_batch(query_checkpoint("quarantine", self.ckpt))
            if done is not None and done >= self.open["quarantine"]:
                self.open.pop("quarantine")
                self.book.committed("quarantine", done)


def _stamp(reconfiguration_id: int, phase: str) -> None:
    rstore.stamp(reconfiguration_id, phase)
    log.info("action=reconfigure phase=%s reconfiguration=%d", phase, reconfiguration_id)


def finish_pending_batch(spark, stage: Stage, ctx: StageContext, input_dir: Path, ckpt: Path, agent,
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


def repartition_offline(spark, stage: Stage, ckpt: Path, partitions: int) -> float | None:
    """Rewrite the checkpoint's state to `partitions` before the query starts (it must be
    stopped: it is not started yet). Needs RocksDB state and at least one committed batch,
    and no pending batch (see finish_pending_batch).
    Returns the seconds it took, or None when there was nothing to do."""
    current = checkpoint.state_partitions(ckpt)
    if not stage.stateful or current in (None, partitions) or checkpoint.last_committed_batch(ckpt) is None:
        return None
    started = time.monotonic()
    spark._streamingCheckpointManager.repartition(str(ckpt), partitions)
    took = time.monotonic() - started
    log.info("action=repartition partitions=%d->%d took %.1fs", current, partitions, took)
    return took


def prepare_state(spark, stage: Stage, ctx: StageContext, ckpt: Path, agent, excluded: dict[str, list[str]],
                  partitions: int, reconfiguration_id: int | None) -> float | None:
    """Bring a stopped checkpoint's state to `partitions` before the queries (re)start: finish a
    batch an interrupted stop left pending (the repartitioner refuses it), repartition, and stamp
    `state_ready` on the reconfiguration. Returns the repartition's seconds, or None."""
    if stage.stateful and checkpoint.state_partitions(ckpt) not in (None, partitions):
        finish_pending_batch(spark, stage, ctx, resolve_path(stage.source.path), ckpt, agent, excluded)
    took = repartition_offline(spark, stage, ckpt, partitions)
    if reconfiguration_id:
        _stamp(reconfiguration_id, "state_ready")
        if took is not None:
            rstore.record_repartition(reconfiguration_id, took * 1000)
    return took


def operator_manager(stage_id: str) -> None:
    """The stage's Operator Manager, every local period: analyze its window and *request*
    (`control.request_for_stage`; the Application Manager decides at the next re-plan)."""
    from streamops import control

    for r in control.request_for_stage(stage_id):
        log.info("action=request %s target=%s gain=%.3g cost=%.0fms (%s)",
                 r.action, r.target_cores or r.target_pool, r.gain, r.cost_ms, r.reason)


class InDriverChange:
    """A `repartition` command (the `in_driver` mechanism): stop the queries at a batch boundary,
    repartition the state in this driver's own session, restart the queries, no new JVM. On a
    standalone pool the executors change too: added before the pause (they start while the query
    still runs), removed during the pause (idle then: no task is killed). Holds `lock`, which the
    main loop's supervisor takes, so nothing restarts a query while it is paused on purpose."""

    def __init__(self, spark, agent: StageAgent, stage: Stage, ckpt: Path, deployment_id: int, restart,
                 supervisor: QuerySupervisor, executor_cores: int, standalone: bool):
        self.spark, self.agent, self.stage, self.ckpt, self.deployment_id = spark, agent, stage, ckpt, deployment_id
        self.restart, self.supervisor, self.executor_cores, self.standalone = restart, supervisor, executor_cores, standalone
        self.lock = threading.Lock()

    def __call__(self, args: dict) -> str:
        partitions, cores = int(args["partitions"]), int(args.get("cores") or self.agent.ctx.cores)
        if cores != self.agent.ctx.cores and not self.standalone:
            return "refused: a local driver's cores are fixed at start"
        with SCALING:
            return self._change(partitions, cores, args)

    def _change(self, partitions: int, cores: int, args: dict) -> str:
        from dataclasses import replace

        rid, timeout_s = args.get("reconfiguration_id"), float(args.get("timeout_s", 60))
        before, executors = self.agent.ctx.cores, []
        if cores > before:
            executors.append(self._executors(cores, timeout_s))
        with self.lock:
            paused = time.monotonic()
            self.agent.stop_at_batch_boundary(float(args.get("stop_deadline_s", 30)))
            if rid:
                _stamp(rid, "stopped")
            self.spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
            took = prepare_state(self.spark, self.stage, self.agent.ctx, self.ckpt, self.agent, self.supervisor.excluded,
                                 partitions, rid)
            ledger.record_partitions(self.deployment_id, partitions)
            self.agent.ctx = replace(self.agent.ctx, cores=cores, state_partitions=partitions)
            if cores < before:  # now, while no task runs: nothing re-runs, and no wait for the removal
                executors.append(self._executors(cores, timeout_s, wait=False))
            self.agent.queries = [self.restart(q, self.supervisor.excluded[q]) for q in QUERIES]
            if rid:
                _stamp(rid, "restarted")
            restarted_in = time.monotonic() - paused
        log.info("action=in-driver-change partitions=%d cores=%d paused=%.1fs", partitions, cores, restarted_in)
        return (f"done: {partitions} state partitions, queries back in {restarted_in:.1f}s "
                f"(repartition {took or 0:.1f}s){'; ' + '; '.join(executors) if executors else ''}")

    def _executors(self, cores: int, timeout_s: float, wait: bool = True) -> str:
        from spark_apps.executors import scale_to

        return scale_to(self.spark.sparkContext, cores // self.executor_cores, timeout_s, wait=wait)


def fault_actions(spark, agent, pause: BatchPause, standalone: bool) -> dict:
    """What each injected fault does to this driver (streamops.agent.faults)."""

    def kill_driver(_):
        log.warning("action=fault driver_kill: SIGKILL to the driver's process group")
        logging.shutdown()
        os.killpg(os.getpgid(0), signal.SIGKILL)  # the JVM too, as a lost machine would
        return "killed"

    def cut_heartbeat(seconds):
        agent().heartbeat_cut_until = time.monotonic() + (seconds or 0)
        return f"no heartbeat for {seconds or 0:.1f}s"

    def db_outage(seconds):
        # Half a second later: the command that asked for it is acknowledged first.
        threading.Timer(0.5, db.inject_outage, [seconds or 0]).start()
        return f"database unreachable for {seconds or 0:.1f}s"

    def kill_executor(_):
        from spark_apps.executors import kill_one

        return kill_one(spark.sparkContext)

    actions = {"slow_batch": pause.add, "driver_kill": kill_driver, "heartbeat_cut": cut_heartbeat,
               "db_outage": db_outage}
    if standalone:  # local mode has no executor to kill
        actions["executor_kill"] = kill_executor
    return actions


def standby(stage_id: str, cores: int, ready_file: str) -> int:
    """A warm spare: build the session and run the stage's query once over a sample of its input
    into no sink (stage.warm_up), then wait on stdin for the deployment to run (the supervisor's
    failover); end quietly if stdin closes."""
    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format=f"%(asctime)s %(levelname)s [stage={stage_id} standby] %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    from spark_apps.stage import build_session, warm_up

    started = time.monotonic()
    spark = build_session(f"streamops:{stage_id}", cores, 2)
    row = ledger.stage_row(stage_id)
    sampled = 0
    if row is not None:
        stage = Stage.model_validate(row.spec)
        try:
            sampled = warm_up(spark, stage, cores, row.state_partitions)
        except Exception as e:  # a warm-up is an optimisation: the spare still saves the JVM start
            log.warning("action=standby warm-up failed: %s", str(e).splitlines()[0] if str(e) else type(e).__name__)
    Path(ready_file).touch()
    log.info("action=standby ready in %.1fs (local[%d], warm-up on %d input lines)", time.monotonic() - started,
             cores, sampled)
    line = sys.stdin.readline().strip()
    if not line:
        log.info("action=standby released")
        spark.stop()
        return 0
    for h in logging.getLogger().handlers[:]:  # run() logs with the deployment in each line
        logging.getLogger().removeHandler(h)
    return run(int(line), spark=spark)


def quiesce(spark, timeout_s: float = 10.0) -> None:
    """Cancel the jobs a stop past its deadline left running and wait for them to end: stopping
    the context under running tasks makes Spark log ERRORs (a task result arriving at a closed
    pool, a shuffle fetch cut off) for what is a planned stop."""
    sc = spark.sparkContext
    sc.cancelAllJobs()
    wait_until(lambda: not sc.statusTracker().getActiveJobsIds(), timeout_s, interval_s=0.1)


def run(deployment_id: int, stop_deadline_s: float = 30.0, spark=None) -> int:
    dep = ledger.deployment(deployment_id)
    stage = Stage.model_validate(dep.config["spec"])
    sid = dep.stage_id
    logging.basicConfig(
        level=logging.INFO, stream=sys.stdout,
        format=f"%(asctime)s %(levelname)s [stage={sid} deployment={deployment_id}] %(name)s: %(message)s",
    )
    logging.getLogger("py4j").setLevel(logging.WARNING)  # a line per listener callback otherwise
    ctx = StageContext(sid, deployment_id, dep.cores, dep.state_partitions, stage.trigger_interval_ms)
    input_dir = resolve_path(stage.source.path)
    ckpt = Path(dep.checkpoint)
    log.info("action=start cores=%d partitions=%d input=%s checkpoint=%s", dep.cores, dep.state_partitions, input_dir, ckpt)

    # Imported here: the JVM start is the slow part and is logged as such.
    from spark_apps.stage import build_session, fails_alone, start_query

    pool = dep.config.get("pool") or {}
    master = os.environ.get(RUN_MASTER_ENV)  # set by a standalone pool's launcher
    executor_cores = int(pool.get("executor_cores", 1))
    spark = spark or build_session(f"streamops:{sid}", dep.cores, dep.state_partitions,
                                   extra_conf=dep.config.get("speculation") if master else None, **(dict(
        master=master, executor_cores=executor_cores, executor_memory=pool.get("executor_memory", "1g"),
        max_cores=max(stage.cores.max, dep.cores)) if master else {}))
    if master:  # the executors admitted at registration: wait for them (and trim any a master launched past them)
        from spark_apps.executors import scale_to

        log.info("action=executors %s", scale_to(spark.sparkContext, dep.cores // executor_cores, settle=True))
    from streamops.plan.options import OperatorOptions

    opts = OperatorOptions.from_params(stage.policy.params)
    pause = BatchPause()
    injector = FaultInjector(sid, deployment_id, dep.role, fault_actions(spark, lambda: agent, pause, bool(master)),
                             schedule=stage.faults)
    handlers = {"repartition": lambda args: in_driver(args),
                "fault": lambda args: injector.inject(args["kind"], args.get("magnitude_s"), args.get("source", "cli"))}
    if master:
        handlers["scale"] = lambda args: scale_executors(spark, agent, args, executor_cores)
    agent = StageAgent(spark, ctx, input_dir, ckpt,
                       periodic=[("Operator Manager", opts.local_period_s, lambda: operator_manager(sid))],
                       handlers=handlers,
                       landing=Landing(input_dir, stage.source.landing_quiet_s, stage.source.landing_markers)
                       if stage.source.kind == "files" else None)
    signal.signal(signal.SIGTERM, lambda *_: agent.request_stop("SIGTERM"))
    signal.signal(signal.SIGINT, lambda *_: agent.request_stop("SIGINT"))
    agent.attach()
    book = PoisonBook(None, sid, deployment_id, stage.input_kind, stage.max_record_bytes, role=dep.role)

    def restart(which: str, excluded: list[str]):  # agent.ctx: an in-driver change updates cores and partitions
        return start_query(which, spark, stage, agent.ctx, input_dir, ckpt, on_commit=on_commit,
                           abort=agent.stop_requested, fault=dep.config.get("fault"), exclude_files=excluded,
                           pause=pause.take)

    def on_commit(stats: SinkStats) -> None:
        agent.on_commit(stats)
        supervisor.on_commit(stats.batch_id)

    supervisor = QuerySupervisor(stage, ckpt, book, restart, agent.stop_requested,
                                 fails_alone=lambda files: fails_alone(spark, stage, agent.ctx, files,
                                                                       dep.config.get("fault")))
    in_driver = InDriverChange(spark, agent, stage, ckpt, deployment_id, restart, supervisor, executor_cores,
                               standalone=bool(master))
    status, reason, code = "stopped", None, 0
    reconfiguration_id = dep.config.get("reconfiguration_id")
    try:
        prepare_state(spark, stage, ctx, ckpt, agent, supervisor.excluded, dep.state_partitions, reconfiguration_id)
        agent.queries = [restart(q, supervisor.excluded[q]) for q in QUERIES]
        agent.queries_started()
        if reconfiguration_id:
            _stamp(reconfiguration_id, "restarted")
        ledger.mark_running(deployment_id, spark.sparkContext.applicationId, os.getpid(), socket.gethostname())
        log.info("action=running driver=%s", spark.sparkContext.applicationId)
        injector.start()
        keeper = ExecutorKeeper(spark, agent, executor_cores) if master else None
        while not agent.stop_requested.wait(1.0):
            if keeper is not None:
                keeper.check()
            with in_driver.lock:
                why = supervisor.check(agent.queries)
            if why:
                status, code, reason = "failed", 1, why
                log.error("action=failed %s", reason)
                break
        if status == "stopped":
            at_boundary = agent.stop_at_batch_boundary(agent.stop_deadline_s or stop_deadline_s)
            reason = f"{agent.stop_reason}; {'at a batch boundary' if at_boundary else 'interrupted a batch at the deadline'}"
    except Exception as e:
        status, code, reason = "failed", 1, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        log.exception("action=failed")
    finally:
        injector.close()
        for q in agent.queries:
            if q.isActive:
                q.stop()
        agent.detach()
        # Best effort: with the database gone the run still exits cleanly; the launcher or the
        # watchdog records the outcome instead.
        try:
            ledger.finish(deployment_id, status, reason or status, code)
            if agent.stop_command_id is not None:
                ledger.command_done(agent.stop_command_id, reason)
        except Exception as e:
            log.warning("action=exit could not record the outcome: %s", str(e).splitlines()[0])
        quiesce(spark)
        spark.stop()
    log.info("action=exit status=%s reason=%s", status, reason)
    return code


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--deployment-id", type=int, help="the deployments row this run realizes")
    p.add_argument("--standby", metavar="STAGE_ID", help="be a warm spare for this stage: wait on stdin for a "
                                                         "deployment id")
    p.add_argument("--cores", type=int, default=1, help="with --standby: local[cores]")
    p.add_argument("--ready-file", help="with --standby: touched once the session is up")
    p.add_argument("--stop-deadline-s", type=float, default=30.0,
                   help="how long a stop waits for the running batch before interrupting it")
    args = p.parse_args(argv)
    if args.standby:
        return standby(args.standby, args.cores, args.ready_file)
    if args.deployment_id is None:
        p.error("--deployment-id is required (or --standby)")
    started = time.monotonic()
    try:
        return run(args.deployment_id, args.stop_deadline_s)
    finally:
        logging.getLogger("streamops.run_stage").info("action=exit after %.1fs", time.monotonic() - started)


if __name__ == "__main__":
    sys.exit(main())
