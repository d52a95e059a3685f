"""Pure rules of the reconfiguration mechanisms (POLICIES.md §5): when a change can be made live
or in the running driver, which state may be repartitioned, the key groups a stateful stage
starts with, and when a staged checkpoint copy no longer serves the live run. Which mechanism a
change gets is plan/mechanisms.py's `choose`."""

from __future__ import annotations

from pathlib import Path

# A new run from a staged copy replays every batch since the copy before it is current again, so
# an old copy turns a short outage into a long catch-up. Beyond this many batches it is re-taken.
STAGED_MAX_LAG_BATCHES = 30


_NEEDS_DRIVER = {"upgrade": "runs new code"}

# Stateful operators (a query's progress `stateOperators[].operatorName`) whose RocksDB state the
# offline repartition (`_streamingCheckpointManager.repartition`) was seen to rewrite on PySpark
# 4.3.0, 2 → 4 partitions, with the state intact after the restart (docs/jobs.md).
REPARTITIONABLE = frozenset({"stateStoreSave", "dedupe", "dedupeWithinWatermark", "sessionWindowStateStoreSaveExec",
                             "symmetricHashJoin", "applyInPandasWithState"})


def repartition_refusal(state_operators: tuple[str, ...] | None) -> str | None:
    """Why the query's state must not be repartitioned, or None: an operator nobody has seen the
    repartition rewrite correctly is refused up front, not found out half-way through a change."""
    untried = sorted(set(state_operators or ()) - REPARTITIONABLE)
    if untried:
        return (f"its stateful operator(s) {', '.join(untried)} are not known to repartition correctly "
                f"(docs/jobs.md); change its cores only")
    return None


def live_refusal(action: str, pool_kind: str, from_pool: str, target_pool: str | None, target_cores: int,
                 executor_cores: int, state_partitions: int | None, target_partitions: int | None) -> str | None:
    """Why a change cannot be made live (by adding or removing executors while the query runs),
    or None when it can: a scale-out or scale-in on a standalone pool, in whole executors, that
    keeps the pool and the state partitions, to at most one core per state partition (key group)."""
    if action not in ("scale_out", "scale_in"):
        return f"a {action} {_NEEDS_DRIVER.get(action, 'moves the stage')}: it needs a new driver"
    if pool_kind != "standalone":
        return "the pool is local: its driver's cores are fixed at start"
    if target_pool not in (None, from_pool):
        return f"the target pool {target_pool!r} is not the stage's pool {from_pool!r}"
    if target_cores % executor_cores:
        return f"{target_cores} cores is not a whole number of {executor_cores}-core executors"
    if target_partitions not in (None, state_partitions):
        return f"the state partitions change ({state_partitions} → {target_partitions}): an offline repartition"
    if state_partitions is not None and target_cores > state_partitions:
        return f"{target_cores} cores exceed the {state_partitions} state partitions (key groups)"
    return None


def in_driver_refusal(action: str, pool_kind: str, from_pool: str, target_pool: str | None, current_cores: int,
                      target_cores: int, executor_cores: int) -> str | None:
    """Why a change cannot be made inside the running driver (stop its query at a batch boundary,
    repartition the state in its own session, restart the query: no new JVM), or None when it
    can: a scale-out or scale-in that keeps the pool and, on a local pool, the cores (local[N] is
    fixed at start; a standalone pool's driver changes its executors)."""
    if action not in ("scale_out", "scale_in"):
        return f"a {action} {_NEEDS_DRIVER.get(action, 'moves the stage')}: it needs a new driver"
    if target_pool not in (None, from_pool):
        return f"the target pool {target_pool!r} is not the stage's pool {from_pool!r}: a new driver"
    if pool_kind != "standalone" and target_cores != current_cores:
        return "the pool is local: its driver's cores are fixed at start"
    if pool_kind == "standalone" and target_cores % executor_cores:
        return f"{target_cores} cores is not a whole number of {executor_cores}-core executors"
    return None


def key_groups(state_partitions: int, max_cores: int, stateful: bool, factor: int = 2) -> int:
    """The state partitions a stateful stage on a cluster starts with: at least `factor` × its
    max cores, like Flink's maximum parallelism, so that live scaling up to max cores never needs
    an offline repartition."""
    return max(state_partitions, factor * max_cores) if stateful else state_partitions


def staged_copy_stale(source: str, as_of_batch: int, live_checkpoint: str, live_batch: int | None,
                      max_lag: int = STAGED_MAX_LAG_BATCHES) -> str | None:
    """Why a staged copy no longer serves the live run, or None when it does: it must come from
    the live run's checkpoint and be at most `max_lag` committed batches behind it."""
    if Path(source) != Path(live_checkpoint):
        return f"it was copied from {source}, and the stage now runs from {live_checkpoint}"
    if live_batch is not None and live_batch - as_of_batch > max_lag:
        return (f"it is as of batch {as_of_batch}, {live_batch - as_of_batch} batches behind the live run "
                f"(at most {max_lag})")
    return None
