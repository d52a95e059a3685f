"""An upgrade (issue 43) is a reconfiguration: it keeps cores and pool, and its new code needs a new driver."""

from __future__ import annotations

import pytest

from demo.stages import demo_job
from streamops import registry


def test_an_upgrade_keeps_cores_and_pool_and_never_goes_live():
    from streamops.plan.change import Current, InvalidChange, validate_change
    from streamops.plan.mechanism import in_driver_refusal, live_refusal
    from streamops.plan.mechanisms import choose

    reg = registry.parse({"pools": {"p": {"cores": 4}}, "apps": {"a": {
        "r_max_ms": 1000, "maintenance_window": {"cron": "0 3 * * *", "duration_min": 5},
        "stages": {"s": {**demo_job("wordcount", {"path": "x"}), "cores": {"initial": 1, "max": 2}, "pool": "p"}}}}})
    change = validate_change(reg, "a.s", "upgrade", current=Current(2, "p", 4))
    assert (change.action, change.cores, change.pool, change.partitions) == ("upgrade", 2, None, None)
    with pytest.raises(InvalidChange, match="never ran"):
        validate_change(reg, "a.s", "upgrade")
    with pytest.raises(InvalidChange, match="keeps the cores"):
        validate_change(reg, "a.s", "upgrade", cores=2, current=Current(1, "p", 4))
    assert "runs new code" in live_refusal("upgrade", "standalone", "p", None, 2, 1, 4, None)
    assert "runs new code" in in_driver_refusal("upgrade", "standalone", "p", None, 2, 2, 1)
    assert choose(_upgrade(free=2)).mechanism == "active_backup"
    assert choose(_upgrade(free=1)).mechanism == "pause_resume"
    assert choose(_upgrade(free=1, pool_kind="standalone")).mechanism == "pause_resume", "never live nor in_driver"


def test_a_state_repartition_is_refused_up_front_for_an_operator_not_known_to_survive_it():
    from streamops.plan.change import Current, InvalidChange, validate_change

    reg = registry.parse({"pools": {"p": {"cores": 4}}, "apps": {"a": {
        "r_max_ms": 1000, "maintenance_window": {"cron": "0 3 * * *", "duration_min": 5},
        "stages": {"s": {**demo_job("wordcount", {"path": "x"}), "cores": {"initial": 1, "max": 2}, "pool": "p"}}}}})
    ok = Current(1, "p", 4, ("sessionWindowStateStoreSaveExec",))
    assert validate_change(reg, "a.s", "scale_out", cores=2, partitions=8, current=ok).partitions == 8
    odd = Current(1, "p", 4, ("stateStoreSave", "transformWithStateInPandasExec"))
    with pytest.raises(InvalidChange, match="transformWithStateInPandasExec are not known to repartition"):
        validate_change(reg, "a.s", "scale_out", cores=2, partitions=8, current=odd)
    assert validate_change(reg, "a.s", "scale_out", cores=2, current=odd).cores == 2, "cores alone may change"
    with pytest.raises(InvalidChange, match="keeps no state"):
        validate_change(reg, "a.s", "scale_out", partitions=8, current=Current(1, "p", None, ()))


def test_a_kafka_stage_is_never_given_an_active_backup():
    """Its catch-up is judged by file source logs: the rule falls through to what applies instead."""
    from streamops.plan.mechanisms import choose

    why = "a Kafka stage has no file source log to judge a secondary's catch-up by"
    choice = choose(_upgrade(free=4, source_kind="kafka"))
    assert choice.mechanism == "pause_resume"
    assert f"not active_backup: {why}" in choice.why and "not prestaged: nothing staged" in choice.why
    assert choose(_upgrade(action="scale_out", current_cores=1, free=4, staged_ready=True,
                           source_kind="kafka")).mechanism == "prestaged"


def _upgrade(**kw):
    """An upgrade of a stage running with 2 cores on the local pool "p"."""
    from streamops.plan.mechanisms import Situation

    return Situation(**{**dict(action="upgrade", running=True, pool="p", pool_kind="local", executor_cores=1,
                               current_cores=2, target_pool=None, target_cores=2, target_partitions=None,
                               state_partitions=4, target_pool_free=0, target_pool_total=4, staged_ready=False),
                        **{("target_pool_free" if k == "free" else k): v for k, v in kw.items()}})
