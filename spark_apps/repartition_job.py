"""Repartition the state of a *stopped* (or copied) checkpoint in a short-lived local Spark:
used to pre-stage a copy while the stage's own driver keeps running.

    python spark_apps/repartition_job.py CHECKPOINT PARTITIONS
"""

from __future__ import annotations

import sys
import time

from spark_apps.stage import build_session


def main(argv: list[str]) -> int:
    if len(argv) != 2 or "-h" in argv or "--help" in argv:
        print(__doc__)
        return 0 if ("-h" in argv or "--help" in argv) else 2
    ckpt, partitions = argv[0], int(argv[1])
    spark = build_session("streamops:repartition", cores=1, state_partitions=partitions)
    try:
        started = time.monotonic()
        spark._streamingCheckpointManager.repartition(ckpt, partitions)
        print(f"action=repartition checkpoint={ckpt} partitions={partitions} took={time.monotonic() - started:.2f}s")
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
