"""A warm spare driver (`run_stage.py --standby STAGE`): its session is built and warmed up
before any failure, so a failover skips the JVM start."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamops.registry import Stage
from streamops.store import ledger

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

log = logging.getLogger("streamops.run_stage")


def standby(stage_id: str, cores: int, ready_file: str, run: Callable[[int, Any], int],
            cluster: dict[str, Any] | None = None) -> int:
    """Build the session and run the stage's query once over a sample of its input into no sink
    (stage.warm_up), then wait on stdin for the deployment to run (the supervisor's failover) and
    `run(deployment_id, spark)` it; end quietly if stdin closes.

    `cluster` (a cluster pool: master, executor_cores, executor_memory): the session registers
    with the master and warms up on one executor it borrows only if one comes within
    BORROW_S (a free core), then gives it back, so the spare holds no core while it waits. The
    driver side (JVM, session, planning, the driver's code generation) is then warm; the
    executors the run asks for at adoption are new JVMs."""
    logging.basicConfig(level=logging.INFO, stream=sys.stdout,
                        format=f"%(asctime)s %(levelname)s [stage={stage_id} standby] %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    from spark_apps.stage import build_session, ui_port, warm_up

    started = time.monotonic()
    row = ledger.stage_row(stage_id)
    stage = Stage.model_validate(row.spec) if row is not None else None
    partitions = row.state_partitions if row is not None else 2
    if cluster:
        spark = build_session(f"streamops:{stage_id}:standby", cores, partitions, initial_executors=0,
                              max_cores=max(cores, stage.cores.max if stage else cores), ui_port=ui_port(),
                              **cluster)
    else:
        spark = build_session(f"streamops:{stage_id}", cores, partitions, ui_port=ui_port())
    sampled, where = 0, f"local[{cores}]"
    if stage is not None:
        from spark_apps.job_runtime import ship_code
        from streamops.jobs import package_code

        ship_code(spark, package_code(stage.code).archive)
        try:
            if cluster:
                sampled, where = _warm_up_on_a_borrowed_executor(spark, stage, cores, partitions)
            else:
                sampled = warm_up(spark, stage, cores, partitions)[0]
        except Exception as e:  # a warm-up is an optimisation: the spare still saves the JVM start
            log.warning("action=standby warm-up failed: %s", str(e).splitlines()[0] if str(e) else type(e).__name__)
    Path(ready_file).touch()
    log.info("action=standby ready in %.1fs (%s, warm-up on %d input lines)", time.monotonic() - started,
             where, sampled)
    adopted = threading.Event()
    holder = threading.Thread(target=_hold_no_executor, args=(spark.sparkContext, adopted), daemon=True,
                              name="standby-executors")
    if cluster:
        holder.start()
    line = sys.stdin.readline().strip()
    adopted.set()
    if holder.is_alive():
        holder.join(10)  # its last give-back is done before the run asks for its executors
    if not line:
        log.info("action=standby released")
        spark.stop()
        return 0
    for h in logging.getLogger().handlers[:]:  # the run logs with the deployment in each line
        logging.getLogger().removeHandler(h)
    return run(int(line), spark)


# How long a cluster spare waits for a free core to warm up on (the tests shorten it, to make the
# borrowed executor arrive after the spare gave up on it).
BORROW_S = float(os.environ.get("STREAMOPS_STANDBY_BORROW_S", "20"))
HOLD_LOOK_S = 2.0  # how often a waiting cluster spare looks for an executor it must give back


def _hold_no_executor(sc: SparkContext, adopted: threading.Event) -> None:
    """Give back any executor that registers while the spare waits. The borrow's launch can
    outlast BORROW_S (an executor JVM took over 20 s under a load average of 20 in the demo):
    the executor then registers after the limit went to 0 and Spark keeps it, a core that the
    stages' live scale-outs were refused for."""
    from spark_apps.executors import executor_ids, scale_to

    asked: set[str] = set()
    while not adopted.wait(HOLD_LOOK_S):
        try:
            if held := executor_ids(sc):
                if set(held) - asked:  # said once; asked again until it has gone
                    log.info("action=standby giving back executor(s) %s, granted after the borrow gave up", held)
                asked |= set(held)
                scale_to(sc, 0, wait=False)  # no waiting: an adoption must not find it mid-way
        except Exception as e:  # the session going away (released, adopted): nothing to hold
            log.debug("action=standby executor check: %s", e)


def _warm_up_on_a_borrowed_executor(spark: SparkSession, stage: Stage, cores: int, partitions: int) -> tuple[int, str]:
    from spark_apps.executors import executor_ids, request_total, scale_to
    from spark_apps.stage import warm_up
    from streamops.waiting import wait_until

    sc = spark.sparkContext
    request_total(sc, 1)
    try:
        if not wait_until(lambda: len(executor_ids(sc)) >= 1, BORROW_S, interval_s=0.2):
            return 0, f"cluster, no free core within {BORROW_S:.0f}s: driver not warmed up"
        return warm_up(spark, stage, cores, partitions)[0], "cluster, warmed up on a borrowed executor"
    finally:
        scale_to(sc, 0, timeout_s=30)
