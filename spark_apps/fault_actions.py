"""What each injected fault (streamops.agent.faults) does to a running driver."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from streamops.agent.faults import Action, BatchPause
from streamops.store import db

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from streamops.agent.agent import StageAgent

log = logging.getLogger("streamops.run_stage")


def fault_actions(spark: SparkSession, agent: Callable[[], StageAgent], pause: BatchPause,
                  standalone: bool) -> dict[str, Action]:
    """What each injected fault does to this driver (streamops.agent.faults); `agent()` is the
    run's agent, built after them."""

    def kill_driver(_: float | None) -> str:
        log.warning("action=fault driver_kill: SIGKILL to the driver's process group")
        logging.shutdown()
        os.killpg(os.getpgid(0), signal.SIGKILL)  # the JVM too, as a lost machine would
        return "killed"

    def cut_heartbeat(seconds: float | None) -> str:
        agent().heartbeat_cut_until = time.monotonic() + (seconds or 0)
        return f"no heartbeat for {seconds or 0:.1f}s"

    def db_outage(seconds: float | None) -> str:
        # Half a second later: the command that asked for it is acknowledged first.
        threading.Timer(0.5, db.inject_outage, [seconds or 0]).start()
        return f"database unreachable for {seconds or 0:.1f}s"

    def kill_executor(_: float | None) -> str:
        from spark_apps.executors import kill_one

        return kill_one(spark.sparkContext)

    actions: dict[str, Action] = {"slow_batch": pause.add, "driver_kill": kill_driver, "heartbeat_cut": cut_heartbeat,
               "db_outage": db_outage}
    if standalone:  # local mode has no executor to kill
        actions["executor_kill"] = kill_executor
    return actions
