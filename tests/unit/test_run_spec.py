"""The typed contract between control and driver: a run's spec, commands and their outcomes."""

from __future__ import annotations

import pydantic
import pytest

from demo.stages import demo_job
from streamops import registry
from streamops.run_spec import CommandOutcome, FaultArgs, RepartitionArgs, RunSpec, ScaleArgs, StopArgs, command_args


def _spec(**over: object) -> RunSpec:
    stage = registry.Stage.model_validate({**demo_job("wordcount", {"path": "in"}), "cores": {"initial": 1, "max": 2},
                                           "pool": "p"})
    return RunSpec(app="a", stage="s", spec=stage, pool=registry.Pool(cores=2),
                   **{"operator_manager": True, "code_archive": "/x/code-1.zip", "code_sha256": "ab" * 32, **over})


def test_a_run_spec_survives_its_trip_through_the_deployments_row():
    spec = _spec(reconfiguration_id=7)
    stored = spec.model_dump(mode="json")  # what deployments.config holds
    back = RunSpec.of(stored)
    assert back == spec and back.spec.job == "demo_jobs.web:wordcount"
    assert back.spec.record_schema == spec.spec.record_schema


def test_a_run_spec_with_a_field_the_driver_does_not_know_is_refused():
    with pytest.raises(pydantic.ValidationError, match="extra_forbidden|Extra inputs"):
        RunSpec.of({**_spec().model_dump(mode="json"), "workload": "wordcount"})


@pytest.mark.parametrize("command, args, want", [
    ("scale", {"cores": 2, "timeout_s": 30, "reconfiguration_id": 4}, ScaleArgs(cores=2, timeout_s=30,
                                                                                 reconfiguration_id=4)),
    ("repartition", {"partitions": 8}, RepartitionArgs(partitions=8)),
    ("fault", {"kind": "slow_batch", "magnitude_s": 2.0}, FaultArgs(kind="slow_batch", magnitude_s=2.0)),
    ("stop", None, StopArgs()),
])
def test_commands_carry_typed_arguments(command, args, want):
    assert command_args(command, args) == want


@pytest.mark.parametrize("command, args, why", [
    ("scale", {"cores": "two"}, "cores"),
    ("scale", {}, "cores"),
    ("repartition", {"partitions": 0}, "partitions"),
    ("scale", {"cores": 2, "core": 3}, "core"),
    ("reboot", {}, "unknown command 'reboot'"),
])
def test_bad_command_arguments_are_refused_with_the_field_named(command, args, why):
    with pytest.raises(ValueError, match=why):
        command_args(command, args)


def test_outcomes_are_values_not_prefixes():
    done = CommandOutcome(status="done", detail="4 state partitions")
    assert str(done) == "done: 4 state partitions" and CommandOutcome.parse(str(done)) == done and done.ok
    assert not CommandOutcome.parse("refused: a local driver's cores are fixed at start").ok
    assert CommandOutcome.parse(None) is None
    odd = CommandOutcome.parse("doneish")
    assert odd.status == "failed" and "doneish" in odd.detail, "an unknown outcome is never read as success"
