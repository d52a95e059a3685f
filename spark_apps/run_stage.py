"""One entry point for every stage driver: load the run's spec, build the queries, attach the
agent, run until told to stop, and stop cleanly at a batch boundary.

    python spark_apps/run_stage.py --deployment-id N

The `deployments` row is the single source of the run's configuration (stage spec snapshot,
cores, state partitions, checkpoint, the Operator Manager to run), so a restart of the same row
is the same run. `StageDriver` builds the run's parts in order; the query supervisor, the
in-driver change, the fault actions and the warm spare live in modules of their own.
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
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from spark_apps.executors import ExecutorKeeper, scale_executors
from spark_apps.fault_actions import fault_actions
from spark_apps.query_supervisor import QuerySupervisor
from spark_apps.standby import standby
from spark_apps.state_change import InDriverChange, prepare_state, stamp
from streamops import checkpoint_repair
from streamops.agent.agent import StageAgent
from streamops.agent.faults import BatchPause, FaultInjector
from streamops.agent.input_watch import Landing
from streamops.agent.metrics import SinkStats, StageContext
from streamops.agent.poison import PoisonBook
from streamops.agent.sinks import retry_idempotent
from streamops.checkpoint_layout import QUERIES
from streamops.plan.model import Request
from streamops.registry import Pool, input_dir
from streamops.run_spec import CommandHandlers, CommandOutcome, RunSpec
from streamops.spark_cluster import RUN_MASTER_ENV
from streamops.store import ledger
from streamops.waiting import wait_until

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger("streamops.run_stage")

# stage id → the reconfiguration requests it made this period (`control.request_for_stage`)
OperatorManager = Callable[[str], Iterable[Request]]


def quiesce(spark: SparkSession, timeout_s: float = 10.0) -> None:
    """Cancel the jobs a stop past its deadline left running and wait for them to end: stopping
    the context under running tasks makes Spark log ERRORs (a task result arriving at a closed
    pool, a shuffle fetch cut off) for what is a planned stop."""
    sc = spark.sparkContext
    sc.cancelAllJobs()
    wait_until(lambda: not sc.statusTracker().getActiveJobsIds(), timeout_s, interval_s=0.1)


# A database away at start-up (restarting, stalled) delays the start instead of failing it: the
# starter waits on the run's row, and a start that fails costs one of the stage's restarts (the
# soak's PostgreSQL SIGSTOP met a recovery's driver at `mark_running`).
START_DB_BUDGET_S = 120.0
# A deploy's warm-up runs the query this many times: one round left a fresh demo's first five
# batches at 9.1, 8.3, 5.7, 4.9 and 4.9 s against 2.6 s later (hibench, on 2 cores). A round runs
# the per-batch paths once; the JIT compiles them after several. A deploy's start is not
# downtime (the first run is in service from its first input), so the rounds cost no SLO.
WARM_UP_ROUNDS = int(os.environ.get("STREAMOPS_WARM_UP_ROUNDS", "3"))


def mark_running(deployment_id: int, driver_id: str, pid: int, host: str, ui_url: str | None) -> None:
    retry_idempotent(lambda: ledger.mark_running(deployment_id, driver_id, pid, host, ui_url),
                     "marking the run running", START_DB_BUDGET_S)


def operator_manager_for(spec: RunSpec) -> OperatorManager | None:
    """The control plane's Operator Manager when the run's row asks for it; None: this run makes no requests."""
    if not spec.operator_manager:
        return None
    # The one import of the control plane by driver code (pyproject.toml, [tool.importlinter]);
    # imported here, so that a run without requests does not load it.
    from streamops.control import request_for_stage

    return request_for_stage


class StageDriver:
    """One run of a stage, built in order: its row and spec, the Spark session (and, on a
    standalone pool, its admitted executors), the agent with its command handlers and periodic
    Operator Manager, the query supervisor and the in-driver change. `run` starts the queries,
    supervises them until told to stop, and stops at a batch boundary."""

    agent: StageAgent  # built after the fault injector, which reaches it through a lambda

    def __init__(self, deployment_id: int, *, operator_manager: OperatorManager | None = None,
                 stop_deadline_s: float = 30.0, spark: SparkSession | None = None) -> None:
        self.deployment_id, self.stop_deadline_s = deployment_id, stop_deadline_s
        self.dep = retry_idempotent(lambda: ledger.deployment(deployment_id), "reading the run's row",
                                    START_DB_BUDGET_S)
        self.run_spec = RunSpec.of(self.dep.config)
        self.stage = self.run_spec.spec
        self.sid = self.dep.stage_id
        self.operator_manager = operator_manager
        self._configure_logging()
        self.ctx = StageContext(self.sid, deployment_id, self.dep.cores, self.dep.state_partitions,
                                self.stage.trigger_interval_ms)
        self.input_dir, self.ckpt = input_dir(self.stage), Path(self.dep.checkpoint)  # no directory: Kafka
        log.info("action=start cores=%d partitions=%d input=%s checkpoint=%s", self.dep.cores,
                 self.dep.state_partitions, self.input_dir, self.ckpt)
        self.master = os.environ.get(RUN_MASTER_ENV)  # set by a standalone pool's launcher
        self.executor_cores = self.run_spec.pool.executor_cores
        self.spark = spark or self._session(self.run_spec.pool)
        self._ship_code()
        if spark is not None and self.master:  # an adopted cluster spare holds no executor yet
            self._take_executors()
        if spark is None and self.run_spec.warm_up:  # a spare's session is warm already
            self._warm_up()
        self.pause = BatchPause()
        # The quarantine query's first batch waits for the main query's first commit: on a cold
        # executor the two first batches would otherwise share its cores (docs/reconfiguration.md).
        self.main_committed = threading.Event()
        self.injector = FaultInjector(self.sid, deployment_id, self.dep.role,
                                      fault_actions(self.spark, lambda: self.agent, self.pause, bool(self.master)),
                                      schedule=self.stage.faults)
        self.agent = self._agent()
        self.supervisor = QuerySupervisor(
            self.stage, self.ckpt, PoisonBook(None, self.sid, deployment_id, self.stage.record_schema,
                                              self.stage.max_record_bytes, role=self.dep.role),
            self.restart, self.agent.stop_requested, fails_alone=self._fails_alone, on_error=self.agent.note_error,
            by_file=self.input_dir is not None)
        self.in_driver = InDriverChange(self.spark, self.agent, self.stage, self.ckpt, deployment_id, self.restart,
                                        self.supervisor, self.executor_cores, standalone=bool(self.master))

    def _configure_logging(self) -> None:
        where = f"[stage={self.sid} deployment={self.deployment_id}]"
        logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                            format=f"%(asctime)s %(levelname)s {where} %(name)s: %(message)s")
        logging.getLogger("py4j").setLevel(logging.WARNING)  # a line per listener callback otherwise

    def _session(self, pool: Pool) -> SparkSession:
        # Imported here: the JVM start is the slow part and is logged as such.
        from spark_apps.stage import build_session, ui_port

        cluster = dict(master=self.master, executor_cores=self.executor_cores, executor_memory=pool.executor_memory,
                       max_cores=max(self.stage.cores.max, self.dep.cores)) if self.master else {}
        spark = build_session(f"streamops:{self.sid}", self.dep.cores, self.dep.state_partitions,
                              extra_conf=self.run_spec.speculation if self.master else None,
                              ui_port=ui_port(), **cluster)
        # The executors admitted at registration: wait for them (and trim any a master launched past them).
        if self.master:
            from spark_apps.executors import scale_to

            log.info("action=executors %s", scale_to(spark.sparkContext, self.dep.cores // self.executor_cores,
                                                     settle=True))
        return spark

    def _ship_code(self) -> None:
        """The job's code, packaged at admission, to every executor (and onto this driver's path):
        a worker on another host runs exactly the code this run was admitted with."""
        from spark_apps.job_runtime import ship_code

        if ship_code(self.spark, self.run_spec.code_archive):
            log.info("action=ship-code job=%s sha256=%s", self.stage.job, (self.run_spec.code_sha256 or "")[:12])
        if self.run_spec.code_archive:
            # The driver imports the archive too, never the code directories: they may hold newer
            # code by now (an upgrade's rollback restarts the code the old run was admitted with).
            self.stage = self.stage.model_copy(update={"code": [self.run_spec.code_archive]})

    def _take_executors(self) -> None:
        from spark_apps.executors import scale_to

        log.info("action=executors %s (a warm spare adopted)",
                 scale_to(self.spark.sparkContext, self.dep.cores // self.executor_cores))

    def _warm_up(self) -> None:
        """The stage's query once over a sample before the real one starts, so that its first batch
        is not the one that pays for class loading, code generation and the Python workers' start
        (docs/reconfiguration.md, "Cold starts"). Best effort: a failed warm-up only costs time."""
        from spark_apps.stage import warm_up

        started = time.monotonic()
        try:
            lines, rounds = warm_up(self.spark, self.stage, self.dep.cores, self.dep.state_partitions,
                                    rounds=WARM_UP_ROUNDS)
        except Exception as e:
            log.warning("action=warm-up failed: %s", str(e).splitlines()[0] if str(e) else type(e).__name__)
            return
        log.info("action=warm-up took %.1fs on %d sample lines (rounds: %s)", time.monotonic() - started, lines,
                 ", ".join(f"{r:.1f}s" for r in rounds))

    def _agent(self) -> StageAgent:
        handlers = CommandHandlers(
            repartition=lambda args: self.in_driver(args),
            fault=lambda args: CommandOutcome(status="done", detail=self.injector.inject(
                args.kind, args.magnitude_s, args.source)),
            scale=(lambda args: scale_executors(self.spark, self.agent, args, self.executor_cores))
            if self.master else None)
        periodic: list[tuple[str, float, Callable[[], object]]] = []
        if self.operator_manager is not None:
            period_s = self.stage.policy.params.local_period_s
            periodic.append(("Operator Manager", period_s, self._ask_operator_manager))
        else:
            log.warning("action=start the run's row asks for no Operator Manager: this run makes no requests")
        source = self.stage.source
        landing = Landing(self.input_dir, source.landing_quiet_s, source.landing_markers) \
            if source.kind == "files" and self.input_dir is not None else None
        return StageAgent(self.spark, self.ctx, self.input_dir, self.ckpt, periodic=periodic, handlers=handlers,
                          landing=landing)

    def _ask_operator_manager(self) -> None:
        """Every local period: analyze the stage's window and *request*; the Application Manager
        decides at the next re-plan."""
        assert self.operator_manager is not None  # scheduled only when the run has one
        for r in self.operator_manager(self.sid):
            log.info("action=request %s target=%s gain=%.3g cost=%.0fms (%s)",
                     r.action, r.target_cores or r.target_pool, r.gain, r.cost_ms, r.reason)

    def restart(self, which: str, excluded: list[str]) -> StreamingQuery:
        """Start query `which` (agent.ctx: an in-driver change updates cores and partitions)."""
        from spark_apps.stage import start_query

        return start_query(which, self.spark, self.stage, self.agent.ctx, self.input_dir, self.ckpt,
                           on_commit=self._on_commit, abort=self.agent.stop_requested,
                           fault=self.run_spec.fault, exclude_files=excluded, pause=self.pause.take,
                           hold_until=self.main_committed if which == "quarantine" else None)

    def _on_commit(self, stats: SinkStats) -> None:
        self.main_committed.set()
        self.agent.on_commit(stats)
        self.supervisor.on_commit(stats.batch_id)

    def _fails_alone(self, files: tuple[str, ...]) -> str | None:
        from spark_apps.stage import fails_alone

        return fails_alone(self.spark, self.stage, self.agent.ctx, files, self.run_spec.fault)

    def run(self) -> int:
        """Start, supervise until told to stop, stop at a batch boundary; the exit code."""
        signal.signal(signal.SIGTERM, lambda *_: self.agent.request_stop("SIGTERM"))
        signal.signal(signal.SIGINT, lambda *_: self.agent.request_stop("SIGINT"))
        self.agent.attach()
        status, reason, code = "stopped", None, 0
        try:
            self._start_queries()
            status, reason, code = self._supervise()
        except Exception as e:
            status, code, reason = "failed", 1, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            log.exception("action=failed")
        finally:
            self._shut_down(status, reason, code)
        log.info("action=exit status=%s reason=%s", status, reason)
        return code

    def _start_queries(self) -> None:
        rid = self.run_spec.reconfiguration_id
        # start_stage repaired a torn checkpoint before admission; a driver started any other way
        # (run_stage.py by hand) is covered here, now that this run is the checkpoint's only user.
        checkpoint_repair.repair_stage(self.ckpt)
        prepare_state(self.spark, self.stage, self.ctx, self.ckpt, self.agent, self.supervisor.excluded,
                      self.dep.state_partitions, rid)
        self.agent.state.change(queries=[self.restart(q, self.supervisor.excluded[q]) for q in QUERIES])
        self.agent.queries_started()
        if rid:
            stamp(rid, "restarted")
        sc = self.spark.sparkContext
        # The Spark UI's URL as Spark bound it: the launcher's port, or a later one if that was
        # taken meanwhile; None with the UI off (an adopted spare's UI is the spare's).
        mark_running(self.deployment_id, sc.applicationId, os.getpid(), socket.gethostname(), sc.uiWebUrl)
        log.info("action=running driver=%s ui=%s", sc.applicationId, sc.uiWebUrl or "off")
        self.injector.start()

    def _supervise(self) -> tuple[str, str | None, int]:
        keeper = ExecutorKeeper(self.spark, self.agent, self.executor_cores) if self.master else None
        while not self.agent.stop_requested.wait(1.0):
            if keeper is not None:
                keeper.check()
            with self.in_driver.lock:  # the only other writer of the queries holds it too
                queries = list(self.agent.queries)
                why = self.supervisor.check(queries)  # restarts a dead query in place
                self.agent.state.change(queries=queries)
            if why:
                log.error("action=failed %s", why)
                return "failed", why, 1
        at_boundary = self.agent.stop_at_batch_boundary(self.agent.stop_deadline_s or self.stop_deadline_s)
        how = "at a batch boundary" if at_boundary else "interrupted a batch at the deadline"
        return "stopped", f"{self.agent.stop_reason}; {how}", 0

    def _shut_down(self, status: str, reason: str | None, code: int) -> None:
        self.injector.close()
        for q in self.agent.queries:
            if q.isActive:
                q.stop()
        self.agent.detach()
        # Best effort: with the database gone the run still exits cleanly; the launcher or the
        # watchdog records the outcome instead.
        try:
            ledger.finish(self.deployment_id, status, reason or status, code)
            if self.agent.stop_command_id is not None:
                ledger.command_done(self.agent.stop_command_id,
                                    str(CommandOutcome(status="done", detail=reason or "")))
        except Exception as e:
            log.warning("action=exit could not record the outcome: %s", str(e).splitlines()[0])
        quiesce(self.spark)
        self.spark.stop()


def run(deployment_id: int, stop_deadline_s: float = 30.0, spark: SparkSession | None = None) -> int:
    """Run deployment `deployment_id` with the Operator Manager its row names."""
    spec = RunSpec.of(ledger.deployment(deployment_id).config)
    return StageDriver(deployment_id, operator_manager=operator_manager_for(spec), stop_deadline_s=stop_deadline_s,
                       spark=spark).run()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--deployment-id", type=int, help="the deployments row this run realizes")
    p.add_argument("--standby", metavar="STAGE_ID", help="be a warm spare for this stage: wait on stdin for a "
                                                         "deployment id")
    p.add_argument("--cores", type=int, default=1, help="with --standby: local[cores]")
    p.add_argument("--ready-file", help="with --standby: touched once the session is up")
    p.add_argument("--executor-cores", type=int,
                   help=f"with --standby on a cluster pool (${RUN_MASTER_ENV}): the pool's executor size")
    p.add_argument("--executor-memory", default="1g", help="with --standby on a cluster pool: executor memory")
    p.add_argument("--stop-deadline-s", type=float, default=30.0,
                   help="how long a stop waits for the running batch before interrupting it")
    args = p.parse_args(argv)
    if args.standby:
        master = os.environ.get(RUN_MASTER_ENV)
        cluster = dict(master=master, executor_cores=args.executor_cores or 1,
                       executor_memory=args.executor_memory) if master else None
        return standby(args.standby, args.cores, args.ready_file,
                       lambda dep_id, spark: run(dep_id, args.stop_deadline_s, spark=spark), cluster=cluster)
    if args.deployment_id is None:
        p.error("--deployment-id is required (or --standby)")
    started = time.monotonic()
    try:
        return run(args.deployment_id, args.stop_deadline_s)
    finally:
        logging.getLogger("streamops.run_stage").info("action=exit after %.1fs", time.monotonic() - started)


if __name__ == "__main__":
    sys.exit(main())
