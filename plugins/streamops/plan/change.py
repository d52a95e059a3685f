"""Is a requested change of a stage a real, allowed change? One rule for every entry point.

The CLI, the Airflow reconfigure task and the re-plan's grants all ask `validate_change`
before a `reconfigurations` row exists, so a bad request gets the same clear message
everywhere, and nothing stops for a change that changes nothing. Pure: the caller passes the
registry and the stage's current configuration.
"""

from __future__ import annotations

from dataclasses import dataclass

from streamops import registry

ACTIONS = ("scale_out", "scale_in", "migrate")


class InvalidChange(ValueError):
    """The request is refused before anything is recorded or stopped; the message says why."""


@dataclass(frozen=True)
class Current:
    """The stage's configuration now: its latest run's cores, pool and state partitions (None
    for a stage that never ran)."""

    cores: int | None = None
    pool: str | None = None
    partitions: int | None = None


@dataclass(frozen=True)
class Change:
    stage_id: str
    action: str
    cores: int | None
    partitions: int | None
    pool: str | None


def stage_of(reg: registry.Registry, stage_ref: str) -> str:
    """The stage id `stage_ref` names, or InvalidChange naming the known stages."""
    try:
        app, name, _ = reg.stage(stage_ref)
    except registry.RegistryError as e:
        raise InvalidChange(str(e)) from None
    return registry.stage_id(app, name)


def validate_change(reg: registry.Registry, stage_ref: str, action: str, *, cores: int | None = None,
                    partitions: int | None = None, pool: str | None = None,
                    current: Current = Current()) -> Change:
    action = action.replace("-", "_")
    if action not in ACTIONS:
        raise InvalidChange(f"action must be one of {', '.join(a.replace('_', '-') for a in ACTIONS)}, got {action!r}")
    sid = stage_of(reg, stage_ref)
    st = reg.stage(sid)[2]
    verb = action.replace("_", "-")
    if cores is not None and not st.cores.min <= cores <= st.cores.max:
        raise InvalidChange(f"{sid}: cores must be within [{st.cores.min}, {st.cores.max}] (apps.yaml), got {cores}")
    if partitions is not None and not 1 <= partitions <= 1024:
        raise InvalidChange(f"{sid}: partitions must be within [1, 1024], got {partitions}")
    if partitions is not None and not st.stateful:
        raise InvalidChange(f"{sid}: {st.workload} keeps no state: there are no state partitions to change")
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
