"""The embedded Spark cluster's bookkeeping and how a standalone pool finds its master (pure: the
cluster itself is started by tests/system/test_live_scaling.py's fixture)."""

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


def _secret() -> str:
    from streamops import spark_cluster

    conf = spark_cluster.conf_dir() / "spark-defaults.conf"
    return dict(line.split(" ", 1) for line in conf.read_text().splitlines())["spark.authenticate.secret"]


@pytest.mark.db
def test_the_embedded_cluster_authenticates_with_a_secret_on_no_command_line(spark_standalone):
    """Issue 25: the embedded cluster ran without `spark.authenticate`. The secret is generated
    once into a 0600 conf file that the master and workers read with --properties-file and the
    drivers through PYSPARK_SUBMIT_ARGS: on no process's command line. Not SPARK_CONF_DIR,
    which would put a non-empty directory on the classpath (no class archive then)."""
    import os

    import psutil

    from streamops import spark_cluster

    if os.environ.get(spark_cluster.ENV_MASTER):
        pytest.skip("an external master is in use")
    conf = spark_cluster.conf_dir() / "spark-defaults.conf"
    assert os.stat(conf).st_mode & 0o777 == 0o600 and "spark.authenticate true" in conf.read_text()
    secret = _secret()
    assert len(secret) == 64
    c = spark_cluster.load_record()
    for pid in (c.master_pid, *(w.pid for w in c.workers)):
        java = next(p for p in [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
                    if "java" in p.name())
        assert java.cmdline()[-2:] == ["--properties-file", str(conf)], java.cmdline()[-4:]
        # spark-class defaults it to pyspark's own conf/, which the wheel does not have
        assert psutil.Process(pid).environ().get("SPARK_CONF_DIR") != str(spark_cluster.conf_dir())
    assert spark_cluster.client_env() == {"PYSPARK_SUBMIT_ARGS": f"--properties-file {conf} pyspark-shell"}
    on_argv = [p.pid for p in psutil.process_iter(["cmdline"]) if secret in " ".join(p.info["cmdline"] or [])]
    assert not on_argv, f"the secret is on the command line of {on_argv}"


@pytest.mark.db
@pytest.mark.slow
def test_a_driver_without_the_cluster_s_secret_is_refused(spark_standalone):
    """A driver without the secret cannot register (Spark retries 3 × 20 s, then gives up)."""
    import os
    import subprocess
    import sys

    from streamops import spark_cluster

    if os.environ.get(spark_cluster.ENV_MASTER):
        pytest.skip("an external master is in use")
    code = ("from pyspark.sql import SparkSession\n"
            f"s = SparkSession.builder.master({spark_standalone!r}).config('spark.cores.max', '1').getOrCreate()\n"
            "print('COUNT', s.range(10).count())\n")
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_CONF_DIR", "PYSPARK_SUBMIT_ARGS")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=240)
    assert out.returncode != 0 and "COUNT" not in out.stdout, out.stdout[-2000:]
    assert "All masters are unresponsive" in out.stderr or "SaslMessage" in out.stderr, out.stderr[-3000:]


def test_a_record_from_before_hosts_is_on_loopback_and_a_worker_needs_the_cluster_s_secret(monkeypatch, tmp_path):
    """Multi-host (docs/cluster.md): the record names the master's host, loopback when it does not;
    a worker joining from another machine refuses to start without a copy of the secret, since a
    secret of its own would never match the master's."""
    import json

    from streamops import spark_cluster

    monkeypatch.setenv("STREAMOPS_HOME", str(tmp_path))
    (tmp_path / "spark").mkdir()
    (tmp_path / "spark" / "cluster.json").write_text(json.dumps(
        {"master_port": 7077, "webui_port": 8080, "master_pid": 1, "workers": []}))
    c = spark_cluster.load_record()
    assert (c.url, c.ui) == ("spark://127.0.0.1:7077", "http://127.0.0.1:8080")
    assert spark_cluster.Cluster(7077, 8080, 1, host="10.0.0.5").url == "spark://10.0.0.5:7077"
    with pytest.raises(spark_cluster.SparkClusterError, match="copy the master's"):
        spark_cluster.worker_argv("spark://10.0.0.5:7077", "10.0.0.6", 2, "2g")
    conf = spark_cluster.conf_dir()
    conf.mkdir(parents=True)
    (conf / "spark-defaults.conf").write_text("spark.authenticate true\n")
    argv, env = spark_cluster.worker_argv("spark://10.0.0.5:7077", "10.0.0.6", 2, "2g")
    assert argv[1:5] == ["org.apache.spark.deploy.worker.Worker", "spark://10.0.0.5:7077", "--host", "10.0.0.6"]
    assert argv[-2:] == ["--properties-file", str(conf / "spark-defaults.conf")]
    assert env["SPARK_LOCAL_IP"] == "10.0.0.6" and "SPARK_CONF_DIR" not in env
