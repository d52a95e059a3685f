"""Fault injectors for the tests: wrappers of a stage's sink that break it in known ways
(the run's `fault`, RunSpec.fault)."""

from __future__ import annotations

import time

from pyspark.sql import functions as F

POISON_MARKER = "POISON"


def _failing(sink):
    """Fault injector (tests): every batch of this run fails, as a broken new configuration would."""

    def fail(df, batch_id: int) -> None:
        raise RuntimeError(f"injected fault: batch {batch_id} fails in this run")

    return fail


def _negative_counts(sink):
    """Fault injector (tests): a broken new configuration whose output is wrong but whose batches
    succeed; only the data-quality gate can catch it."""

    def corrupt(df, batch_id: int) -> None:
        sink(df.withColumn("value", F.regexp_replace("value", '"count":', '"count":-')), batch_id)

    return corrupt


def _slow(sink, seconds: float = 8.0):
    """Fault injector (tests): every batch takes `seconds` longer than the trigger interval, so
    batches run back to back (a stage that is behind). The agent stops in the few milliseconds
    after a commit when one comes within half the stop deadline; batches this long make sure
    none does, so the stop interrupts one."""

    def slow(df, batch_id: int) -> None:
        time.sleep(seconds)
        sink(df, batch_id)

    return slow


def _poison_on_marker(sink):
    """Fault injector (tests): an output row whose key holds the word POISON carries a value
    PostgreSQL refuses (not JSON), every time it is run: a record that deterministically breaks
    the sink, as a NUL byte once did. Only the partition holding that key fails, in the executor,
    after the batch's other partitions wrote theirs."""

    def poison(df, batch_id: int) -> None:
        sink(df.withColumn("value", F.when(F.col("key").contains(POISON_MARKER), F.lit("{not json"))
                           .otherwise(F.col("value"))), batch_id)

    return poison


SINK_FAULTS = {"fail_batches": _failing, "slow_batches": _slow, "negative_counts": _negative_counts,
               "poison_marker": _poison_on_marker}
