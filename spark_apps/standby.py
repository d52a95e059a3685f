"""A warm spare driver (`run_stage.py --standby STAGE`): its session is built and warmed up
before any failure, so a failover skips the JVM start."""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import Any, Callable

from streamops.registry import Stage
from streamops.store import ledger

log = logging.getLogger("streamops.run_stage")


def standby(stage_id: str, cores: int, ready_file: str, run: Callable[[int, Any], int]) -> int:
    """Build the session and run the stage's query once over a sample of its input into no sink
    (stage.warm_up), then wait on stdin for the deployment to run (the supervisor's failover) and
    `run(deployment_id, spark)` it; end quietly if stdin closes."""
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
    for h in logging.getLogger().handlers[:]:  # the run logs with the deployment in each line
        logging.getLogger().removeHandler(h)
    return run(int(line), spark)
