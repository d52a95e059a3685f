"""Live scaling inside a running driver on a standalone cluster: add or remove executors while
the streaming query keeps running (issue 13). Called by the agent for a `scale` command, and at
start, to wait for the executors admitted at registration (stage.session_conf).

Spark's dynamic allocation manager is stopped right after the session starts (it would resize
on its own, from task backlogs); the executor count is ours alone. The target is absolute:
`requestTotalExecutors(n)` sets the application's executor limit at the master, which launches
executors up to it (and up to spark.cores.max).
A scale-in then kills the newest surplus executors that are idle (`killExecutors(…, force=false)`
refuses busy ones, so no running task is lost); one still busy at half the deadline is killed
anyway and its tasks re-run. State stores reload from the checkpoint either way.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from pyspark import SparkContext

from streamops.run_spec import CommandOutcome, ScaleArgs
from streamops.waiting import wait_until

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from streamops.agent.agent import StageAgent

log = logging.getLogger("streamops.executors")


def executor_ids(sc: SparkContext) -> list[str]:
    """The application's live executors (the driver is not one)."""
    ids = sc._jsc.sc().getExecutorIds().mkString(",")
    return sorted((i for i in ids.split(",") if i), key=lambda i: int(i) if i.isdigit() else 0)


def _jvm(sc: SparkContext) -> Any:
    """The context's JVM view (pyspark types it optional: it is None only before the context starts)."""
    assert sc._jvm is not None
    return sc._jvm


def _seq(sc: SparkContext, items: list[str]) -> Any:
    """A Scala Seq of strings, for the JVM methods that take one."""
    java_list = _jvm(sc).java.util.ArrayList()
    for i in items:
        java_list.add(i)
    return _jvm(sc).org.apache.spark.api.python.PythonUtils.toSeq(java_list)


def _count_settled(sc: SparkContext, at_least: int, timeout_s: float, quiet_s: float = 2.0) -> None:
    """Wait until at least `at_least` executors are registered and none has arrived for `quiet_s`
    (the ones the master launched at once register over a few seconds)."""
    seen = {"n": -1, "since": time.monotonic()}

    def quiet() -> bool:
        n = len(executor_ids(sc))
        if n != seen["n"]:
            seen.update(n=n, since=time.monotonic())
        return n >= at_least and time.monotonic() - seen["since"] >= quiet_s

    wait_until(quiet, timeout_s, interval_s=0.2)


def request_total(sc: SparkContext, executors: int) -> None:
    """Set the application's executor limit at the master (it launches up to it)."""
    jvm = _jvm(sc)
    sc._jsc.sc().requestTotalExecutors(executors, 0, jvm.org.apache.spark.api.python.PythonUtils.toScalaMap(
        jvm.java.util.HashMap()))


def scale_to(sc: SparkContext, executors: int, timeout_s: float = 60.0, settle: bool = False,
             wait: bool = True) -> str:
    """Bring the application to `executors` executors; returns what happened, for the command's
    outcome. With `settle` (at start), first wait for the executors the master granted at
    registration. Without `wait` (the caller's queries are stopped, so the surplus is idle), the
    surplus is asked to go and the call returns: the scheduler offers no task to an executor
    pending removal, and its deregistration takes seconds that need not be waited for.
    Raises TimeoutError if the cluster does not get there in `timeout_s`."""
    started = time.monotonic()
    jsc = sc._jsc.sc()
    request_total(sc, executors)
    if settle:
        _count_settled(sc, executors, timeout_s / 2)
    have = executor_ids(sc)
    surplus = have[executors:]  # the newest: the oldest hold warm state stores
    backend = jsc.schedulerBackend()
    if not wait:
        if surplus:
            backend.killExecutors(_seq(sc, surplus), False, False, False)
        return f"{len(have)} → {executors} executors in {time.monotonic() - started:.1f}s (removal of {surplus} asked)"

    def surplus_gone() -> bool:
        nonlocal surplus
        backend.killExecutors(_seq(sc, surplus), False, False, False)  # the limit is already set
        surplus = [e for e in surplus if e in executor_ids(sc)]
        return not surplus

    if surplus and not wait_until(surplus_gone, timeout_s / 2, interval_s=0.2):
        log.warning("action=scale executors %s stayed busy; killing them (their tasks re-run)", surplus)
        backend.killExecutors(_seq(sc, surplus), False, False, True)
    if not wait_until(lambda: len(executor_ids(sc)) == executors,
                      max(1.0, timeout_s - (time.monotonic() - started)), interval_s=0.2):
        raise TimeoutError(f"{len(executor_ids(sc))} executors after {timeout_s:.0f}s, wanted {executors}")
    return f"{len(have)} → {executors} executors in {time.monotonic() - started:.1f}s"


def kill_one(sc: SparkContext) -> str:
    """Kill the newest executor as a crash would (its tasks re-run; the master starts another,
    since the target count stays): the fault injector's `executor_kill`."""
    have = executor_ids(sc)
    if not have:
        return "no executor to kill"
    sc._jsc.sc().schedulerBackend().killExecutors(_seq(sc, have[-1:]), False, True, True)
    return f"executor {have[-1]} killed"


# Held while the run's executor count changes on purpose (a `scale` command, an in-driver
# change), so that `ExecutorKeeper` never trims executors a scale-out is adding.
SCALING = threading.Lock()


def scale_executors(spark: SparkSession, agent: StageAgent, args: ScaleArgs, executor_cores: int) -> CommandOutcome:
    """A `scale` command: the run's cores become `args.cores` (in executors) while its queries
    keep running; later metrics rows carry the new cores (`agent.state`)."""
    with SCALING:
        outcome = scale_to(spark.sparkContext, args.cores // executor_cores, args.timeout_s)
        agent.state.change(cores=args.cores)
    return CommandOutcome(status="done", detail=outcome)


class ExecutorKeeper:
    """Keeps a standalone run at its own executor count. A master restarted after a crash
    recovers the application but not the executor limit the driver had set: it resets it to the
    registration's (0, stage.session_conf), so an executor lost meanwhile would never be
    replaced; seen short twice in a row, the limit is set again. Surplus executors (one launched
    by a master that predates the registration limit, or registered late) seen twice in a row
    (executors come and go for a moment during a kill) are asked to go when idle; asked twice
    and still there (a stage that is behind keeps every executor busy), they are killed, and
    their tasks re-run."""

    def __init__(self, spark: SparkSession, agent: StageAgent, executor_cores: int, every_s: float = 5.0) -> None:
        self.spark, self.agent, self.executor_cores, self.every_s = spark, agent, executor_cores, every_s
        self._next, self._over, self._asked, self._short = time.monotonic() + every_s, 0, 0, 0

    def check(self) -> None:
        if time.monotonic() < self._next or not SCALING.acquire(blocking=False):
            return
        try:
            self._next = time.monotonic() + self.every_s
            sc = self.spark.sparkContext
            want, have = self.agent.ctx.cores // self.executor_cores, executor_ids(sc)
            self._short = self._short + 1 if len(have) < want else 0
            if self._short >= 2:
                self._short = 0
                request_total(sc, want)
                log.warning("action=executors %d executors for %d cores (a restarted master forgot the limit): "
                            "asked for %d again", len(have), self.agent.ctx.cores, want)
            self._over = self._over + 1 if len(have) > want else 0
            self._asked = self._asked if self._over else 0
            if self._over < 2:
                return
            if self._asked < 2:
                self._asked += 1
                outcome = scale_to(sc, want, wait=False)
            else:
                self._asked = 0
                sc._jsc.sc().schedulerBackend().killExecutors(_seq(sc, have[want:]), False, False, True)
                outcome = f"{have[want:]} still busy after two asks: killed (their tasks re-run)"
            log.warning("action=executors %d executors for %d cores (one registered late, or a restarted master "
                        "forgot the limit): %s", len(have), self.agent.ctx.cores, outcome)
            self._over = 0
        finally:
            SCALING.release()
