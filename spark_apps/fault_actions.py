"""What each injected fault (streamops.agent.faults) does to a running driver."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

from streamops.agent.faults import BatchPause
from streamops.store import db

log = logging.getLogger("streamops.run_stage")


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
