"""The supervisor: failover in seconds, without waiting for a schedule.

One long-running process (`streamops supervise`) polls every `poll_s` (0.5 s) what the watchdog
reads once a minute: each replica's latest run. A driver whose process is gone is found within
one poll; a stopped one (SIGSTOP, a debugger: its process or its JVM in the kernel's stopped
state) once it is seen stopped for `stopped_s` (0.5 s, two polls: `stops.StopWatch`); any other hung one
when its heartbeat is older than `stale_s` (3 × the 5 s beat); a stalled one
when it beats but has committed nothing for `stall_s` (180 s) while input waits. Silence is
judged only while the database takes writes: each poll first writes as a beat does (a write probe,
`gaps.write_gap`), and a probe that fails or is slow (a lock on `heartbeats`, an fsync stall)
is a database gap, as a failed read is; the probe is made again before a kill. Each failure
is recovered exactly as the watchdog does it (`watchdog.recover`: the `failures` row first, then
a restart from the run's own checkpoint under the stage lock), in a thread of its own so that two
failed stages restart in parallel. The `failures` row it writes wakes the `streamops_watchdog`
DAG through its asset watcher, which is the visible record and the second line: if the
supervisor is down, the DAG's own sweep recovers the stage.

Warm spares (`warm_spares`): for each running stage it keeps one driver process with its JVM,
SparkSession and Python workers already up and no query. A failed run's restart is handed to
it, so the failover does not wait for a new JVM (15–40 s on this machine under load): it is
bounded by the poll (≤ 0.5 s), the ledger's admission, the queries' start and the first batch,
which replays what the dead run had not committed. On a cluster pool the spare is registered
with the master and holds no executor until it is adopted; it then asks for the run's (new
executor JVMs). A spare is built once the stage has caught up. See docs/ha.md for the figures.

The `/metrics` exporter for Prometheus (report/prometheus.py, passed in by the CLI) runs while the
supervisor does; one that cannot start (its port taken) is a warning, never the supervisor's end.
Its housekeeping (every 5 s) also cancels stale pending reconfigurations (execute/pending) and,
once a minute, measures the checkpoints' sizes that status and /metrics show."""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Protocol

from streamops import processes, registry
from streamops.execute import broker_heal, gaps, housekeeping, pending, replicas, stops, watchdog
from streamops.execute.launcher import Spare, launcher_for
from streamops.paths import registry_path, state_dir
from streamops.store import db, failures
from streamops.store import reconfigurations as rstore

log = logging.getLogger("streamops.supervisor")


class Closeable(Protocol):
    def close(self) -> None: ...


RECOVERIES_KEPT = 100
CHECKPOINT_SIZES_EVERY_S = 60.0  # the checkpoint sizes status and /metrics show (checkpoint_sizes)


@dataclass(frozen=True)
class SupervisorOptions:
    poll_s: float = 0.5
    stale_s: float = 15.0  # three missed 5 s heartbeats
    stopped_s: float = stops.HOLD_S  # a driver seen stopped (SIGSTOP, a debugger) on consecutive polls this long
    stall_s: float = watchdog.STALL_S  # beating, but no commit for this long while input waits
    max_restarts: int = 3
    restart_backoff_s: float = watchdog.RESTART_BACKOFF_S  # then doubling, jittered, between restarts of a stage
    wait_s: float = 120.0  # for the restarted run's first output
    housekeeping_s: float = 5.0  # dead Spark workers, replicas to start or stop, spares to build
    warm_spares: bool = True
    spare_after_s: float = 20.0  # after a start or a recovery, before building a spare (not during catch-up)
    spare_at_most_after_s: float = 300.0  # … and until the stage's batches are within R_max, at most this long
    slow_poll_s: float = 5.0  # a poll slower than this: the database stalled (its beats did too)
    write_probe_s: float = gaps.WRITE_PROBE_S  # a beat's write slower than this: the database holds beats back
    gap_floor_s: float = gaps.FLOOR_S  # an output gap (no commit while input waits) is at least this long


@dataclass(frozen=True)
class StepFailure:
    """A housekeeping step failing: passes in a row, its last error, since when."""
    count: int
    error: str
    since: datetime


class Supervisor:
    def __init__(self, reg: registry.Registry | None = None, opts: SupervisorOptions = SupervisorOptions(),
                 progress: Callable[[str], None] = lambda _: None,
                 keepers: Sequence[Callable[[Callable[[str], None]], object]] = (),
                 exporter: Callable[[], Closeable | None] | None = None) -> None:
        self.reg = reg or registry.load()
        # apps.yaml is read again when it changes (housekeeping, `_registry`), unless a registry was
        # given: apps added later are recovered and their deferred changes keep their windows.
        self._reg_file = None if reg is not None else registry_path()
        self._reg_mtime = self._reg_file.stat().st_mtime_ns if self._reg_file is not None else 0
        self.opts = opts
        self.progress = progress
        # Kept alive each housekeeping pass (the CLI's Airflow ComponentKeeper; orchestrate/ is above).
        self.keepers = list(keepers)
        # Started with `run`, closed at its end (the CLI's /metrics exporter); None, or its failure: none.
        self.exporter = exporter
        # The latest recoveries (tests and the CLI read them), bounded: a supervisor runs for months.
        self.recoveries: deque[watchdog.Recovery] = deque(maxlen=RECOVERIES_KEPT)
        self.recovered_count = 0
        self._seen_alive: dict[int, datetime] = {}
        self._stops = stops.StopWatch(opts.stopped_s)
        self._busy: dict[tuple[str, str], Future] = {}
        self._threads = ThreadPoolExecutor(max_workers=4, thread_name_prefix="recover")
        self._sizes_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint-sizes")
        self._sizes_walk: Future[list[dict]] | None = None
        self._last_housekeeping = self._last_rotation = self._last_sizes = 0.0
        self._spares: dict[str, Spare] = {}
        self._spares_lock = threading.Lock()
        self._quiet_until = 0.0
        # monotonic: heartbeats are judged from then on. A poll that failed or took long (the database
        # away, stopped or stalled) silenced every driver's beats too: they get `stale_s` to resume.
        self._trusted_from = 0.0
        # The housekeeping steps failing now, by name: each is retried every pass, the others run on.
        self.housekeeping_failures: dict[str, StepFailure] = {}
        # The database gap being lived through: (the last good poll before it, why), recorded as the
        # stages' output gaps once a poll works again; and when the last good poll began. These times,
        # the sightings and the failure times are the database's clock (`db.now()`), as the drivers'
        # beats and commits are: this host's clock may be off (docs/ha.md, "Clocks").
        self._db_gap: tuple[datetime | None, str] | None = None
        self._outages: list[tuple[datetime, datetime, str]] = []  # ended lately: (since, until, why)
        self._last_good: datetime | None = None  # None: no good poll yet
        self._started = time.monotonic()

    def poll(self) -> list[watchdog.Failure]:
        """One look: note who is alive, hand each new failure to a recovery thread, record output gaps."""
        # Before the read: a database that answers reads at once may still hold every beat back.
        if (gap := gaps.write_gap(self.opts.write_probe_s)) is not None:
            self._distrust_heartbeats(gap)
        now = db.now()  # the database's clock: a sighting is stored as a failure's time, beside the commits
        candidates = failures.watchdog_candidates()
        stopped = self._stops.look(candidates, now)
        found = watchdog.detect(self.opts.stale_s, self._seen_alive, candidates, stall_s=self.opts.stall_s,
                                stopped=stopped)
        dead = {f.deployment_id for f in found}
        for d in candidates:
            if d.status in ("starting", "running") and d.id not in dead:
                self._seen_alive[d.id] = now
        latest = {d.id for d in candidates}  # a replaced or ended run is never judged again
        self._seen_alive = {i: t for i, t in self._seen_alive.items() if i in latest}
        self._busy = {k: fut for k, fut in self._busy.items() if not fut.done()}
        apps = {d.stage_id: d.app for d in candidates}
        if time.monotonic() < self._trusted_from:  # just back from a database gap: silence proves nothing yet
            found = [f for f in found if f.kind != "stale_heartbeat"]
        for f in found:
            key = (f.stage_id, f.role)
            if key not in self._busy:
                self._busy[key] = fut = self._threads.submit(self._recover, f, apps[f.stage_id])
                fut.add_done_callback(functools.partial(self._log_crash, who=f.who))
        self._record_gaps(candidates, gap, {sid for sid, _ in self._busy}, now)
        return found

    def _record_gaps(self, candidates, write_gap: str | None, busy: set[str], now: datetime) -> None:
        """Output gaps (execute/gaps.py): an outage just lived through, once the database takes
        writes again, then the gaps under way."""
        outage = self._db_gap
        if write_gap is None and outage is not None:
            # no good poll before it: since this supervisor started, dated by the database's clock
            since = outage[0] or now - timedelta(seconds=time.monotonic() - self._started)
            self._outages.append((since, now, outage[1]))
            self._db_gap = None
        self._outages = [o for o in self._outages if (now - o[1]).total_seconds() < gaps.OUTAGE_RECHECK_S]
        for since, until, why in self._outages:  # again each poll: idempotent, and a commit may be late
            gaps.record_outage(since, until, why, floor_s=self.opts.gap_floor_s)
        # a gap under way just after an outage is the outage's
        gaps.record(candidates, floor_s=self.opts.gap_floor_s, skip=busy, progress=self.progress,
                    database_gap=write_gap or (self._outages[-1][2] if self._outages else None), now=now)
        if write_gap is None:
            self._last_good = now

    @staticmethod
    def _log_crash(fut: Future, who: str) -> None:
        """A recovery thread's exception is otherwise kept in its Future, unseen."""
        if not fut.cancelled() and fut.exception() is not None:
            e = fut.exception()
            log.error("stage %s: action=recover crashed: %s: %s", who, type(e).__name__, e, exc_info=e)

    def _recover(self, f: watchdog.Failure, app: str) -> watchdog.Recovery | None:
        reg = self.reg  # one registry for the whole recovery: housekeeping may swap in a newer one
        try:
            reg.stage(f.stage_id)
        except registry.RegistryError:
            return None
        with rstore.stage_lock(f.stage_id) as free:
            # Busy (a reconfiguration, the DAG, or this stage's other replica): the next poll retries.
            if (not free or f.stage_id in rstore.active_stage_ids()
                    or not watchdog.still_failed(f, self.opts.stale_s, self.opts.stall_s, self.opts.write_probe_s)):
                return None
            spare = self._take_spare(f.stage_id)
            try:
                rec = watchdog.recover(f, app, reg, max_restarts=self.opts.max_restarts, wait_s=self.opts.wait_s,
                                       progress=self.progress, detected_by="supervisor", spare=spare,
                                       probe_s=self.opts.write_probe_s, backoff_s=self.opts.restart_backoff_s,
                                       lock=free)
            finally:
                if spare is not None and not spare.adopted:  # cores differed, the replica is no longer
                    self._discard(spare)                     # wanted, the restart failed: not a leaked JVM
        if rec.status == "withdrawn":  # not killed: the database held its beats back
            self._distrust_heartbeats(rec.detail)
            return None
        self._quiet_until = time.monotonic() + self.opts.spare_after_s
        self.recoveries.append(rec)
        self.recovered_count += 1
        return rec

    def _distrust_heartbeats(self, why: str) -> None:
        if self._db_gap is None:
            self._db_gap = (self._last_good, why)
        if time.monotonic() >= self._trusted_from:
            log.warning("action=poll %s; heartbeats are not judged for %.0fs", why, self.opts.stale_s)
        self._trusted_from = time.monotonic() + self.opts.stale_s

    # -- warm spares ------------------------------------------------------------------------------
    def _take_spare(self, sid: str) -> Spare | None:
        with self._spares_lock:
            spare = self._spares.pop(sid, None)
        if spare is not None and not spare.ready:
            self._discard(spare)
            return None
        return spare

    @staticmethod
    def _discard(spare: Spare) -> None:
        launcher = launcher_for(spare.master)
        launcher.discard(spare)

    def keep_spares(self) -> None:
        """One ready spare per running stage, with its primary's cores and pool; at most one built per
        pass, none while a recovery runs or a stage catches up (sql/queries/spares_wanted.sql)."""
        wanted = {r.stage_id: r for r in db.rows("spares_wanted", settle_s=self.opts.spare_after_s,
                                                 settle_max_s=self.opts.spare_at_most_after_s)}
        with self._spares_lock:
            for sid, spare in list(self._spares.items()):
                w = wanted.get(sid)
                if (w is None or w.cores != spare.cores or launcher_for(w.master) is not launcher_for(spare.master)
                        or spare.proc.poll() is not None):
                    self._spares.pop(sid)
                    self._discard(spare)
                else:
                    spare.hurry_if_slow()
            missing = [sid for sid, w in wanted.items() if w.settled and sid not in self._spares]
        recovering = any(not fut.done() for fut in list(self._busy.values()))
        # Not while a recovery runs: a spare's JVM and warm-up beside it slowed one from 12 s to 22 s.
        if missing and not recovering and time.monotonic() >= self._quiet_until:
            w = wanted[missing[0]]
            launcher = launcher_for(w.master)
            spare = launcher.spawn_spare(w.stage_id, w.cores, {"STREAMOPS_DATABASE_URL": db.database_url()},
                                         pool=w.pool)
            with self._spares_lock:
                self._spares[w.stage_id] = spare
            log.info("stage %s: action=spare building a warm driver (pid %d, %d cores, %s)", w.stage_id,
                     spare.proc.pid, spare.cores, w.master)

    def spare_ready(self, sid: str) -> int | None:
        """The pid of the stage's ready spare, if it has one."""
        with self._spares_lock:
            spare = self._spares.get(sid)
        return spare.proc.pid if spare is not None and spare.ready else None

    def release_spares(self) -> None:
        with self._spares_lock:
            spares, self._spares = list(self._spares.values()), {}
        for spare in spares:
            self._discard(spare)

    def housekeeping(self) -> None:
        """Each step on its own: one that fails is logged and counted, and the others still run.
        No step's failure is a database gap: heartbeats stay judged (only the poll's reads say)."""
        self._registry()
        steps: list[tuple[str, Callable[[], object]]] = [
            ("close-late-failures", lambda: watchdog.close_late_failures(self.progress)),
            ("stale-reconfigurations", lambda: pending.cancel_stale(self.reg, self.progress)),
            ("rotate-logs", self._rotate_logs),
            ("checkpoint-sizes", self._checkpoint_sizes),
            ("heal-cluster", lambda: watchdog.heal_cluster("supervisor", self.progress)),
            ("heal-broker", lambda: broker_heal.heal_broker(self.reg, "supervisor", self.progress)),
            *((f"keep {keep!r}", lambda keep=keep: keep(self.progress)) for keep in self.keepers),
            ("replicas", self._reconcile_replicas),
            *((("spares", self.keep_spares),) if self.opts.warm_spares else ()),
        ]
        for name, step in steps:
            self._housekeeping_step(name, step)

    def _registry(self) -> registry.Registry:
        """The registry, loaded again when apps.yaml changed; a bad edit keeps the last good one."""
        if self._reg_file is None:
            return self.reg
        try:
            mtime = self._reg_file.stat().st_mtime_ns
            if mtime != self._reg_mtime:
                self._reg_mtime = mtime
                self.reg = registry.load(self._reg_file)
                log.info("action=registry reloaded %s: %d app(s)", self._reg_file, len(self.reg.apps))
        except (OSError, registry.RegistryError) as e:
            log.error("action=registry kept the last good one: %s", gaps.first_line(e))
        return self.reg

    def _housekeeping_step(self, name: str, step: Callable[[], object]) -> None:
        before = self.housekeeping_failures.get(name)
        try:
            step()
        except Exception as e:
            error = f"{type(e).__name__}: {gaps.first_line(e)}"
            now = StepFailure(before.count + 1 if before else 1, error, before.since if before else
                              datetime.now(UTC))
            self.housekeeping_failures[name] = now
            # The traceback once per new error, then a line per pass: not one every 5 s for hours.
            log.error("action=housekeeping step=%s failed (%d passes in a row); tried again next pass: %s", name,
                      now.count, error, exc_info=before is None or before.error != error)
            return
        if before is not None:
            del self.housekeeping_failures[name]
            log.info("action=housekeeping step=%s works again after %d failed passes", name, before.count)

    def _rotate_logs(self) -> None:
        if time.monotonic() - self._last_rotation >= 60:  # a stat per log file: cheap, but not every 5 s
            self._last_rotation = time.monotonic()
            housekeeping.rotate_logs()

    def _checkpoint_sizes(self) -> None:
        # A walk of every checkpoint: once a minute, in its own thread (a large or remote disk must
        # not delay detection); its error is this step's, at the pass after it ended.
        walk = self._sizes_walk
        if walk is not None and not walk.done():
            return
        self._sizes_walk = None
        if walk is not None:
            walk.result()
        if time.monotonic() - self._last_sizes >= CHECKPOINT_SIZES_EVERY_S:
            self._last_sizes = time.monotonic()
            self._sizes_walk = self._sizes_pool.submit(housekeeping.record_checkpoint_sizes)

    def _reconcile_replicas(self) -> None:
        done = replicas.reconcile(self.reg, progress=self.progress)
        for item in done.started + done.stopped + done.refused:
            self.progress(f"action=replicas {item}")

    def run(self, stop: threading.Event | None = None, duration_s: float | None = None) -> None:
        """Poll until `stop` is set (or `duration_s` passed); a failed poll (the database away) is
        logged and the next one tries again."""
        stop = stop or threading.Event()
        ends = None if duration_s is None else time.monotonic() + duration_s
        log.info("action=supervise poll=%.1fs stale=%.0fs", self.opts.poll_s, self.opts.stale_s)
        exporter = self._start_exporter()
        while not stop.is_set() and (ends is None or time.monotonic() < ends):
            if self._poll_once() and time.monotonic() - self._last_housekeeping >= self.opts.housekeeping_s:
                self._last_housekeeping = time.monotonic()
                self.housekeeping()
            stop.wait(self.opts.poll_s)
        self._threads.shutdown(wait=True)
        self._sizes_pool.shutdown(wait=True)
        self.release_spares()
        if exporter is not None:
            exporter.close()

    def _poll_once(self) -> bool:
        """One poll; False when the database failed it (housekeeping then waits too). Only the
        database failing it (away, restarting, stalled: `db.UNAVAILABLE`) or slowing it silenced
        the beats too; any other error is a bug, logged with its traceback, and heartbeats stay judged."""
        started = time.monotonic()
        try:
            self.poll()
        except db.UNAVAILABLE as e:  # keep supervising through a database restart
            self._distrust_heartbeats(f"a poll failed: {gaps.first_line(e)}")
            return False
        except Exception:
            log.exception("action=poll failed; tried again next poll")
            return True
        if time.monotonic() - started > self.opts.slow_poll_s:
            self._distrust_heartbeats("a poll took %.0fs" % (time.monotonic() - started))
        return True

    def _start_exporter(self) -> Closeable | None:
        """The exporter passed in, started; never the supervisor's end (a warning naming the action)."""
        if self.exporter is None:
            return None
        try:
            return self.exporter()
        except Exception as e:
            log.warning("action=metrics-exporter failed to start: %s: %s; supervising without /metrics",
                        type(e).__name__, e)
            return None


# -- the supervisor as a background process ------------------------------------------------------
def _files() -> tuple[Path, Path, Path]:
    run = state_dir() / "run"
    run.mkdir(parents=True, exist_ok=True)
    return run / "supervisor.pid", run / "supervisor.args", state_dir() / "logs" / "supervisor.log"


def pid_file() -> Path:
    """The background supervisor's pid file (`streamops down` stops it through this)."""
    return _files()[0]


def start_background(args: list[str]) -> int:
    """Start `streamops supervise ARGS` detached; its arguments are kept, so that a supervisor that
    dies is restarted as it was (`ensure_running`). Returns its pid."""
    import json
    import sys

    pid_file, args_file, log_file = _files()
    args_file.write_text(json.dumps(args))
    proc = processes.spawn_detached([sys.executable, "-m", "streamops.cli", "supervise", *args], pid_file=pid_file,
                                    log_path=log_file)
    return proc.pid


def stopped_cleanly() -> None:
    """The background supervisor ends on purpose (SIGTERM, `streamops down`): it is not to be restarted."""
    pid_file, _, _ = _files()
    if processes.read_pid(pid_file) == os.getpid():
        pid_file.unlink(missing_ok=True)


def ensure_running(progress: Callable[[str], None] = lambda _: None) -> int | None:
    """Restart the background supervisor if it died (its pid file is left, its process gone); a
    supervisor never started, or stopped on purpose, is left alone. Returns the new pid, if any.
    The watchdog DAG calls this every minute: the supervisor's own second line."""
    import json

    pid_file, args_file, _ = _files()
    pid = processes.read_pid(pid_file)
    if pid is None or processes.is_alive(pid):
        return None
    args = json.loads(args_file.read_text()) if args_file.exists() else []
    new = start_background(args)
    log.warning("action=restart-supervisor the supervisor (pid %d) had died; restarted as pid %d", pid, new)
    progress(f"action=restart-supervisor the supervisor (pid {pid}) had died; restarted as pid {new}")
    return new


def start_in_thread(reg: registry.Registry | None = None, opts: SupervisorOptions = SupervisorOptions(),
                    progress: Callable[[str], None] = lambda _: None,
                    ) -> tuple[Supervisor, threading.Event, threading.Thread]:
    """A supervisor in a background thread of this process (tests, the benchmark)."""
    sup = Supervisor(reg, opts, progress)
    stop = threading.Event()
    thread = threading.Thread(target=sup.run, args=(stop,), name="supervisor", daemon=True)
    thread.start()
    return sup, stop, thread
