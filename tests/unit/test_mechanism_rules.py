"""Pure rules of the reconfiguration mechanisms (plan/mechanism.py): no database, no Spark."""

from __future__ import annotations

import pytest

from streamops.plan.mechanism import choose_mechanism, in_driver_refusal, key_groups, live_refusal, staged_copy_stale


def test_a_plan_without_a_mechanism_gets_the_smallest_outage_the_resources_allow():
    pick = lambda *a, **k: choose_mechanism(*a, **k)[0]  # noqa: E731
    assert pick("scale_out", 2, 2, staged_ready=True) == "active_backup", "room beside the old run: overlap"
    assert pick("migrate", 1, 1, staged_ready=False) == "active_backup"
    assert pick("scale_out", 2, 1, staged_ready=True) == "prestaged", "no room, but a staged copy"
    assert pick("scale_out", 2, 1, staged_ready=False) == "pause_resume"
    assert pick("scale_in", 1, 4, staged_ready=True) == "pause_resume", "scale-ins wait for the window anyway"
    assert pick("scale_out", 2, 4, staged_ready=True, running=False) == "pause_resume"
    assert "1 free cores < 2" in choose_mechanism("scale_out", 2, 1, staged_ready=False)[1]


def test_a_staged_copy_serves_only_the_live_run_and_only_while_it_is_recent():
    live = "/ckpt/taxi.top10"
    assert staged_copy_stale(live, 68, live, 90, max_lag=30) is None
    assert staged_copy_stale(live, 68, live, None, max_lag=30) is None, "no commit yet: nothing to replay"
    # The demo's case: a copy staged in an earlier session, 432 batches ago, replayed for minutes.
    assert "432 batches behind" in staged_copy_stale(live, 68, live, 500, max_lag=30)
    assert "now runs from" in staged_copy_stale(live, 68, "/ckpt/taxi.top10.staged-1", 70)


def test_a_change_that_live_scaling_can_make_is_made_live():
    assert choose_mechanism("scale_out", 2, 0, staged_ready=False, live_refused=None)[0] == "live"
    assert choose_mechanism("scale_in", 1, 0, staged_ready=True, live_refused=None)[0] == "live", \
        "no outage: a live scale-in need not wait for the window"
    assert choose_mechanism("scale_out", 2, 0, staged_ready=False, running=False,
                            live_refused=None)[0] == "pause_resume"
    assert choose_mechanism("scale_out", 2, 2, staged_ready=False,
                            live_refused="the pool is local")[0] == "active_backup"


def test_a_repartition_in_the_same_pool_stays_in_the_running_driver():
    pick = lambda *a, **k: choose_mechanism(*a, **k)[0]  # noqa: E731
    # Beyond the key groups: the partitions must change, which live scaling cannot do.
    beyond = dict(live_refused="6 cores exceed the 4 state partitions", in_driver_refused=None)
    assert pick("scale_out", 6, 0, staged_ready=True, **beyond) == "in_driver", "no new JVM beats a staged copy"
    assert pick("scale_out", 6, 6, staged_ready=False, **beyond) == "active_backup", "room to overlap: no outage"
    assert pick("scale_in", 2, 0, staged_ready=False, **beyond) == "in_driver"
    assert pick("scale_out", 6, 0, staged_ready=False, running=False, **beyond) == "pause_resume"
    assert pick("scale_out", 2, 0, staged_ready=False, in_driver_refused="the pool is local") == "pause_resume"


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
