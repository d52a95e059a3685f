"""The run ledger: every read and write of `deployments` (and the stop commands sent to them),
plus admission and the registry's pools/apps/stages rows. SQL is in sql/queries/.

Functions take plain values and return rows; deciding what to do with them is execute/'s job.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Row

from streamops.run_spec import COMMANDS, CommandArgs, StopArgs
from streamops.store import db


# -- the registry's rows ------------------------------------------------------------------------
def sync_catalog(pools: Iterable[dict[str, Any]], apps: Iterable[dict[str, Any]],
                 stages: Iterable[dict[str, Any]]) -> None:
    """Upsert pools, apps and stages (rows shaped as pool_upsert/app_upsert/stage_upsert expect) at once."""
    with db.transaction() as conn:
        for p in pools:
            conn.execute(db.query("pool_upsert"), p)
        for a in apps:
            conn.execute(db.query("app_upsert"), a)
        for s in stages:
            conn.execute(db.query("stage_upsert"), s)


def sync_views(files: Iterable[str]) -> None:
    """A registry's own analyst views (apps.yaml `views:`): each file's SQL, as written (CREATE OR
    REPLACE VIEW reporting.…), then SELECT for streamops_reader, in one transaction. They are
    re-applied at every sync: re-creating the `reporting` schema (a change to sql/reports) drops
    them until the next deploy or start."""
    files = list(files)
    if not files:
        return
    with db.transaction() as conn:
        for f in files:
            conn.exec_driver_sql(Path(f).read_text())
        conn.execute(db.query("reader_grant_reporting"))


def pool_room(pool: str, size: int | None = None) -> tuple[int, int]:
    """(free, total) cores of a pool: of `size` if given (the registry's, as admission sees it),
    else of its deployed size."""
    with db.connection() as conn:
        used = conn.execute(db.query("pool_cores_in_use"), {"pool": pool}).scalar_one()
        total = size if size is not None else conn.execute(db.query("pool_cores"), {"pool": pool}).scalar() or 0
    return total - used, total


# -- runs -----------------------------------------------------------------------------------------
def latest_run(stage_id: str, *, live: bool = False, before: datetime | None = None,
               role: str = "primary") -> Row[Any] | None:
    """The stage's latest run in `role` (a `deployments` row), or None: only a live one with
    `live`, only one started before `before` with `before`."""
    return db.row("latest_run", stage_id=stage_id, live=live, before=before, role=role)


def stage_row(stage_id: str) -> Row[Any] | None:
    """The stage's catalog row (its spec as synced from apps.yaml)."""
    return db.row("stage_get", stage_id=stage_id)


def deployment(dep_id: int) -> Row[Any]:
    return db.one("deployment_get", id=dep_id)


def beat_source(dep_id: int) -> Row[Any] | None:
    """A Kafka run's lag (`backlog_rows`) and topic partitions (`source_partitions`) by its last
    heartbeat; None without a beat."""
    return db.row("heartbeat_source", deployment_id=dep_id)


def beat_backlog_rows(dep_id: int) -> int | None:
    """The run's backlog in records by its last heartbeat (a Kafka stage's lag), or None."""
    r = beat_source(dep_id)
    return None if r is None else r.backlog_rows


def first_commit(dep_id: int, after: datetime | None = None) -> datetime | None:
    """When the run's first batch (after `after`, if given) reached the sink, or None."""
    at: datetime | None = db.value("first_commit_of", deployment_id=dep_id, after=after)
    return at


def finish(dep_id: int, status: str, reason: str, exit_code: int | None = None, conn: Connection | None = None) -> None:
    """The final word on a live run (a run already finished keeps its own)."""
    params = {"id": dep_id, "status": status, "reason": reason, "exit_code": exit_code}
    if conn is not None:
        conn.execute(db.query("deployment_finished"), params)
    else:
        db.write("deployment_finished", **params)


def promote(dep_id: int) -> None:
    """An active backup's secondary becomes the primary."""
    db.write("deployment_promote", id=dep_id)


def mark_launched(dep_id: int, pid: int | None, driver_id: str | None, log_path: str | None,
                  host: str | None = None, pid_started_at: float | None = None, ui_url: str | None = None) -> None:
    """The launcher's word: the driver's pid, on `host`, started at `pid_started_at` (epoch s),
    its Spark UI on the port the launcher chose (None: off)."""
    db.write("deployment_launched", id=dep_id, pid=pid, driver_id=driver_id, log_path=log_path, host=host,
             pid_started_at=pid_started_at, ui_url=ui_url)


def mark_running(dep_id: int, driver_id: str, pid: int, host: str, ui_url: str | None = None) -> None:
    """The driver's own report that its queries run, with the Spark UI's URL as Spark bound it
    (None: off). A start that gets this far clears a give-up of its stage (and role)."""
    db.write("deployment_running", id=dep_id, driver_id=driver_id, pid=pid, host=host, ui_url=ui_url)


def command_done(command_id: int, outcome: str | None) -> None:
    db.write("command_done", id=command_id, outcome=outcome)


def _reap(conn: Connection, dep: Row[Any], is_alive: Callable[[Row[Any]], bool]) -> bool:
    """Mark a live row whose process is gone as failed; whether it was. A run `starting`
    without a pid is being launched by another caller right now: not gone."""
    if is_alive(dep) or (dep.status == "starting" and dep.pid is None):
        return False
    finish(dep.id, "failed", "driver process gone (found by start/stop)", conn=conn)
    return True


@dataclass(frozen=True)
class Admission:
    deployment_id: int
    live: Row[Any] | None = None  # the run already live (nothing was inserted)
    refused: str | None = None


def admit(stage_id: str, role: str, pool: str, pool_cores: int, cores: int, is_alive: Callable[[Row[Any]], bool],
          **run: Any) -> Admission:
    """Admission under the pool's lock: the live run if there is one; else a new `deployments` row,
    `starting`, or `refused` (with the reason) when the pool has fewer than `cores` free.
    `run` holds the row's other columns (state_partitions, config, launcher, checkpoint)."""
    with db.transaction() as conn:
        conn.execute(db.query("pool_lock"), {"pool": pool})
        # Fencing is a lock, not only a read: the run this admission replaces cannot commit a
        # batch from here to our COMMIT (deployment_fence_lock.sql).
        conn.execute(db.query("deployment_fence_lock"), {"stage_id": stage_id, "role": role})
        live = conn.execute(db.query("live_deployment"), {"stage_id": stage_id, "role": role}).first()
        if live is not None and not _reap(conn, live, is_alive):
            return Admission(live.id, live=live)
        used = conn.execute(db.query("pool_cores_in_use"), {"pool": pool}).scalar_one()
        refused = None
        if used + cores > pool_cores:
            refused = f"pool {pool!r} has {pool_cores - used} free of {pool_cores} cores; " \
                      f"stage {stage_id} needs {cores}"
        dep_id = conn.execute(db.query("deployment_insert"), {
            "stage_id": stage_id, "pool": pool, "cores": cores, "role": role,
            "status": "refused" if refused else "starting", "reason": refused,
            **run, "config": json.dumps(run["config"]),
        }).scalar_one()
    return Admission(dep_id, refused=refused)


def request_stop(stage_id: str, role: str, is_alive: Callable[[Row[Any]], bool], requested_by: str,
                 deadline_s: float) -> tuple[Row[Any] | None, bool]:
    """Mark the live run `stopping` and send its driver a stop command: (the run, whether it was
    alive). (None, False) if the stage has no live run."""
    with db.transaction() as conn:
        dep = conn.execute(db.query("live_deployment"), {"stage_id": stage_id, "role": role}).first()
        if dep is None:
            return None, False
        if _reap(conn, dep, is_alive):
            return dep, False
        conn.execute(db.query("deployment_stopping"), {"id": dep.id})
        conn.execute(db.query("command_insert"), {
            "stage_id": stage_id, "deployment_id": dep.id, "command": "stop",
            "args": StopArgs(deadline_s=deadline_s).model_dump_json(exclude_none=True), "requested_by": requested_by,
        })
    return dep, True


# -- commands to a live run and live scaling ---------------------------------------------------------
def send_command(stage_id: str, dep_id: int, command: str, args: CommandArgs, requested_by: str) -> int:
    """A command for run `dep_id`'s driver (its poller acknowledges it within a second), with the
    typed arguments the driver validates again (run_spec.COMMANDS)."""
    if not isinstance(args, COMMANDS[command]):
        raise TypeError(f"command {command!r} takes {COMMANDS[command].__name__}, got {type(args).__name__}")
    command_id: int = db.write_returning("command_insert", stage_id=stage_id, deployment_id=dep_id, command=command,
                                         args=args.model_dump_json(exclude_none=True), requested_by=requested_by).id
    return command_id


def command(command_id: int) -> Row[Any]:
    return db.one("command_get", id=command_id)


def record_partitions(dep_id: int, state_partitions: int) -> bool:
    """A live run's driver repartitioned its state in place. False if the run is no longer live."""
    return db.write("deployment_repartitioned", deployment_id=dep_id, state_partitions=state_partitions) is not None


def record_scaling(dep_id: int, from_cores: int, to_cores: int, reconfiguration_id: int | None) -> bool:
    """A live run now holds `to_cores` (admission counts them; cost keeps every change). False if
    the run is no longer live."""
    return db.write("deployment_scaled", deployment_id=dep_id, from_cores=from_cores, to_cores=to_cores,
                    reconfiguration_id=reconfiguration_id) is not None
