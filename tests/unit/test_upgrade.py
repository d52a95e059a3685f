"""An upgrade (issue 43) is a reconfiguration: it keeps cores and pool, and its new code needs a new driver."""

from __future__ import annotations

import pytest

from streamops import registry
from tests.demo_jobs import demo_job

def test_an_upgrade_keeps_cores_and_pool_and_never_goes_live():
    from streamops.plan.change import Current, InvalidChange, validate_change
    from streamops.plan.mechanism import choose_mechanism, in_driver_refusal, live_refusal

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
    assert choose_mechanism("upgrade", 2, 2, False, live_refused="x", in_driver_refused="x")[0] == "active_backup"
    assert choose_mechanism("upgrade", 2, 1, False, live_refused="x", in_driver_refused="x")[0] == "pause_resume"


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
    from streamops.plan.mechanism import choose_mechanism

    why = "a Kafka stage has no file source log to judge a secondary's catch-up by"
    mech, reason = choose_mechanism("upgrade", 2, 4, False, live_refused="x", in_driver_refused="x",
                                    active_backup_refused=why)
    assert (mech, reason) == ("pause_resume", f"{why} and nothing staged")
    assert choose_mechanism("scale_out", 2, 4, True, live_refused="x", in_driver_refused="x",
                            active_backup_refused=why)[0] == "prestaged"
