"""The agent inside a stage's driver: metrics listener, heartbeat, command poller.

It reports; it never decides. Writes go through one background writer so that a slow or
absent database delays reports instead of stalling Spark's listener bus or killing the stage.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine, Row
from sqlalchemy.exc import DBAPIError

from streamops.agent.fencing import exit_fenced
from streamops.agent.input_watch import InputAudit, Landing
from streamops.agent.kafka_lag import TopicBacklog
from streamops.agent.metrics import ClockOffset, SinkStats, StageContext, progress_to_metrics, state_operators
from streamops.agent.run_state import RunState
from streamops.agent.writer import BufferedWriter
from streamops.checkpoint_layout import FileSourceBacklog, quarantine_checkpoint
from streamops.run_spec import CommandHandlers, CommandOutcome, StopArgs, command_args
from streamops.store import db
from streamops.waiting import wait_until

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.listener import (
        QueryIdleEvent,
        QueryProgressEvent,
        QueryStartedEvent,
        QueryTerminatedEvent,
        StreamingQueryListener,
    )
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger("streamops.agent")

# py4j logs a Python callback's exception (a foreachBatch) with its traceback, on one of these.
_PY4J_LOGGERS = ("py4j.clientserver", "py4j.java_gateway")
# What a Python callback sees when StreamingQuery.stop() interrupts its batch.
_INTERRUPTED = ("java.lang.InterruptedException", "java.io.InterruptedIOException",
                "java.nio.channels.ClosedByInterruptException")


def _listener_class() -> Callable[[StageAgent], StreamingQueryListener]:
    # Imported lazily: `streamops` never imports pyspark at module import time.
    from pyspark.sql.streaming.listener import StreamingQueryListener

    class MetricsListener(StreamingQueryListener):
        def __init__(self, agent: StageAgent) -> None:
            self.agent = agent

        def onQueryStarted(self, event: QueryStartedEvent) -> None:
            log.info("stage %s: query %s started (run %s)", self.agent.ctx.stage_id, event.name, event.runId)

        def onQueryProgress(self, event: QueryProgressEvent) -> None:
            if event.progress.name == self.agent.main_query_name:
                try:
                    self.agent.on_progress(json.loads(event.progress.json))
                except Exception:  # a report must never break the stage
                    log.exception("stage %s: could not record progress", self.agent.ctx.stage_id)

        def onQueryIdle(self, event: QueryIdleEvent) -> None:
            pass

        def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
            if event.exception:
                log.error("stage %s: query %s failed: %s", self.agent.ctx.stage_id, event.id,
                          event.exception.splitlines()[0])

    return MetricsListener


class StageAgent:
    def __init__(
        self,
        spark: SparkSession,
        ctx: StageContext,
        input_dir: Path | None,
        checkpoint: Path,
        engine: Engine | None = None,
        heartbeat_s: float = 5.0,
        poll_s: float = 1.0,
        periodic: list[tuple[str, float, Callable[[], object]]] | None = None,
        handlers: CommandHandlers | None = None,
        landing: Landing | None = None,
        audit_s: float = 10.0,
    ):
        self.spark = spark
        # the context and the queries, replaced by the command thread and read by the listener
        self.state = RunState(ctx)
        self.engine = engine  # None: the process's database
        self.heartbeat_s, self.poll_s = heartbeat_s, poll_s
        self.heartbeat_cut_until = 0.0  # monotonic: the fault injector silences the heartbeat until then
        # (name, period, callback) run on threads of their own: the driver wires in the stage's
        # Operator Manager here; the agent itself only reports and obeys.
        self.periodic = periodic or []
        self.handlers = handlers or CommandHandlers()  # for the commands other than `stop`
        self.main_query_name = ctx.stage_id
        self.checkpoint = Path(checkpoint)
        # No input directory: a Kafka topic, whose backlog is its lag, from the query's progress.
        self.backlog: FileSourceBacklog | TopicBacklog = \
            TopicBacklog() if input_dir is None else FileSourceBacklog(input_dir, checkpoint)
        self.topic = self.backlog if isinstance(self.backlog, TopicBacklog) else None
        self.quarantine_backlog = None if input_dir is None else \
            FileSourceBacklog(input_dir, quarantine_checkpoint(checkpoint))
        # Progress, for the supervisor's liveness check: the last commit, or the last time the
        # database came back (a sink waiting out an outage is not stuck).
        self._progress_mono = time.monotonic()
        self.last_error: str | None = None  # a query's failure since the last commit (note_error)
        self.clock = ClockOffset()  # this host's wall clock against the database's, by the beats
        self.landing = landing  # moves complete files from <input>/_landing/ into the source
        self.audit = None if input_dir is None else InputAudit(input_dir, checkpoint)
        self.audit_s = audit_s
        self.writer = BufferedWriter(self.engine, ctx.stage_id)
        self.listener = _listener_class()(self)
        self.stop_requested = threading.Event()
        self.stop_reason: str | None = None
        self.stop_command_id: int | None = None
        self.stop_deadline_s: float | None = None  # from the stop command: the launcher escalates after it
        self.last_batch_id: int | None = None
        self._sink_stats: dict[int, SinkStats] = {}
        self._rows_per_file: float | None = None
        # files an earlier run's source log holds: a restarted run's rows-per-file starts from its own batches
        self._seen_files = self.backlog.seen()
        self._shape_recorded = False
        self._threads: list[threading.Thread] = []
        self._closing = threading.Event()
        self._stopping_queries = threading.Event()  # set while stop_at_batch_boundary stops them

    @property
    def ctx(self) -> StageContext:
        """The run's context now (`state.change` replaces it)."""
        return self.state.view.ctx

    @property
    def queries(self) -> tuple[StreamingQuery, ...]:
        """The run's queries now, in QUERIES order (`state.change` replaces them)."""
        return self.state.view.queries

    # -- lifecycle -------------------------------------------------------------------------
    def attach(self) -> None:
        self.spark.streams.addListener(self.listener)
        for name in _PY4J_LOGGERS:
            logging.getLogger(name).addFilter(self._not_our_interrupt)
        self.writer.start()
        if self.ctx.deployment_id is None:  # an in-process run (tests): no run row to beat for or command
            return
        loops: list[tuple[Callable[[], None], str]] = [(self._heartbeat_loop, "heartbeat"),
                                                       (self._command_loop, "commands")]
        periodic = list(self.periodic)
        if self.audit is not None:
            periodic.append(("input audit", self.audit_s, self._audit_input))
        if self.landing is not None:
            periodic.append(("landing", 1.0, self.landing.move_ready))
        loops += [(functools.partial(self._every, name, period, fn), name) for name, period, fn in periodic]
        for target, name in loops:
            t = threading.Thread(target=target, name=f"{name}-{self.ctx.stage_id}", daemon=True)
            t.start()
            self._threads.append(t)

    def detach(self) -> None:
        """Remove the listener before the session stops: a listener left registered when Python
        exits makes the JVM log py4j 'Connection refused' for every late event."""
        self._report_last_batch()
        self.spark.streams.removeListener(self.listener)
        for name in _PY4J_LOGGERS:
            logging.getLogger(name).removeFilter(self._not_our_interrupt)
        self._closing.set()
        for t in self._threads:
            t.join(self.heartbeat_s + 2)
        if self.ctx.deployment_id is not None:
            # the run's end is recorded by ledger.finish, or by the watchdog
            with contextlib.suppress(DBAPIError):
                self._beat()
        self.writer.close()

    def request_stop(self, reason: str, command_id: int | None = None) -> None:
        if not self.stop_requested.is_set():
            log.info("stage %s: stop requested (%s)", self.ctx.stage_id, reason)
            self.stop_reason, self.stop_command_id = reason, command_id
            self.stop_requested.set()

    def stop_at_batch_boundary(self, deadline_s: float = 30.0) -> bool:
        """Stop every query of the run, each between two of its own batches: when every planned
        batch (offsets/N) of its checkpoint has its commit (commits/N). Returns whether all of them
        did; a query still in a batch at the deadline is interrupted (logged as a warning naming
        the query and the batch; its next run finishes that batch first).

        The side queries stop first and the main one last: the main query keeps committing while
        a quarantine batch finishes, so waiting for it adds nothing to the main query's output gap.
        One deadline covers them all."""
        from streamops.checkpoint_layout import QUERIES, query_checkpoint

        deadline = time.monotonic() + deadline_s
        self._stopping_queries.set()
        try:
            stopped = [self._stop_query_at_boundary(which, q, query_checkpoint(which, self.checkpoint), deadline)
                       # started in QUERIES order; a run that failed to start one has fewer
                       for which, q in reversed(list(zip(QUERIES, self.queries, strict=False)))]
        finally:
            self._stopping_queries.clear()
        log.info("stage %s: stopped %s after batch %s", self.ctx.stage_id,
                 "at a batch boundary" if all(stopped) else "mid-batch (deadline)", self.last_batch_id)
        return all(stopped)

    def _stop_query_at_boundary(self, which: str, q: StreamingQuery, ckpt: Path, deadline: float) -> bool:
        """Stop `q` between two of its batches, or at `deadline` (monotonic) whatever it is doing.

        An idle query is simply stopped. A query that is behind runs its batches back to back:
        Spark starts the next one as soon as one commits, so there is never a moment with no
        trigger active. The window is then the few tens of milliseconds after a commit, while
        Spark lists the source for the next batch; `stop()` interrupts that listing before
        offsets/N+1 is written. The checkpoint is polled every 5 ms to land in it."""
        from streamops.checkpoint_layout import last_committed_batch, last_planned_batch

        started_at = last_committed_batch(ckpt)
        polls = itertools.count()

        def stoppable() -> bool:
            if not q.isActive:
                return True
            committed = last_committed_batch(ckpt)
            # just committed a batch, or idle (the status call is slow: asked every 0.1 s)
            return last_planned_batch(ckpt) == committed and (
                committed != started_at or (next(polls) % 20 == 0 and not q.status.get("isTriggerActive")))

        if not wait_until(stoppable, max(0.0, deadline - time.monotonic()), interval_s=0.005):
            self._quiet_interrupted_fetch()
        q.stop()
        planned, committed = last_planned_batch(ckpt), last_committed_batch(ckpt)
        if planned != committed:
            log.warning("stage %s: action=stop query=%s interrupted batch %s at the deadline (last committed %s)",
                        self.ctx.stage_id, which, planned, committed)
            return False
        return True

    def _quiet_interrupted_fetch(self) -> None:
        """Stopping a query mid-batch cancels its job; a shuffle fetch cut off by that cancel logs
        an ERROR in the JVM for what is our own interrupt (named in one warning instead)."""
        jvm = self.spark.sparkContext._jvm
        assert jvm is not None  # a running session's
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
            "org.apache.spark.storage.ShuffleBlockFetcherIterator", jvm.org.apache.logging.log4j.Level.OFF)

    def _not_our_interrupt(self, record: logging.LogRecord) -> bool:
        """A logging filter for py4j: drop the traceback of a foreachBatch that our own stop
        interrupted at its deadline (stop_at_batch_boundary names the query and batch in one
        warning instead). Every other py4j record passes."""
        if not (self._stopping_queries.is_set() and record.exc_info and record.exc_info[1] is not None):
            return True
        try:
            text = str(record.exc_info[1])
        except Exception:  # the JVM side may be going away: keep the record
            return True
        return not any(marker in text for marker in _INTERRUPTED)

    def _report_last_batch(self) -> None:
        """The last batch before a stop: its progress event may still be on Spark's listener bus when
        the listener goes, and the batch would have no stage_metrics row. The query keeps it."""
        main = next(iter(self.queries), None)  # one read: the view may be replaced meanwhile
        try:
            last = main.lastProgress if main is not None else None
            if last is not None and not wait_until(lambda: self.last_batch_id == last.batchId, 2.0, interval_s=0.05):
                self.on_progress(json.loads(last.json))
        except Exception as e:  # a report must never break (or litter) a clean stop
            log.warning("stage %s: action=stop could not record the last batch's progress: %s", self.ctx.stage_id, e)

    # -- reports ---------------------------------------------------------------------------
    def on_commit(self, stats: SinkStats) -> None:
        self._sink_stats[stats.batch_id] = stats
        self._progress_mono = time.monotonic()
        self.last_error = None

    def note_error(self, error: str) -> None:
        """A query's failure (the driver restarts it): its beats say it until the next commit, so
        that an output gap names its cause (a full disk, the database)."""
        self.last_error = error[:500]

    def queries_started(self) -> None:
        """The queries run from now: the stall clock starts here, not at the JVM's start."""
        self._progress_mono = time.monotonic()

    def on_progress(self, progress: dict[str, Any]) -> None:
        batch_id = int(progress["batchId"])
        rows = int(progress.get("numInputRows") or 0)
        lag = self.topic.update(progress) if self.topic is not None else None
        seen = self.backlog.seen()
        # the batch's own files (its source log entry), else those logged since the last progress
        files = self.backlog.files_of(batch_id) or (seen - self._seen_files)
        if files > 0 and rows:
            per_file = rows / files
            self._rows_per_file = per_file if self._rows_per_file is None \
                else 0.8 * self._rows_per_file + 0.2 * per_file
        self._seen_files = seen
        row = progress_to_metrics(progress, self.ctx, self._sink_stats.pop(batch_id, None),
                                  self.backlog.measure(self._rows_per_file), lag.as_json() if lag else None)
        row["ts"] = self.clock.to_db(row["ts"])  # Spark's time is this host's: stored as the database's
        self.writer.submit("metrics_insert", row)
        if not self._shape_recorded and (rows or progress.get("stateOperators")):
            self._record_shape(progress)
        self.last_batch_id = batch_id
        log.info("stage %s: batch %d in=%d rows %.0f ms, p95=%s ms, backlog=%s", self.ctx.stage_id, batch_id, rows,
                 row["batch_duration_ms"], None if row["latency_p95_ms"] is None else round(row["latency_p95_ms"]),
                 f"{row['backlog_files']} files" if lag is None else f"{lag.records} records (lag)")

    def _record_shape(self, progress: dict[str, Any]) -> None:  # the query's stateful operators, once per run
        self._shape_recorded, ops = True, state_operators(progress)
        log.info("stage %s: action=query-shape %s", self.ctx.stage_id, ops or "stateless")
        if self.ctx.deployment_id:
            self.writer.submit("deployment_state_operators", dict(deployment_id=self.ctx.deployment_id,
                                                                  operators=json.dumps(ops)))

    def _audit_input(self) -> None:
        """Input the source did not (fully) read: logged and recorded once each, never silent."""
        assert self.audit is not None  # scheduled only for a file source
        for a in self.audit.check():
            log.warning("stage %s: action=input-audit kind=%s %s: %s", self.ctx.stage_id, a.kind, a.path, a.detail)
            self.writer.submit("input_anomaly_upsert", {"stage_id": self.ctx.stage_id, "path": a.path, "kind": a.kind,
                                                        "detail": a.detail, "bytes_now": a.bytes_now,
                                                        "deployment_id": self.ctx.deployment_id})

    def _beat(self) -> None:
        """Write the heartbeat now, on a connection of its own: never queued behind the metrics
        writer, whose backoff after a database outage would silence the beat past the
        supervisor's limit (every driver killed at once when the database comes back). A beat
        that fails is not kept: the next one says the same, newer."""
        main = next(iter(self.queries), None)  # one read: the view may be replaced meanwhile
        params = {
            "deployment_id": self.ctx.deployment_id, "stage_id": self.ctx.stage_id,
            "query_active": bool(main and main.isActive),
            "trigger_active": bool(main and main.isActive and main.status.get("isTriggerActive")),
            "last_batch_id": self.last_batch_id,
            "info": json.dumps({"stop_requested": self.stop_requested.is_set(), "dropped_reports": self.writer.dropped,
                                "backlog_files": self.backlog.measure().files,
                                "backlog_rows": self.topic.measure().rows if self.topic is not None else None,
                                "source_partitions": self.topic.partitions() if self.topic is not None else None,
                                "since_progress_s": round(time.monotonic() - self._progress_mono, 1),
                                "last_error": self.last_error,
                                "quarantine_backlog_files": self.quarantine_backlog.measure().files
                                if self.quarantine_backlog is not None else None,
                                "executors": self._executors()}),
        }
        # A beat lost in a server crash is said again by the next one: no wait for the WAL flush.
        sent = time.time()  # the wall clock, as Spark's progress times: its offset from the database's
        with db.transaction(self.engine, durable=False) as conn:
            beat = conn.execute(db.query("heartbeat_upsert"), params).first()
        if beat is None:
            exit_fenced(self.ctx.stage_id, self.ctx.deployment_id, "heartbeat")
        self.clock.observe(beat.beat_at, sent, time.time())

    def _executors(self) -> int | None:
        """Live executors on a cluster pool (the status page and /metrics show them); None in
        local mode, where the driver runs the tasks itself."""
        sc = self.spark.sparkContext
        if str(sc.master).startswith("local"):
            return None
        try:
            return int(sc._jsc.sc().getExecutorIds().size())
        except Exception:  # a beat must never fail on a figure: the JVM may be shutting down
            return None

    def _heartbeat_loop(self) -> None:
        failing = False
        while True:
            try:
                if time.monotonic() >= self.heartbeat_cut_until:  # the fault injector's heartbeat cut
                    if failing:  # the database is back: the sink's wait for it was not a stall
                        self._progress_mono = max(self._progress_mono, time.monotonic())
                    self._beat()
                    if failing:
                        log.info("stage %s: action=heartbeat resumed", self.ctx.stage_id)
                    failing = False
            except DBAPIError as e:  # the database is away: say so once, beat again next period
                if not failing:
                    log.warning("stage %s: action=heartbeat failed, retrying every %.0fs: %s", self.ctx.stage_id,
                                self.heartbeat_s, str(e.orig).strip().splitlines()[0] if str(e.orig).strip() else e)
                failing = True
            except Exception:
                log.exception("stage %s: heartbeat failed", self.ctx.stage_id)
            if self._closing.wait(self.heartbeat_s):
                return

    def _every(self, name: str, period_s: float, fn: Callable[[], object]) -> None:
        while not self._closing.wait(period_s):
            try:
                fn()
            except Exception:
                log.exception("stage %s: %s failed", self.ctx.stage_id, name)

    def _obey(self, cmd: Row[Any]) -> None:
        """Run the handler the driver registered for `cmd.command` with its typed arguments; its
        `CommandOutcome` (refused for arguments that do not validate, failed for an error) closes it."""
        try:
            outcome = self.handlers.run(command_args(cmd.command, cmd.args)) or \
                CommandOutcome(status="refused", detail=f"this run has no {cmd.command!r} handler")
        except ValueError as e:  # pydantic's ValidationError too: the sender's mistake, not the run's
            outcome = CommandOutcome(status="refused", detail=f"bad arguments: {str(e).splitlines()[0]}")
        except Exception as e:  # a failed command is reported, the run goes on
            log.exception("stage %s: command %d (%s) failed", self.ctx.stage_id, cmd.id, cmd.command)
            outcome = CommandOutcome(status="failed",
                                     detail=f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        log.info("stage %s: action=%s command=%d %s", self.ctx.stage_id, cmd.command, cmd.id, outcome)
        with db.transaction(self.engine) as conn:
            conn.execute(db.query("command_done"), {"id": cmd.id, "outcome": str(outcome)})

    def _command_loop(self) -> None:
        params = {"stage_id": self.ctx.stage_id, "deployment_id": self.ctx.deployment_id}
        while not self._closing.wait(self.poll_s):
            try:
                work = []
                with db.transaction(self.engine) as conn:
                    for cmd in conn.execute(db.query("commands_open"), params):
                        conn.execute(db.query("command_ack"), {"id": cmd.id, "deployment_id": self.ctx.deployment_id})
                        if cmd.command == "stop":
                            deadline = StopArgs.model_validate(cmd.args or {}).deadline_s
                            # Stop well inside the caller's deadline: after it the launcher sends SIGTERM.
                            self.stop_deadline_s = max(1.0, float(deadline) / 2) if deadline else None
                            self.request_stop(f"stop command {cmd.id}", cmd.id)
                        else:
                            work.append(cmd)
                for cmd in work:  # after the ack is committed: a handler may take seconds
                    self._obey(cmd)
            except DBAPIError as e:
                log.warning("stage %s: cannot poll commands: %s", self.ctx.stage_id,
                            str(e.orig).strip().splitlines()[0])
