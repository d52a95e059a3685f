"""The driver's Spark conf (spark_apps/stage.session_conf): what a driver asks of its JVMs."""

from __future__ import annotations

from demo.stages import demo_job
from spark_apps.stage import JAVA_OPTIONS_ENV, session_conf
from streamops import jvm_archive


def test_java_options_reach_the_driver_and_its_executors_and_nothing_is_added_without_them(monkeypatch):
    monkeypatch.setenv(jvm_archive.ENV, "off")
    monkeypatch.setenv(JAVA_OPTIONS_ENV, " -XX:TieredStopAtLevel=1 -XX:+UseSerialGC ")
    conf = session_conf(2, 4, master="spark://10.0.0.1:7077", max_cores=4)
    assert conf["spark.driver.extraJavaOptions"] == "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
    assert conf["spark.executor.extraJavaOptions"] == conf["spark.driver.extraJavaOptions"]
    monkeypatch.setenv(JAVA_OPTIONS_ENV, "")
    assert not {k for k in session_conf(2, 4) if k.endswith("extraJavaOptions")}


def test_the_class_archive_goes_first_to_the_driver_and_its_executors_when_it_exists(monkeypatch, tmp_path):
    archive = tmp_path / "spark-classes.jsa"
    monkeypatch.setattr(jvm_archive, "archive_path", lambda: archive)
    monkeypatch.setenv(JAVA_OPTIONS_ENV, "-XX:+UseSerialGC")
    assert session_conf(2, 4)["spark.driver.extraJavaOptions"] == "-XX:+UseSerialGC", "not built: not named"
    archive.write_bytes(b"")
    conf = session_conf(2, 4, master="spark://10.0.0.1:7077", max_cores=4)
    assert conf["spark.driver.extraJavaOptions"] == f"-XX:SharedArchiveFile={archive} -XX:+UseSerialGC"
    assert conf["spark.executor.extraJavaOptions"] == conf["spark.driver.extraJavaOptions"]


def test_a_cluster_driver_registers_with_its_admitted_executors_and_a_warm_spare_with_none():
    conf = session_conf(2, 4, master="spark://10.0.0.1:7077", max_cores=2)
    assert (conf["spark.dynamicAllocation.initialExecutors"], conf["spark.driver.host"]) == ("2", "127.0.0.1")
    spare = session_conf(2, 4, master="spark://10.0.0.1:7077", max_cores=2, initial_executors=0)
    assert spare["spark.dynamicAllocation.initialExecutors"] == "0"


def test_the_warm_up_samples_the_newest_input_or_else_makes_records_of_the_stage_s_kind(monkeypatch, tmp_path):
    """A stage started before its producers still warms up (issue 28 item 1): on a synthetic
    sample of valid records of its input kind, the same that the generator writes."""
    from spark_apps.stage import warm_up_sample
    from streamops import registry
    from streamops.generator import records

    monkeypatch.setenv("STREAMOPS_HOME", str(tmp_path))
    stage = registry.Stage.model_validate({
        **demo_job("taxi_top10", {"kind": "files", "path": "in"}), "cores": {"initial": 1, "max": 1},
        "state_partitions": 2, "trigger_interval_ms": 1000, "pool": "p", "policy": {"kind": "edf"}})
    lines = warm_up_sample(stage, 40)
    assert len(lines) == 40 and all(records.parse_valid("taxi", line) is not None for line in lines)
    (tmp_path / "data" / "in").mkdir(parents=True)
    (tmp_path / "data" / "in" / "part-1.json").write_text("a\nb\n")
    assert warm_up_sample(stage, 40) == ["a", "b"], "real input, when there is some, is the sample"


def test_the_spark_ui_is_on_only_on_the_launcher_s_port_and_spark_s_stores_are_bounded_either_way():
    from spark_apps.stage import STATUS_RETENTION

    off = session_conf(2, 4)
    assert off["spark.ui.enabled"] == "false" and "spark.ui.port" not in off
    on = session_conf(2, 4, master="spark://10.0.0.1:7077", max_cores=2, ui_port=4711)
    assert (on["spark.ui.enabled"], on["spark.ui.port"], on["spark.ui.killEnabled"]) == ("true", "4711", "false")
    assert int(on["spark.sql.streaming.ui.retainedQueries"]) <= 10
    for conf in (off, on):  # a driver runs for days: Spark's status store keeps the newest only
        assert {k: conf[k] for k in STATUS_RETENTION} == STATUS_RETENTION
        assert int(conf["spark.ui.retainedJobs"]) <= 100 and int(conf["spark.sql.ui.retainedExecutions"]) <= 100


def test_the_launcher_gives_a_driver_a_free_loopback_port_for_its_ui_and_none_in_a_pool_with_spark_ui_false(
        monkeypatch, tmp_path):
    """The launcher's choice reaches the driver's conf (spark_apps.stage.ui_port) through the
    driver's environment; with `spark_ui: false` the run's ui_url is None (NULL in deployments)."""
    import socket
    from types import SimpleNamespace

    from spark_apps.stage import ui_port
    from streamops import processes, registry
    from streamops.execute.launcher import LocalProcessLauncher

    assert registry.Pool(cores=2).spark_ui and not registry.Pool(cores=2, spark_ui=False).spark_ui
    monkeypatch.setenv("STREAMOPS_HOME", str(tmp_path))
    (tmp_path / "logs").mkdir()
    envs = []
    monkeypatch.setattr(processes, "spawn_detached",
                        lambda argv, **kw: envs.append(kw["env"]) or SimpleNamespace(pid=4242 + len(envs)))
    launcher = LocalProcessLauncher()
    on, off = launcher.launch(1, "a.s", {}), launcher.launch(2, "a.s", {}, spark_ui=False)
    assert off.ui_url is None
    host, port = on.ui_url.removeprefix("http://").split(":")
    assert host == "127.0.0.1" and envs[0]["SPARK_LOCAL_IP"] == "127.0.0.1" == envs[0]["SPARK_PUBLIC_DNS"]
    with socket.socket() as s:  # free on loopback when chosen
        s.bind(("127.0.0.1", int(port)))
    for env, expected in ((envs[0], int(port)), (envs[1], None)):
        monkeypatch.delenv("STREAMOPS_SPARK_UI_PORT", raising=False)
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        assert ui_port() == expected
        assert session_conf(1, 2, ui_port=ui_port())["spark.ui.enabled"] == str(expected is not None).lower()
