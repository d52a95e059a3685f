"""The restart cost a replayed change is given in `sim --calibrate` (sim/calibrate.py; docs/policies.md
§11.4): predicted from anything but that change's own output gap, so that the replay's
availability is a prediction and not a copy of the measured one."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from streamops.plan.cost import CostModel, Observation
from streamops.sim.rundata import RunData


def _median(xs: list[float], default: float) -> float:
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    return float(np.median(xs)) if xs else default


def _first_start_s(run: RunData) -> float | None:
    """The stage's initial start (its first deployment): launch → first output (its first commit,
    else its first batch's end), a driver start like the one a restart makes. None if unrecorded."""
    fs = run.first_start or {}
    end = fs.get("first_commit_at") or fs.get("first_batch_done_at")
    if not fs.get("started_at") or not end or end <= fs["started_at"]:
        return None
    return float((end - fs["started_at"]).total_seconds())


def _batch_s_before(run: RunData, t_s: float, cal: dict[str, Any]) -> float:
    """About one batch duration: the median of the (up to 10) batches before t_s; else the fit's
    trigger interval."""
    ds = [m["batch_duration_ms"] / 1000.0 for m in run.metrics if m.get("batch_duration_ms")
          and run.sec(m["ts"]) < t_s][-10:]
    return _median(ds, cal["trigger_interval_s"])


def restart_cost(run: RunData, cal: dict[str, Any], kind: str, change: dict[str, Any], state_s: float,
                 default_s: float) -> dict[str, Any]:
    """The outage a replayed change (kind "reconfiguration" | "failure") is given, from anything
    but its own output gap (docs/policies.md §11.4), in this order:
    1. `history`: plan.cost.CostModel over the stage's other finished changes and recovered
       failures (run.history, the replayed one left out), when it has rows for it (not its prior);
    2. `model`: a pause-resume rebuilt from this run's measurements that are not the gap: the stop
       at a batch boundary (one batch duration, the batches before it), the offline repartition
       (the change's repartition_ms if recorded, else the model's state cost) and the stage's
       initial start (launch → first commit: a driver start); a failure's recovery: the initial start;
    3. `prior`: the simulator's default restart cost for the mechanism (+ the state's cost).
    {"downtime_s", "source", "detail"}."""
    action = "restart" if kind == "failure" else change["action"]
    mech = "recovery" if kind == "failure" else (change.get("mechanism") or "pause_resume")
    others = [Observation(h["stage_id"], h["action"], float(h["state_bytes"] or 0), float(h["downtime_ms"]),
                          h["mechanism"], 0.0)  # the gap alone: no catch-up in an outage
              for h in run.history if not (h["kind"] == kind and h["id"] == change["id"])]
    if others:
        cm = CostModel(others)
        level = cm.source(run.stage_id, action, mech)
        if level != "prior":
            state = float(change.get("state_bytes") or cal["state_bytes"] or 0.0) if kind != "failure" else 0.0
            return {"downtime_s": round(cm.estimate(run.stage_id, action, state, mech) / 1000.0, 3),
                    "source": "history", "detail": f"CostModel level {level!r}, {len(others)} other row(s) "
                                                    f"of the stage (leave-one-out)"}
    start = _first_start_s(run)
    if start is not None and kind == "failure":
        return {"downtime_s": round(start, 3), "source": "model", "detail": f"initial start {start:.1f} s"}
    if start is not None and mech == "pause_resume":
        at = run.sec(change.get("stop_requested_at") or change["requested_at"])
        stop = _batch_s_before(run, at, cal)
        rep = change["repartition_ms"] / 1000.0 if change.get("repartition_ms") is not None else state_s
        return {"downtime_s": round(stop + rep + start, 3), "source": "model",
                "detail": f"stop {stop:.1f} s (a batch) + repartition {rep:.1f} s "
                          f"({'repartition_ms' if change.get('repartition_ms') is not None else 'state cost'}) "
                          f"+ initial start {start:.1f} s (launch → first commit)"}
    return {"downtime_s": round(default_s + (state_s if mech == "pause_resume" else 0.0), 3), "source": "prior",
            "detail": f"the simulator's default for {mech}"}
