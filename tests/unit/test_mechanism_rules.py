"""Pure rules of the reconfiguration mechanisms (plan/mechanism.py, plan/mechanisms.py): no database, no Spark."""

from __future__ import annotations

import pytest

from streamops.plan.mechanism import in_driver_refusal, key_groups, live_refusal, staged_copy_stale
from streamops.plan.mechanisms import Situation, choose


def situation(action: str = "scale_out", target_cores: int = 2, free: int = 0, staged_ready: bool = False,
              running: bool = True, **kw) -> Situation:
    """A stage of 1 core running on the local pool "a" (its cores fixed at start: neither a live
    nor an in-driver change of cores), 4 state partitions, a pool of 8 cores with `free` free."""
    return Situation(**{**dict(action=action, running=running, pool="a", pool_kind="local", executor_cores=1,
                                current_cores=1 if running else None, target_pool=None, target_cores=target_cores,
                                target_partitions=None, state_partitions=4, target_pool_free=free,
                                target_pool_total=8, staged_ready=staged_ready), **kw})


def pick(*a, **k) -> str:
    return choose(situation(*a, **k)).mechanism


CLUSTER = dict(pool_kind="standalone")  # executors come and go: live applies within the key groups


def test_a_plan_without_a_mechanism_gets_the_smallest_outage_the_resources_allow():
    assert pick("scale_out", 2, 2, staged_ready=True) == "active_backup", "room beside the old run: overlap"
    assert pick("migrate", 1, 1, target_pool="b") == "active_backup"
    assert pick("scale_out", 2, 1, staged_ready=True) == "prestaged", "no room, but a staged copy"
    assert pick("scale_out", 2, 1, staged_ready=False) == "pause_resume"
    assert pick("scale_in", 1, 4, staged_ready=True, current_cores=2) == "pause_resume", \
        "scale-ins wait for the window anyway"
    assert pick("scale_out", 2, 4, staged_ready=True, running=False) == "pause_resume"
    why = choose(situation("scale_out", 2, 1)).why
    assert "pool 'a' has 1 free of 8 cores; the new run needs 2 beside the running one" in why
    assert "not prestaged: nothing staged" in why


def test_ties_go_to_no_new_driver_and_the_reason_names_the_estimate():
    live = choose(situation("scale_out", 2, 8, **CLUSTER))
    assert live.mechanism == "live" and live.estimate.seconds == 0.0, "active_backup's outage is 0 s too"
    assert live.why.startswith("executors are added or removed while the query runs: no outage, no new driver "
                               "(about 0 s)")


def test_a_staged_copy_serves_only_the_live_run_and_only_while_it_is_recent():
    live = "/ckpt/taxi.top10"
    assert staged_copy_stale(live, 68, live, 90, max_lag=30) is None
    assert staged_copy_stale(live, 68, live, None, max_lag=30) is None, "no commit yet: nothing to replay"
    # The demo's case: a copy staged in an earlier session, 432 batches ago, replayed for minutes.
    assert "432 batches behind" in staged_copy_stale(live, 68, live, 500, max_lag=30)
    assert "now runs from" in staged_copy_stale(live, 68, "/ckpt/taxi.top10.staged-1", 70)


def test_a_change_that_live_scaling_can_make_is_made_live():
    assert pick("scale_out", 2, 0, **CLUSTER) == "live"
    assert pick("scale_in", 1, 0, staged_ready=True, current_cores=2, **CLUSTER) == "live", \
        "no outage: a live scale-in need not wait for the window"
    assert pick("scale_out", 2, 0, running=False, **CLUSTER) == "pause_resume"
    assert pick("scale_out", 2, 2) == "active_backup", "the pool is local: not live"


def test_a_repartition_in_the_same_pool_stays_in_the_running_driver():
    # The partitions change, which live scaling cannot do (beyond the key groups, or asked for).
    beyond = dict(CLUSTER, current_cores=2, target_partitions=8)
    assert pick("scale_out", 6, 0, staged_ready=True, **beyond) == "in_driver", "no new JVM beats a staged copy"
    assert pick("scale_out", 6, 6, **beyond) == "active_backup", "room to overlap: no outage"
    assert pick("scale_in", 1, 0, **beyond) == "in_driver"
    assert pick("scale_out", 6, 0, running=False, **beyond) == "pause_resume"
    assert pick("scale_out", 2, 0) == "pause_resume", "the pool is local: its cores are fixed at start"


@pytest.mark.parametrize("change,why", [
    (dict(action="migrate"), "needs a new driver"),
    (dict(target_pool="b"), "a new driver"),
    (dict(pool_kind="local"), "the pool is local"),
    (dict(target_cores=3, executor_cores=2), "not a whole number of 2-core executors"),
])
def test_an_in_driver_change_is_refused_with_the_reason(change, why):
    args = dict(action="scale_out", pool_kind="standalone", from_pool="a", target_pool=None, current_cores=1,
                target_cores=2, executor_cores=1)
    assert in_driver_refusal(**args) is None
    assert in_driver_refusal(**{**args, "pool_kind": "local", "target_cores": 1}) is None, \
        "a local driver keeps its cores but can still change its partitions"
    assert why in in_driver_refusal(**{**args, **change})


@pytest.mark.parametrize("change,why", [
    (dict(action="migrate"), "needs a new driver"),
    (dict(pool_kind="local"), "the pool is local"),
    (dict(target_pool="b"), "is not the stage's pool"),
    (dict(target_cores=3, executor_cores=2), "not a whole number of 2-core executors"),
    (dict(target_partitions=8), "an offline repartition"),
    (dict(target_cores=6), "exceed the 4 state partitions"),
])
def test_live_scaling_is_refused_with_the_reason(change, why):
    args = dict(action="scale_out", pool_kind="standalone", from_pool="a", target_pool=None, target_cores=2,
                executor_cores=1, state_partitions=4, target_partitions=None)
    assert live_refusal(**args) is None
    assert why in live_refusal(**{**args, **change})


def test_key_groups_let_a_stateful_stage_scale_live_to_its_max_cores():
    assert key_groups(4, 4, stateful=True) == 8
    assert key_groups(16, 4, stateful=True) == 16, "more partitions than that are kept"
    assert key_groups(2, 4, stateful=False) == 2, "a stateless stage has no state to split"
    assert live_refusal("scale_out", "standalone", "a", None, 4, 1, key_groups(2, 4, True), None) is None
