"""The embedded Spark cluster's bookkeeping and how a standalone pool finds its master (pure: the
cluster itself is started by tests/test_live_scaling.py's fixture)."""

from __future__ import annotations

import pytest

from streamops import spark_cluster
from streamops.execute.launcher import LocalProcessLauncher, StandaloneLauncher, launcher_for


def test_an_external_master_wins_and_a_missing_one_says_what_to_do(monkeypatch):
    monkeypatch.setenv(spark_cluster.ENV_MASTER, "spark://spark-master:7077")
    assert spark_cluster.master_url() == "spark://spark-master:7077"
    assert StandaloneLauncher("embedded").master_url() == "spark://spark-master:7077"
    assert StandaloneLauncher("spark://other:7077").master_url() == "spark://other:7077", "a pool's own URL stays"
    monkeypatch.delenv(spark_cluster.ENV_MASTER)
    if spark_cluster.load_record() is None:
        assert spark_cluster.master_url(required=False) is None
        with pytest.raises(spark_cluster.SparkClusterError, match="streamops spark up"):
            spark_cluster.master_url()


def test_the_launcher_follows_the_pool_master():
    assert type(launcher_for("local")) is LocalProcessLauncher
    assert isinstance(launcher_for("embedded"), StandaloneLauncher)
    assert launcher_for("spark://h:7077") is launcher_for("spark://h:7077")
    with pytest.raises(NotImplementedError, match="expected local, embedded or spark://"):
        launcher_for("yarn")


def test_the_installed_pyspark_is_a_spark_distribution():
    home = spark_cluster.spark_home()
    assert (home / "bin" / "spark-class").is_file() and any((home / "jars").glob("spark-core_*.jar"))


@pytest.mark.db
def test_the_embedded_master_has_no_rest_submission_server(spark_standalone):
    import os
    import socket

    from streamops import spark_cluster

    if os.environ.get(spark_cluster.ENV_MASTER):
        pytest.skip("an external master is in use")
    log = (spark_cluster.home() / "logs" / "master.log").read_text()
    assert "I have been elected leader" in log and "REST" not in log.replace("rest.enabled", "")
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", 6066)) != 0, "something answers on the REST submission port"


def test_a_driver_inherits_no_airflow_secret(monkeypatch):
    from streamops.execute.launcher import driver_env

    monkeypatch.setenv("AIRFLOW__API_AUTH__JWT_SECRET", "jwt")
    monkeypatch.setenv("AIRFLOW__API__SECRET_KEY", "key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws")
    monkeypatch.setenv("STREAMOPS_HOME", "/h")
    env = driver_env({"STREAMOPS_DATABASE_URL": "postgresql://x/y"})
    assert not {"AIRFLOW__API_AUTH__JWT_SECRET", "AIRFLOW__API__SECRET_KEY", "AWS_SECRET_ACCESS_KEY"} & set(env)
    assert env["STREAMOPS_HOME"] == "/h" and env["STREAMOPS_DATABASE_URL"] == "postgresql://x/y" and "PATH" in env
