"""The mechanisms choose themselves (issue 47 item 1): `plan.mechanisms.choose` picks what the
executor's cost rule picked before it, over a grid of situations. The oracle is that rule as it
was: `choose_mechanism` (plan/mechanism.py until issue 47) fed with the refusals the executor's
mechanisms gave (execute/mechanisms/ until issue 47), both copied below unchanged."""

from __future__ import annotations

import itertools

from streamops.plan.mechanism import in_driver_refusal, live_refusal
from streamops.plan.mechanisms import Situation, choose

GRID = dict(
    action=("scale_out", "scale_in", "migrate", "upgrade"),
    running=(True, False),
    pool_kind=("local", "standalone"),
    target_pool=(None, "a", "b"),
    current_cores=(1, 2),
    target_cores=(1, 2, 3, 6),
    executor_cores=(1, 2),
    state_partitions=(None, 4),
    target_partitions=(None, 4, 8),
    target_pool_free=(0, 2, 6),
    staged_ready=(False, True),
    source_kind=("files", "kafka"),
)


def situations():
    for values in itertools.product(*GRID.values()):
        k = dict(zip(GRID, values, strict=True))
        if not k["running"] and k["current_cores"] != 1:
            continue  # a stage that is not running has no current cores: one case is enough
        yield Situation(pool="a", target_pool_total=8, **{**k, "current_cores": k["current_cores"] if k["running"]
                                                                  else None})


# plan/mechanism.py's cost rule, as it was
def choose_mechanism(action: str, target_cores: int, target_pool_free: int, staged_ready: bool,
                     running: bool = True, live_refused: str | None = "not considered",
                     in_driver_refused: str | None = "not considered",
                     active_backup_refused: str | None = None) -> tuple[str, str]:
    """The cost rule for a plan that names no mechanism (a policy grant): the smallest outage
    the resources allow. `live_refused` and `in_driver_refused` are `live_refusal`'s and
    `in_driver_refusal`'s answers (None: that mechanism applies); `active_backup_refused`, why no
    secondary can run beside the primary whatever the room (a Kafka source). Returns (mechanism, why)."""
    if running and live_refused is None:
        return "live", "executors are added or removed while the query runs: no outage, no new driver"
    in_driver = running and in_driver_refused is None
    if action == "scale_in":
        if in_driver:
            return "in_driver", "the driver repartitions its own state between two batches: no new JVM"
        return "pause_resume", "a scale-in runs in the maintenance window, where a short outage is accepted"
    if not running:
        return "pause_resume", "the stage is not running: there is no old run to overlap or to stage from"
    if target_pool_free >= target_cores and active_backup_refused is None:
        return "active_backup", (f"the target pool has {target_pool_free} free cores for the new run beside the "
                                 f"old one: no outage")
    if in_driver:
        return "in_driver", (f"no room for an overlap ({target_pool_free} free cores < {target_cores}); the driver "
                             f"repartitions its own state between two batches: no new JVM")
    if staged_ready:
        return "prestaged", "a copy was staged at the alarming level: no copy or repartition in the outage"
    no_overlap = active_backup_refused or f"no room for an overlap ({target_pool_free} free cores < {target_cores})"
    return "pause_resume", f"{no_overlap} and nothing staged"


def _live_refused(s: Situation) -> str | None:  # LiveScale.refusal, as it was
    if not s.running:
        return "not a live change: the stage is not running"
    why = live_refusal(s.action, s.pool_kind, s.pool, s.target_pool, s.target_cores, s.executor_cores,
                       s.state_partitions, s.target_partitions)
    return f"not a live change: {why}" if why else None


def _in_driver_refused(s: Situation) -> str | None:  # InDriver.refusal, as it was
    if not s.running:
        return "not an in-driver change: the stage is not running"
    assert s.current_cores is not None
    why = in_driver_refusal(s.action, s.pool_kind, s.pool, s.target_pool, s.current_cores, s.target_cores,
                            s.executor_cores)
    return f"not an in-driver change: {why}" if why else None


def _active_backup_refused(s: Situation) -> str | None:  # ActiveBackup.refusal, as it was
    if s.source_kind == "kafka":
        return "a Kafka stage has no file source log to judge a secondary's catch-up by"
    if s.running and s.target_pool_free < s.target_cores:
        return (f"pool {s.target_pool or s.pool!r} has {s.target_pool_free} free of {s.target_pool_total} cores; "
                f"the new run needs {s.target_cores} beside the running one")
    return None


def old_choice(s: Situation) -> str:
    """`reconfigure._choose` as it was."""
    return choose_mechanism(s.action, s.target_cores, s.target_pool_free, s.staged_ready, running=s.running,
                            live_refused=_live_refused(s), in_driver_refused=_in_driver_refused(s),
                            active_backup_refused=_active_backup_refused(s))[0]


def test_the_choice_is_the_executors_cost_rule_over_a_grid_of_situations():
    seen: dict[str, int] = {}
    differ = []
    for s in situations():
        old, new = old_choice(s), choose(s).mechanism
        seen[old] = seen.get(old, 0) + 1
        if new != old:
            differ.append((s, old, new))
    assert not differ, f"{len(differ)} situations differ, e.g. {differ[:3]}"
    assert set(seen) == {"live", "in_driver", "pause_resume", "prestaged", "active_backup"}, seen


def test_a_mechanism_that_can_carry_out_a_change_refuses_it_as_it_did():
    """The refusals asked when a person names a mechanism moved from execute/ to the rules unchanged."""
    from streamops.plan.mechanisms import RULES

    for s in situations():
        assert RULES["live"].refusal(s) == _live_refused(s)
        assert RULES["in_driver"].refusal(s) == _in_driver_refused(s)
        assert RULES["active_backup"].refusal(s) == _active_backup_refused(s)
        assert RULES["pause_resume"].refusal(s) is None and RULES["prestaged"].refusal(s) is None
