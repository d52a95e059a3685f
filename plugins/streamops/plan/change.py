"""Is a requested change of a stage a real, allowed change? One rule for every entry point.

The CLI and the Airflow reconfigure task ask `validate_change` before a `reconfigurations`
row exists, the re-plan asks `grant_refusal` before it grants (no token is spent on a refused
request), and the executor asks `is_noop` again when it acts: a bad request gets the same clear
message everywhere, and nothing stops for a change that changes nothing. Pure: the caller
passes the registry and the stage's current configuration. plan/ is below the registry (which
validates its policy parameters with plan.options), so the registry is read through the
protocols below, not imported.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from streamops.plan.mechanism import live_refusal, repartition_refusal
from streamops.plan.model import SCALE_IN, Request, stage_id

ACTIONS = ("scale_out", "scale_in", "migrate", "upgrade")


class InvalidChange(ValueError):
    """The request is refused before anything is recorded or stopped; the message says why."""


@dataclass(frozen=True)
class Current:
    """The stage's configuration now: its latest run's cores, pool and state partitions (None
    for a stage that never ran)."""

    cores: int | None = None
    pool: str | None = None
    partitions: int | None = None
    state_operators: tuple[str, ...] | None = None  # as its latest run's progress named them
    max_useful_cores: int | None = None  # tasks its source can feed (a Kafka topic's partitions), if bounded


@dataclass(frozen=True)
class Change:
    stage_id: str
    action: str
    cores: int | None
    partitions: int | None
    pool: str | None


class CoreBounds(Protocol):
    @property
    def min(self) -> int: ...
    @property
    def max(self) -> int: ...


class StageLimits(Protocol):
    """What a change is checked against in a stage of the registry (registry.Stage)."""

    @property
    def cores(self) -> CoreBounds: ...


class PoolSize(Protocol):
    @property
    def cores(self) -> int: ...


class StageRegistry(Protocol):
    """What a change is checked against in the registry (registry.Registry): its pools, and
    `stage(ref)` → (app, stage name, stage), raising ValueError (RegistryError) for an unknown or
    ambiguous reference."""

    @property
    def pools(self) -> Mapping[str, PoolSize]: ...
    def stage(self, ref: str) -> tuple[str, str, StageLimits]: ...


def stage_of(reg: StageRegistry, stage_ref: str) -> str:
    """The stage id `stage_ref` names, or InvalidChange naming the known stages."""
    try:
        app, name, _ = reg.stage(stage_ref)
    except ValueError as e:  # registry.RegistryError
        raise InvalidChange(str(e)) from None
    return stage_id(app, name)


def validate_change(reg: StageRegistry, stage_ref: str, action: str, *, cores: int | None = None,
                    partitions: int | None = None, pool: str | None = None,
                    current: Current = Current()) -> Change:
    action = action.replace("-", "_")
    if action not in ACTIONS:
        raise InvalidChange(f"action must be one of {', '.join(a.replace('_', '-') for a in ACTIONS)}, got {action!r}")
    sid = stage_of(reg, stage_ref)
    st = reg.stage(sid)[2]
    verb = action.replace("_", "-")
    if action == "upgrade":
        return _upgrade(sid, current, cores, partitions, pool)
    if cores is not None and not st.cores.min <= cores <= st.cores.max:
        raise InvalidChange(f"{sid}: cores must be within [{st.cores.min}, {st.cores.max}] (apps.yaml), got {cores}")
    if cores is not None and current.max_useful_cores is not None and cores > current.max_useful_cores \
            and cores > (current.cores or 0):
        raise InvalidChange(f"{sid}: {cores} cores is more than its source can use: it reads in "
                            f"{current.max_useful_cores} tasks (the topic's partitions, or source.min_partitions "
                            f"when that splits them); a core beyond them would be idle")
    if partitions is not None:
        _check_partitions(sid, partitions, current)
    if pool is not None and pool not in reg.pools:
        raise InvalidChange(f"{sid}: no pool {pool!r}; known pools: {', '.join(reg.pools)}")
    if action == "migrate":
        if pool is None:
            raise InvalidChange(f"{sid}: migrate needs a target pool (--pool); known pools: {', '.join(reg.pools)}")
        if cores is not None and cores > reg.pools[pool].cores:
            raise InvalidChange(f"{sid}: pool {pool!r} has {reg.pools[pool].cores} cores; {cores} cannot fit")
    elif cores is None and partitions is None:
        raise InvalidChange(f"{sid}: {verb} needs a target: cores (--cores) or state partitions (--partitions)")
    now_cores = current.cores
    if now_cores is not None and cores is not None:
        if action == "scale_out" and cores < now_cores:
            raise InvalidChange(f"{sid}: scale-out to {cores} cores is fewer than the {now_cores} it runs with; "
                                f"use scale-in")
        if action == "scale_in" and cores > now_cores:
            raise InvalidChange(f"{sid}: scale-in to {cores} cores is more than the {now_cores} it runs with; "
                                f"use scale-out")
    same_cores = cores is None or cores == now_cores
    same_partitions = partitions is None or partitions == current.partitions
    same_pool = pool is None or pool == current.pool
    if current.cores is not None and same_cores and same_partitions and same_pool:
        has = f"{now_cores} cores" + (f", {current.partitions} state partitions" if partitions is not None else "") \
            + (f" in pool {current.pool!r}" if pool is not None else "")
        raise InvalidChange(f"{sid}: nothing to change: the stage already runs with {has}; not restarting it")
    return Change(sid, action, cores, partitions, pool)


def _check_partitions(sid: str, partitions: int, current: Current) -> None:
    if not 1 <= partitions <= 1024:
        raise InvalidChange(f"{sid}: partitions must be within [1, 1024], got {partitions}")
    # Whether the query keeps state is learned from its checkpoint (a run that ran with no state
    # store) and its progress, never assumed from the job's name; a stage that never ran may be
    # given partitions.
    if current.cores is not None and current.partitions is None:
        raise InvalidChange(f"{sid}: the query keeps no state (its checkpoint has none): there are no state "
                            f"partitions to change")
    if why := repartition_refusal(current.state_operators):
        raise InvalidChange(f"{sid}: no state repartition: {why}")


def _upgrade(sid: str, current: Current, cores: int | None, partitions: int | None, pool: str | None) -> Change:
    """An upgrade changes the code (what changed is the executor's to find: execute.stages.code_change)."""
    if current.cores is None:
        raise InvalidChange(f"{sid}: an upgrade replaces a running stage's code; it never ran: start it")
    if cores is not None or partitions is not None or pool is not None:
        raise InvalidChange(f"{sid}: an upgrade keeps the cores, partitions and pool; change them apart")
    return Change(sid, "upgrade", current.cores, None, None)


@dataclass(frozen=True)
class StageNow:
    """What the re-plan knows of a stage when it grants: its live configuration, whether a change
    of it is pending or running, and when it last settled (its run's start or its last change's
    end, whichever is later)."""

    current: Current
    in_flight: bool = False
    settled_at: datetime | None = None
    pool_kind: str = "local"  # of its live run's pool: local | standalone
    executor_cores: int = 1


def live_scale_in(r: Request, now: StageNow | None) -> bool:
    """Whether scale-in `r` can be taken live by the running stage: executors removed while the
    query runs, the pool and state partitions kept (plan.mechanism.live_refusal). Such a change
    has no outage and touches no checkpoint, so it needs no maintenance window (issue 46)."""
    if r.action != SCALE_IN or now is None or now.current.cores is None or r.target_cores is None:
        return False
    return live_refusal(SCALE_IN, now.pool_kind, now.current.pool or "", r.target_pool, r.target_cores,
                        now.executor_cores, now.current.partitions, None) is None


def is_noop(current: Current, cores: int | None, pool: str | None, partitions: int | None = None) -> bool:
    """Whether a change to (cores, pool, partitions) leaves a running stage as it is."""
    return current.cores is not None and cores in (None, current.cores) and pool in (None, current.pool) \
        and partitions in (None, current.partitions)


def grant_refusal(r: Request, now: StageNow | None) -> str | None:
    """Why the Application Manager must not grant reconfiguration request `r` now (None: it may).
    A request made while a change of the stage was in flight, or on metrics from before it,
    describes a configuration that is gone (a second scale-out 2→2 was granted this way); one
    that changes nothing would spend a token and an output gap on nothing."""
    if r.action not in ACTIONS or r.action == "upgrade" or now is None:
        return None
    if now.in_flight:
        return "a change of this stage is in flight"
    if r.made_at is not None and now.settled_at is not None and r.made_at < now.settled_at:
        return f"made on metrics from before the stage's last change (settled at {now.settled_at:%H:%M:%S})"
    if is_noop(now.current, r.target_cores, r.target_pool):
        where = f" in pool {now.current.pool!r}" if now.current.pool else ""
        return f"nothing to change: the stage already runs with {now.current.cores} cores{where}"
    return None
