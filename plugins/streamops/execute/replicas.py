"""Replica sets: an HA stage runs k drivers at once, each with its own checkpoint, on the same
replayable source, all writing the same sink.

The sink keeps one row per output key and a newer version never loses to an older one
(`sink_apply.sql`), so whichever replica writes a key first sets it and the other's identical
write changes nothing: the output is the output of one failure-free run (replication
transparency [004]). When one replica dies the others keep committing; the dead one is restarted
from its own checkpoint (the watchdog's recovery, per role), replays what it missed and rejoins.

Roles: 'primary' is replica 0 (reconfigurations and policies act on it), then 'replica-1', … A
replica goes to another pool of the same kind when one has room, so a pool's loss is survived.
`reconcile` makes the live replicas match `stages.replicas` (apps.yaml, or the redundancy
manager's granted count).
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, field

from sqlalchemy import Row

from streamops import registry
from streamops.execute import stages
from streamops.store import db, ledger
from streamops.store import reconfigurations as rstore

log = logging.getLogger("streamops.replicas")

PRIMARY = "primary"


def role(i: int) -> str:
    return PRIMARY if i == 0 else f"replica-{i}"


def index(role_name: str) -> int:
    return 0 if role_name == PRIMARY else int(role_name.rsplit("-", 1)[1])


def checkpoint_for(sid: str, role_name: str) -> str:
    base = stages.checkpoint_for(sid)
    return base if role_name == PRIMARY else f"{base}@{role_name}"


def pool_for(reg: registry.Registry, primary_pool: str, cores: int, taken: set[str]) -> str:
    """Another pool of the same kind (local or cluster) with room for `cores`, preferring one no
    replica uses yet; the primary's pool when there is none."""
    kind = reg.pools[primary_pool].kind
    for name, pool in reg.pools.items():
        if name == primary_pool or name in taken or pool.kind != kind:
            continue
        free, _ = ledger.pool_room(name, pool.cores)
        if free >= cores:
            return name
    return primary_pool


@dataclass
class Reconciled:
    started: list[str] = field(default_factory=list)   # "stage role"
    stopped: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)


def live_roles(sid: str) -> dict[str, Row]:
    return {r.role: r for r in db.rows("replicas_live", stage_id=sid)}


def start_replica(sid: str, role_name: str, reg: registry.Registry, *, wait_s: float = 120.0,
                  progress=lambda _: None, spare=None) -> stages.StartResult:
    """Start replica `role_name` of a stage whose primary runs: its own checkpoint, the primary's
    cores, another pool when there is room. A replica that ran before restarts as itself."""
    primary = ledger.latest_run(sid, live=True)
    if primary is None:
        raise stages.StageNotRunning(f"stage {sid}: its primary is not running; start the stage first")
    before = ledger.latest_run(sid, role=role_name)
    taken = {r.pool for r in live_roles(sid).values()}
    pool = before.pool if before else pool_for(reg, primary.pool, primary.cores, taken)
    log.info("stage %s: action=start-replica role=%s pool=%s", sid, role_name, pool)
    return stages.start_stage(sid, reg, role=role_name, cores=before.cores if before else primary.cores, pool=pool,
                              checkpoint_path=checkpoint_for(sid, role_name), wait_s=wait_s, progress=progress,
                              spare=spare)


def reconcile(reg: registry.Registry | None = None, *, wait_s: float = 0.0, progress=lambda _: None) -> Reconciled:
    """Make every running stage's live replicas match its wanted count: start missing ones
    (not a failed one: recovering it is the watchdog's, with its `failures` row), stop extras
    from the highest number down. A stage whose primary is not running is left alone."""
    reg = reg or registry.load()
    out = Reconciled()
    for w in db.rows("replicas_wanted"):
        try:
            reg.stage(w.stage_id)
        except registry.RegistryError:
            continue
        # Under the stage lock: never beside a recovery or a reconfiguration of the same stage.
        with rstore.stage_lock(w.stage_id) as free:
            if free:
                _reconcile_stage(w.stage_id, w.replicas, reg, out, wait_s, progress)
    for what, items in (("started", out.started), ("stopped", out.stopped), ("refused", out.refused)):
        for item in items:
            log.info("action=replica-%s %s", what, item)
    return out


def wanted(sid: str) -> int:
    return db.value("stage_replicas", stage_id=sid) or 1


def _reconcile_stage(sid: str, replicas: int, reg: registry.Registry, out: Reconciled, wait_s: float,
                     progress) -> None:
    live = live_roles(sid)
    if PRIMARY not in live:
        return
    for i in range(1, replicas):
        name = role(i)
        last = ledger.latest_run(sid, role=name)
        if name in live or (last is not None and last.status == "failed"):
            continue
        try:
            start_replica(sid, name, reg, wait_s=wait_s, progress=progress)
            out.started.append(f"{sid} {name}")
        except stages.AdmissionRefused as e:
            out.refused.append(f"{sid} {name}: {e}")
    for name in sorted((r for r in live if index(r) >= replicas), key=index, reverse=True):
        stages.stop_stage(sid, reg, role=name, requested_by="replicas", deadline_s=20, progress=progress)
        out.stopped.append(f"{sid} {name}")


def stop_replicas(sid: str, reg: registry.Registry, *, requested_by: str = "cli", progress=lambda _: None) -> list[str]:
    """Stop every replica but the primary (a stage's stop stops them first)."""
    stopped = []
    for name in sorted((r for r in live_roles(sid) if r != PRIMARY), key=index, reverse=True):
        stages.stop_stage(sid, reg, role=name, requested_by=requested_by, deadline_s=20, progress=progress)
        stopped.append(name)
    return stopped


def stop_with_replicas(sid: str, reg: registry.Registry, *, deadline_s: float = 60.0, requested_by: str = "cli",
                       lock_wait_s: float = 30.0, progress=lambda _: None) -> stages.StopResult:
    """Stop a stage: its replicas, then its primary, under the stage lock. Without the lock the
    supervisor's `reconcile` saw a running primary short of its replicas between the two steps and
    started a replica again, which then ran on alone after the primary stopped. A lock held by a
    reconfiguration or a recovery is waited for up to `lock_wait_s`, then the stop goes ahead.
    Raises stages.StageNotRunning when the primary is not running."""
    deadline = time.monotonic() + lock_wait_s
    with contextlib.ExitStack() as held:
        while not held.enter_context(rstore.stage_lock(sid)):
            held.close()
            if time.monotonic() >= deadline:
                log.warning("stage %s: action=stop the stage lock stayed busy for %.0fs; stopping anyway", sid,
                            lock_wait_s)
                break
            time.sleep(1.0)
        stop_replicas(sid, reg, requested_by=requested_by, progress=progress)
        return stages.stop_stage(sid, reg, deadline_s=deadline_s, requested_by=requested_by, progress=progress)
