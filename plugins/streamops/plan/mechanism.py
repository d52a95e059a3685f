"""Pure rules of the reconfiguration mechanisms (POLICIES.md §5): which mechanism a plan that
names none gets, and when a staged checkpoint copy no longer serves the live run."""

from __future__ import annotations

from pathlib import Path

# A new run from a staged copy replays every batch since the copy before it is current again, so
# an old copy turns a short outage into a long catch-up. Beyond this many batches it is re-taken.
STAGED_MAX_LAG_BATCHES = 30


def choose_mechanism(action: str, target_cores: int, target_pool_free: int, staged_ready: bool,
                     running: bool = True) -> tuple[str, str]:
    """The cost rule for a plan that names no mechanism (a policy grant): the smallest outage
    the resources allow. Returns (mechanism, why)."""
    if action == "scale_in":
        return "pause_resume", "a scale-in runs in the maintenance window, where a short outage is accepted"
    if not running:
        return "pause_resume", "the stage is not running: there is no old run to overlap or to stage from"
    if target_pool_free >= target_cores:
        return "active_backup", (f"the target pool has {target_pool_free} free cores for the new run beside the "
                                 f"old one: no outage")
    if staged_ready:
        return "prestaged", "a copy was staged at the alarming level: no copy or repartition in the outage"
    return "pause_resume", f"no room for an overlap ({target_pool_free} free cores < {target_cores}) and nothing staged"


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
