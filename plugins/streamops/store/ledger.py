"""Run-state lookups shared by stages, mechanisms and recovery, with their SQL in sql/queries/.

The first piece of the ledger issue 12 asks for: the "latest run of a stage" query existed in
four near-copies (`stages.current_config`, `mechanisms._live`, `_last_run`, `_previous_config`).
"""

from __future__ import annotations

from datetime import datetime

from streamops.store import db


def latest_run(stage_id: str, *, live: bool = False, before: datetime | None = None):
    """The stage's latest primary run (a `deployments` row), or None: only a live one with
    `live`, only one started before `before` with `before`."""
    with db.engine().connect() as conn:
        return conn.execute(db.query("latest_run"),
                            {"stage_id": stage_id, "live": live, "before": before}).first()


def link_reconfiguration(rid: int, *, old_deployment_id: int | None = None, new_deployment_id: int | None = None,
                         staged_checkpoint: str | None = None) -> None:
    """Record which runs (and staged copy) reconfiguration `rid` used."""
    with db.engine().begin() as conn:
        conn.execute(db.query("reconfiguration_link"), {
            "id": rid, "old_deployment_id": old_deployment_id, "new_deployment_id": new_deployment_id,
            "staged_checkpoint": staged_checkpoint})
