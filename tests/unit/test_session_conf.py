"""The driver's Spark conf (spark_apps/stage.session_conf): what a driver asks of its JVMs."""

from __future__ import annotations

from spark_apps.stage import JAVA_OPTIONS_ENV, session_conf


def test_java_options_reach_the_driver_and_its_executors_and_nothing_is_added_without_them(monkeypatch):
    monkeypatch.setenv(JAVA_OPTIONS_ENV, " -XX:TieredStopAtLevel=1 -XX:+UseSerialGC ")
    conf = session_conf(2, 4, master="spark://10.0.0.1:7077", max_cores=4)
    assert conf["spark.driver.extraJavaOptions"] == "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
    assert conf["spark.executor.extraJavaOptions"] == conf["spark.driver.extraJavaOptions"]
    monkeypatch.setenv(JAVA_OPTIONS_ENV, "")
    assert not {k for k in session_conf(2, 4) if k.endswith("extraJavaOptions")}
