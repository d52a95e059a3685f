"""apps.yaml validation: good files load into frozen models, bad ones name app, stage, field and expectation."""

from __future__ import annotations

import copy
from pathlib import Path

import pydantic
import pytest
import yaml

from demo.stages import demo_job
from streamops import registry

GOOD = {
    "pools": {"p1": {"cores": 2, "network_delay_ms": {"p2": 5}}, "p2": {"cores": 4}},
    "apps": {
        "taxi": {
            "r_max_ms": 5000,
            "maintenance_window": {"cron": "0 3 * * *", "duration_min": 30},
            "stages": {
                "top10": {
                    **demo_job("taxi_top10", {"kind": "files", "path": "taxi/in"}),
                    "cores": {"initial": 1, "min": 1, "max": 2},
                    "pool": "p1",
                }
            },
        }
    },
}


def _with(path: list, value) -> dict:
    data = copy.deepcopy(GOOD)
    node = data
    for key in path[:-1]:
        node = node[key]
    if value is _DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return data


_DELETE = object()
STAGE = ["apps", "taxi", "stages", "top10"]


def test_repo_registry_is_valid():
    reg = registry.load(Path(__file__).resolve().parents[2] / "apps.yaml")
    assert {"taxi", "hibench", "clicks"} <= set(reg.apps)
    assert {st.source.kind for _, _, st in reg.stages()} == {"files", "kafka"}
    assert reg.apps["clicks"].stages["wordcount"].source.partitions == 4


def test_good_registry_loads_frozen_models_with_defaults():
    reg = registry.parse(GOOD)
    app, name, st = reg.stage("top10")
    assert (app, name) == ("taxi", "top10")
    assert st.state_partitions == 4 and st.trigger_interval_ms == 1000 and st.sink.kind == "postgres"
    assert st.policy.kind == "threshold3"
    with pytest.raises(pydantic.ValidationError):
        st.pool = "p2"  # frozen


@pytest.mark.parametrize(
    "data, expected",
    [
        (_with(STAGE + ["cores", "min"], 0),
         "app 'taxi', stage 'top10', field 'cores.min': Input should be greater than or equal to 1 (got 0)"),
        (_with(STAGE + ["cores"], {"initial": 3, "min": 1, "max": 2}),
         "app 'taxi', stage 'top10', field 'cores': expected min <= initial <= max, got 1 <= 3 <= 2"),
        (_with(STAGE + ["job"], "wordcount"),
         "app 'taxi', stage 'top10', field 'job': expected an import path 'package.module:function'"),
        (_with(STAGE + ["source", "schema"], "id STRING, ts TIMESTMP"),
         "app 'taxi', stage 'top10', field 'source': schema: column 'ts': type 'TIMESTMP' is not supported"),
        (_with(STAGE + ["source", "event_time"], "id"),
         "app 'taxi', stage 'top10', field 'source': event_time: 'id' is not a TIMESTAMP column of the schema"),
        (_with(STAGE + ["sink"], {"kind": "foreach_batch", "function": "no colon"}),
         "app 'taxi', stage 'top10', field 'sink.function': expected an import path 'package.module:function'"),
        (_with(STAGE + ["pool"], "nowhere"),
         "app 'taxi', stage 'top10', field 'pool': no pool 'nowhere'; expected one of ['p1', 'p2']"),
        (_with(STAGE + ["cores"], {"initial": 1, "max": 3}),
         "app 'taxi', stage 'top10', field 'cores.max': 3 exceeds pool 'p1' capacity (2 cores)"),
        (_with(["apps", "taxi", "r_max_ms"], "fast"),
         "app 'taxi', field 'r_max_ms': Input should be a valid integer"),
        (_with(["apps", "taxi", "maintenance_window", "cron"], "at 3am"),
         "app 'taxi', field 'maintenance_window.cron': not a cron expression: 'at 3am'"),
        (_with(STAGE + ["source"], {"kind": "files"}),
         "app 'taxi', stage 'top10', field 'source.path': Field required"),
        (_with(STAGE + ["trigger_ms"], 500),
         "app 'taxi', stage 'top10', field 'trigger_ms': unknown field (check the spelling)"),
        (_with(["pools", "p1", "cores"], -1),
         "pool 'p1', field 'cores': Input should be greater than or equal to 1"),
        (_with(["pools", "p1", "network_delay_ms"], {"p9": 3}),
         "pool 'p1', field 'network_delay_ms': no pool 'p9'"),
        (_with(["apps", "taxi", "stages"], {}),
         "app 'taxi', field 'stages': Dictionary should have at least 1 item"),
        (_with(["pools", "p1", "master"], "yarn"),
         "pool 'p1', field 'master': expected local, embedded or spark://host:port, got 'yarn'"),
        (_with(["pools", "p1"], {"master": "embedded", "cores": 4, "executor_cores": 2}),
         "app 'taxi', stage 'top10', field 'cores': on pool 'p1' cores come in executors of 2"),
        (_with(["pools", "p1", "executor_memory"], "lots"),
         "pool 'p1', field 'executor_memory': String should match pattern"),
    ],
)
def test_bad_entries_name_app_stage_field_and_expectation(data, expected):
    with pytest.raises(registry.RegistryError) as e:
        registry.parse(data, "apps.yaml")
    assert expected in str(e.value), str(e.value)


@pytest.mark.parametrize("where, name", [("apps", "x.quarantine"), ("apps", "x@replica-1"), ("pools", "p 1"),
                                          ("stages", "top10.quarantine"), ("stages", "top10@replica-1"),
                                          ("stages", "../etc"), ("stages", "x" * 64), ("apps", "")])
def test_names_that_could_share_another_stage_s_checkpoint_are_refused(where, name):
    data = copy.deepcopy(GOOD)
    parent = {"apps": data["apps"], "pools": data["pools"], "stages": data["apps"]["taxi"]["stages"]}[where]
    first = next(iter(parent))
    parent[name] = parent.pop(first)
    if where == "pools":
        for app in data["apps"].values():
            for st in app["stages"].values():
                st["pool"] = name if st["pool"] == first else st["pool"]
    with pytest.raises(registry.RegistryError, match="names are 1-63 letters, digits, '_' or '-'"):
        registry.parse(data)


def test_every_problem_is_reported_at_once():
    data = _with(STAGE + ["cores", "min"], 0)
    data["apps"]["taxi"]["r_max_ms"] = -5
    with pytest.raises(registry.RegistryError) as e:
        registry.parse(data)
    lines = str(e.value).splitlines()
    assert len(lines) == 2 and any("r_max_ms" in ln for ln in lines) and any("cores.min" in ln for ln in lines)


def test_unknown_fields_and_cross_checks_are_reported_together():
    """An unknown field used to hide the cross-checks (cores.max over the pool's capacity) until
    it was fixed: a user fixed one line, ran again and met the next (issue 48 item 12)."""
    data = _with(STAGE + ["cores", "max"], 99)
    data["apps"]["taxi"]["stages"]["top10"]["sourcex"] = 1
    data["apps"]["taxi"]["stages"]["top10"]["source"]["bogus"] = 2
    with pytest.raises(registry.RegistryError) as e:
        registry.parse(data)
    lines = str(e.value).splitlines()
    assert len(lines) == 3, lines
    assert any("'source.bogus': unknown field" in ln for ln in lines)
    assert any("'sourcex': unknown field" in ln for ln in lines)
    assert any("'cores.max': 99 exceeds pool 'p1' capacity" in ln for ln in lines)


def test_unreadable_files(tmp_path):
    with pytest.raises(registry.RegistryError, match="registry file not found"):
        registry.load(tmp_path / "missing.yaml")
    bad = tmp_path / "apps.yaml"
    bad.write_text("pools: [unclosed\n")
    with pytest.raises(registry.RegistryError, match="not valid YAML"):
        registry.load(bad)
    bad.write_text(yaml.safe_dump(["a", "list"]))
    with pytest.raises(registry.RegistryError, match="expected a mapping"):
        registry.load(bad)


def test_stage_lookup_errors_list_known_stages():
    reg = registry.parse(GOOD)
    with pytest.raises(registry.RegistryError, match="known stages: taxi.top10"):
        reg.stage("nope")
    assert reg.stage("taxi.top10")[1] == "top10"


def test_options_are_typed_once_at_load_and_stored_as_the_overrides_apps_yaml_wrote():
    """A stage's policy params, an app's control block and a redundancy manager's params are the
    plan's typed options from load on (no caller parses them again), and a stored spec keeps only
    what differs from the defaults, so it reads back as apps.yaml wrote it."""
    from streamops.plan.options import AppOptions, OperatorOptions
    from streamops.plan.redundancy import RedundancyOptions

    reg = registry.parse({
        "pools": {"p": {"cores": 2}},
        "apps": {"a": {"r_max_ms": 1000, "maintenance_window": {"cron": "0 3 * * *", "duration_min": 5},
                       "control": {"capacity": 2, "beta": 0.75},
                       "stages": {"s": {**demo_job("wordcount", {"kind": "files", "path": "x"}),
                                        "cores": {"initial": 1, "max": 2}, "pool": "p",
                                        "policy": {"kind": "edf", "params": {"u_max": "0.8"}},
                                        "redundancy": {"params": {"r_max": 0.5}}}}}},
    })
    app, st = reg.apps["a"], reg.stage("a.s")[2]
    assert st.policy.params == OperatorOptions(u_max=0.8) and isinstance(st.policy.params.u_max, float)
    assert app.control == AppOptions(capacity=2.0)
    assert st.redundancy.params == RedundancyOptions(r_max=0.5)
    dumped = st.model_dump(mode="json")
    assert dumped["policy"]["params"] == {"u_max": 0.8}
    assert dumped["redundancy"]["params"] == {"r_max": 0.5}
    assert app.model_dump(mode="json", exclude={"stages"})["control"] == {"capacity": 2.0}, "beta 0.75 is the default"
    assert registry.Stage.model_validate(dumped) == st


@pytest.mark.parametrize("field, value", [("replicas", 2), ("redundancy", {"max_replicas": 2})])
def test_replicas_of_a_parquet_sink_are_refused(field, value):
    """Two drivers would swap the same batch_id=N directories with no fencing between them (issue 44)."""
    data = _with(STAGE + ["sink"], {"kind": "parquet", "path": "out/top10"})
    data["apps"]["taxi"]["stages"]["top10"][field] = value
    with pytest.raises(registry.RegistryError) as e:
        registry.parse(data)
    assert f"app 'taxi', stage 'top10', field {field!r}: a parquet sink runs one replica" in str(e.value), str(e.value)
    registry.parse(_with(STAGE + ["sink"], {"kind": "parquet", "path": "out/top10"}))  # one replica: accepted


def test_the_deploy_s_replicas_param_is_refused_for_a_parquet_sink(tmp_path, monkeypatch):
    from streamops.orchestrate import tasks

    data = _with(STAGE + ["sink"], {"kind": "parquet", "path": "out/top10"})
    (tmp_path / "apps.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.setenv("STREAMOPS_APPS", str(tmp_path / "apps.yaml"))
    with pytest.raises(ValueError, match="replicas: stage taxi.top10 has a parquet sink, which runs one replica"):
        tasks.deploy("taxi", replicas_override=2)
