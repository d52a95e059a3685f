"""The redundancy manager in the control loop: each HA stage's Algorithm 2 step [002] once per
its period, as requests that the Application Manager grants like any other (control.replan).

Pure policy in plan.redundancy; this is only its monitor (the stage's output tail latency and
the Outlook of its proactive rule: its primary's recent failures, their mean output gap, its
mean time to recovery as a new replica's start-up; `redundancy_inputs.sql`) and its memory
(`redundancy_states`, with the start-up hold). A change of redundancy r that
changes the replica count becomes an `add_replica` (a token, like a scale-out) or a
`remove_replica` (free) request; r's speculation settings reach a cluster pool's driver at its
next start (stages.start_stage).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from sqlalchemy import Connection, RowMapping

from streamops.plan.model import ADD_REPLICA, REMOVE_REPLICA, Request
from streamops.plan.redundancy import Outlook, RedundancyState, initial_state, replicas_for, step
from streamops.registry import Redundancy, stored
from streamops.store import db

log = logging.getLogger("streamops.redundancy")
STARTUP_S = 10.0  # a new replica's start-up before the stage has a recovered failure to measure it by


def _outlook(row: RowMapping, now: datetime, period_s: float) -> Outlook:
    """The proactive rule's view of one stage, from its row of `redundancy_inputs` (no forecast
    here: utilization None, the stop alone)."""
    startup = row["mttr_ms"] / 1000.0 if row["mttr_ms"] is not None else STARTUP_S
    stop = row["stop_ms"] / 1000.0 if row["stop_ms"] is not None else startup
    return Outlook(now.timestamp(), period_s, startup, tuple(row["fault_times_s"] or ()), stop, None)


def redundancy_requests(conn: Connection, now: datetime) -> tuple[list[Request], list[dict]]:
    """(requests, `redundancy_state_save` rows) of every HA stage whose period has come."""
    requests, saved = [], []
    default = Redundancy()  # a spec stored without these reads as apps.yaml's default
    for row in conn.execute(db.query("redundancy_inputs"), {
            "now": now, "period_s": default.period_s, "enabled": default.enabled}).mappings():
        spec = stored(Redundancy, row["redundancy"])
        if row["updated_at"] is not None and (now - row["updated_at"]).total_seconds() < spec.period_s:
            continue
        opts = spec.params
        hold = row["hold_until"].timestamp() if row["hold_until"] is not None else None
        before = initial_state(opts) if row["r"] is None else RedundancyState(
            row["r"], row["direction"], row["last_delta_ms"], hold, bool(row["proactive"]))
        bound = float(spec.bound_ms or row["r_max_ms"])
        after, decision = step(before, row["tail_ms"], bound, opts, _outlook(row, now, spec.period_s))
        saved.append({"stage_id": row["stage_id"], "r": after.r, "direction": after.direction,
                      "last_delta_ms": after.last_delta_ms, "updated_at": now, "proactive": after.proactive,
                      "hold_until": None if after.hold_until_s is None
                      else datetime.fromtimestamp(after.hold_until_s, UTC)})
        want = replicas_for(after.r, spec.max_replicas)
        log.info("stage %s: action=redundancy %s r=%.2f replicas %d→%d: %s", row["stage_id"], decision.action,
                 after.r, row["replicas"], want, decision.reason)
        if want == row["replicas"]:
            continue
        action = ADD_REPLICA if want > row["replicas"] else REMOVE_REPLICA
        excess = abs(decision.delta_ms or 0.0) / bound
        requests.append(Request(row["stage_id"], action, None, None, gain=excess, cost_ms=0.0,
                                reason=f"redundancy r {before.r:.2f} → {after.r:.2f}: {decision.reason}",
                                snapshot={"target_replicas": want, "r": after.r, "tail_ms": row["tail_ms"]},
                                app=row["app"]))
    return requests, saved
