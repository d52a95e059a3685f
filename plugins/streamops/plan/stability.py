"""No flip-flops, and no scale-in while catching up (issue 46, item 3). Pure.

The Application Manager asks `stability_verdict` of every scale-out and scale-in before the token
bucket or the window's budget sees it, in the simulator and in production alike:
- a scale-in is declined while the stage's backlog drains (`draining`): the cores are what
  catches it up (FLINK-31318, an autoscaler scaling down a job that was catching up);
- a change whose direction reverses the stage's last change, granted less than
  `reversal_interval_s` ago, is declined with that reason, except a scale-out of a stage whose
  backlog drains: refusing cores to a stage that is falling behind turns a flip-flop into an
  outage (a 3.9x flash crowd 115 s after a scale-in was 785 s above R_max, waiting out the
  interval, on the suite's flash_crowd:101);
- a scale-in is deferred until it has been asked for, without a break, for `scale_down_delay_s`
  (Flink's `job.autoscaler.scale-down.interval`): a dip shorter than that gives nothing back;
- while it waits, a scale-in asks for the most cores it asked for since it was first made
  (`refreshed_target`; Flink's scale-down interval also takes "the maximum parallelism
  recommended within it"): a scale-in sized on the quietest minute of the delay was reversed by
  the next rise (mpc's 10→2 at a diurnal trough, then 2→6 720 s later, on flash_crowd:4).

A **flip-flop** is a change of a stage whose direction (more or fewer cores) is opposite to that
stage's previous resizing change, granted less than a window (the suite: 900 s) after it.
Migrations keep the cores: they have no direction and neither count nor reset it. `churn`
counts them, with the changes per stage per day.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from streamops.plan.model import SCALE_IN, SCALE_OUT, Request
from streamops.plan.options import AppOptions

FLIP_FLOP_S = 900.0  # the window the suite counts flip-flops in: the guard's default reversal_interval_s


@dataclass(frozen=True)
class LastChange:
    """A stage's latest granted change: when it was granted, its action and cores."""

    at: datetime
    action: str
    from_cores: int | None
    to_cores: int | None


@dataclass(frozen=True)
class StageFacts:
    """What the guard knows of a stage now, besides the request: its last change and whether its
    backlog is draining (both read fresh by the caller, never from the request's snapshot)."""

    last: LastChange | None = None
    draining: bool = False


def direction(action: str, from_cores: int | None, to_cores: int | None) -> int:
    """+1 for more cores, −1 for fewer, 0 for none (a migration, a no-op)."""
    if from_cores is not None and to_cores is not None:
        return (to_cores > from_cores) - (to_cores < from_cores)
    return {SCALE_OUT: 1, SCALE_IN: -1}.get(action, 0)


def draining(backlog_rows: float, input_rate: float, opt: AppOptions) -> bool:
    """More than `drain_backlog_s` seconds of input queued (at least 1 row/s): the stage is
    catching up, whatever its busy fraction says."""
    return backlog_rows > opt.drain_backlog_s * max(input_rate, 1.0)


def reversal(r: Request, facts: StageFacts, now: datetime, opt: AppOptions) -> str | None:
    """What `r` reverses, when its direction is opposite to the stage's last change and that change
    was granted less than `reversal_interval_s` ago ("the scale_in 12→1 granted 115 s ago")."""
    d = direction(r.action, r.snapshot.get("cores"), r.target_cores)
    last = facts.last
    if last is None or d == 0 or direction(last.action, last.from_cores, last.to_cores) != -d:
        return None
    ago = (now - last.at).total_seconds()
    if ago >= opt.reversal_interval_s:
        return None
    return f"the {last.action} {last.from_cores}→{last.to_cores} granted {ago:.0f} s ago"


def stability_verdict(r: Request, facts: StageFacts, now: datetime, opt: AppOptions) -> tuple[str, str] | None:
    """(outcome, reason) when `r` must not be granted now: "declined" (it reverses a recent change,
    or scales in while catching up) or "deferred" (a scale-in inside its delay); None: it may."""
    if r.action not in (SCALE_OUT, SCALE_IN):
        return None
    d = direction(r.action, r.snapshot.get("cores"), r.target_cores)
    if d < 0 and facts.draining:
        return "declined", (f"no scale-in while the backlog drains (more than {opt.drain_backlog_s:g} s of input "
                            f"queued): its cores are catching up")
    reverses = reversal(r, facts, now, opt)
    if reverses is not None and not (d > 0 and facts.draining):
        return "declined", f"reverses {reverses} (< reversal_interval_s {opt.reversal_interval_s:g} s)"
    if d < 0 and opt.scale_down_delay_s > 0:
        wanted = 0.0 if r.first_made_at is None else (now - r.first_made_at).total_seconds()
        if wanted < opt.scale_down_delay_s:
            return "deferred", (f"scale-down delay: asked for {wanted:.0f} s of the {opt.scale_down_delay_s:g} s a "
                                f"scale-in must be wanted without a break")
    return None


def refreshed_target(action: str, cores: int | None, kept: int | None, asked: int | None) -> int | None:
    """The target an open request keeps when its Operator Manager asks again (`kept`: the open
    request's, `asked`: the new one's): a scale-in still below the stage's `cores` keeps the most
    it has asked for; anything else takes the newest ask. sql/queries/requests_upsert.sql is the
    same rule in production."""
    if action != SCALE_IN or kept is None or asked is None or cores is None or kept >= cores:
        return asked
    return max(kept, asked)


def churn(changes: Iterable[tuple[float, str, int, int]], stages: int, duration_s: float, day_s: float,
          window_s: float = FLIP_FLOP_S) -> dict[str, Any]:
    """Flip-flops and changes per stage per day of `changes` (granted at t, stage, from, to cores)."""
    prev: dict[str, tuple[float, int]] = {}
    flips: dict[str, int] = {}
    n = 0
    for t, stage, frm, to in sorted(changes, key=lambda c: c[0]):
        n += 1
        flips.setdefault(stage, 0)
        d = direction("", frm, to)
        if d == 0:
            continue
        p = prev.get(stage)
        if p is not None and p[1] == -d and t - p[0] < window_s:
            flips[stage] += 1
        prev[stage] = (t, d)
    days = duration_s / day_s if day_s > 0 else 0.0
    per = n / max(1, stages) / days if days > 0 else 0.0
    return {"flip_flops": sum(flips.values()), "flip_flops_by_stage": flips, "changes_per_stage_day": round(per, 3)}
