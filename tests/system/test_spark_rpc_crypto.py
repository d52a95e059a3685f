"""Issue 44, item 11: Spark RPC encrypted on the embedded cluster.

A task carries what its closure holds: a sink's `_execute_values_partition` closes over the
driver's `writer_dsn()`, the database URL with its password when it has one. With
`spark.network.crypto.enabled` (AES-GCM, no SASL fallback) every process of the cluster encrypts,
and a process without it is refused instead of being served in the clear.

Real drivers on the session's cluster: one with the cluster's conf, one that turns encryption off.
And (slow: two cluster starts) a cluster of this module's own, its own STREAMOPS_HOME, started
with a conf from before encryption, so that its next `spark_cluster.up` has to add it and restart
the master and the worker on their ports."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import psutil
import pytest

from streamops import processes, spark_cluster
from streamops.waiting import wait_until

# A driver on the cluster: a Python closure that carries a DSN-like string runs on the executors;
# it reports the executors' own JVM flags (psutil, by the application's id on their command line).
DRIVER = r"""
import json, sys
import psutil
from pyspark.sql import SparkSession
master, name = sys.argv[1], sys.argv[2]
s = (SparkSession.builder.master(master).appName(name).config("spark.cores.max", "1")
     .config("spark.executor.cores", "1").config("spark.executor.memory", "512m").config("spark.ui.enabled", "false")
     .getOrCreate())
sc = s.sparkContext
dsn = "postgresql://sink:not-a-real-password@127.0.0.1:1/x"
out = sc.parallelize(range(8), 2).map(lambda i: (i, dsn.split(":")[2].split("@")[0])).collect()
app = sc.applicationId
flags = [a for p in psutil.process_iter(["cmdline"]) if app in (p.info["cmdline"] or [])
         and "org.apache.spark.executor.CoarseGrainedExecutorBackend" in p.info["cmdline"]
         for a in p.info["cmdline"] if a.startswith("-Dspark.network.crypto.")]
print("RESULT", json.dumps({"rows": len(out), "secret_seen": sorted({x[1] for x in out}), "executor_flags": flags,
                            "driver_crypto": sc.getConf().get("spark.network.crypto.enabled", "unset")}))
s.stop()
"""


# The refused driver's application name: the master's own list must never show it.
REFUSED_APP = "rpc-crypto-refused"


def _conf() -> Path:
    return spark_cluster.conf_dir() / "spark-defaults.conf"


def _java(pid: int) -> psutil.Process:
    return next(p for p in [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)] if "java" in p.name())


def _start_refused_driver(url: str, err) -> subprocess.Popen:
    """A driver with the cluster's secret and `spark.network.crypto.enabled=false`: it speaks
    SASL, which the master no longer falls back to."""
    args = f"--properties-file {_conf()} --conf spark.network.crypto.enabled=false pyspark-shell"
    return subprocess.Popen([sys.executable, "-c", DRIVER, url, REFUSED_APP],
                            env={**os.environ, "PYSPARK_SUBMIT_ARGS": args}, stdout=subprocess.PIPE,
                            stderr=err, text=True, start_new_session=True)


def _refusal(proc: subprocess.Popen, err) -> tuple[str, str]:
    """(its log, its stdout) once it logs that the master refused it, or exits; then it is
    stopped (Spark would retry for a minute)."""
    def log() -> str:
        err.seek(0)
        return err.read()
    try:
        wait_until(lambda: "Failed to connect to master" in log() or proc.poll() is not None, 90, interval_s=0.5)
    finally:
        processes.stop(proc.pid, grace_s=5, group=True)
    return log(), proc.stdout.read() if proc.stdout else ""


def _app_names(c: spark_cluster.Cluster) -> list[str]:
    state = spark_cluster.master_state(c) or {}
    return [a.get("name") for a in state.get("activeapps", []) + state.get("completedapps", [])]


def _assert_refused(log: str, stdout: str, c: spark_cluster.Cluster) -> None:
    """Refused: it ran no task, it failed to connect, and the master never registered it. Which
    error reaches the driver's log depends on who closes the channel first (the master's SASL
    refusal or Netty's channelInactive), so no particular message is required."""
    assert "RESULT" not in stdout, "a driver without encryption ran tasks on the cluster"
    assert "Failed to connect to master" in log, log[-3000:]
    assert REFUSED_APP not in _app_names(c), f"the master registered the refused driver: {_app_names(c)}"


@pytest.mark.db
def test_drivers_encrypt_and_one_without_encryption_is_refused(spark_standalone):
    """On the session's cluster (its conf as `spark up` writes it now): a driver with the
    cluster's conf runs a closure that carries a DSN on the executors, which got the encryption
    settings from it; a driver that turns encryption off is refused by the master. Both drivers
    run at once (one JVM start's wait instead of two)."""
    if os.environ.get(spark_cluster.ENV_MASTER):
        pytest.skip("an external master is in use")
    with tempfile.TemporaryFile("w+") as err:
        refused = _start_refused_driver(spark_standalone, err)
        try:
            env = {**os.environ, **spark_cluster.client_env()}
            out = subprocess.run([sys.executable, "-c", DRIVER, spark_standalone, "rpc-crypto-test"], env=env,
                                 capture_output=True, text=True, timeout=180)
        finally:
            log, stdout = _refusal(refused, err)
    cluster = spark_cluster.load_record()
    assert cluster is not None
    _assert_refused(log, stdout, cluster)
    assert "rpc-crypto-test" in _app_names(cluster), "the master's list of applications is not what the check reads"
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
    assert line, f"exit {out.returncode}: {out.stderr[-3000:]}"
    r = json.loads(line[len("RESULT "):])
    assert r["rows"] == 8 and r["secret_seen"] == ["not-a-real-password"] and r["driver_crypto"] == "true"
    # The executors get spark.network.* from their driver, on their command line.
    assert sorted(r["executor_flags"]) == sorted(f"-D{k}={v}" for k, v in spark_cluster.RPC_CRYPTO.items()), r


def test_a_conf_without_encryption_gets_what_it_lacks_and_keeps_the_rest(monkeypatch, tmp_path):
    """The file part of the upgrade, without a cluster: the secret and an operator's own setting
    stay, the rest is appended, once; a new conf has it all from the start."""
    monkeypatch.setenv("STREAMOPS_HOME", str(tmp_path))
    conf = _conf()
    conf.parent.mkdir(parents=True)
    conf.write_text("spark.authenticate true\nspark.authenticate.secret s3cret\nspark.network.crypto.saslFallback=true")
    conf.chmod(0o600)
    added = spark_cluster.ensure_rpc_crypto()
    assert added == ["spark.network.crypto.enabled", "spark.network.crypto.authEngineVersion",
                     "spark.network.crypto.cipher"]
    assert conf.read_text().splitlines() == [
        "spark.authenticate true", "spark.authenticate.secret s3cret", "spark.network.crypto.saslFallback=true",
        "spark.network.crypto.enabled true", "spark.network.crypto.authEngineVersion 2",
        "spark.network.crypto.cipher AES/GCM/NoPadding"]
    assert os.stat(conf).st_mode & 0o777 == 0o600 and list(conf.parent.iterdir()) == [conf]
    assert spark_cluster.ensure_rpc_crypto() == []
    conf.unlink()
    assert spark_cluster.ensure_rpc_crypto() == []
    assert set(spark_cluster.RPC_CRYPTO) <= spark_cluster.conf_keys(conf) and os.stat(conf).st_mode & 0o777 == 0o600


@pytest.fixture(scope="module")
def old_cluster():
    """A cluster whose conf has the secret and no encryption, as `spark up` wrote it before:
    started with the upgrade skipped, as the code before it would have."""
    home = Path(tempfile.mkdtemp(prefix="streamops-rpc-crypto-"))
    os.chmod(home, 0o755)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("STREAMOPS_HOME", str(home))
        mp.delenv(spark_cluster.ENV_MASTER, raising=False)
        mp.delenv(spark_cluster.HOST_ENV, raising=False)
        conf = _conf()
        conf.parent.mkdir(mode=0o700, parents=True)
        secret = os.urandom(32).hex()
        conf.write_text(f"spark.authenticate true\nspark.authenticate.secret {secret}\n")
        conf.chmod(0o600)
        try:
            with pytest.MonkeyPatch.context() as before:
                before.setattr(spark_cluster, "ensure_rpc_crypto", lambda: [], raising=False)
                c, _ = spark_cluster.up(workers=1, cores_per_worker=1, memory_per_worker="1g")
            yield c, secret
        finally:
            spark_cluster.down(grace_s=5)
            shutil.rmtree(home, ignore_errors=True)


@pytest.mark.db
@pytest.mark.slow
def test_a_cluster_from_before_encryption_gets_it_on_its_next_up(old_cluster):
    """`up` adds the settings the conf lacks (its secret kept) and restarts the master and the
    worker on their ports, each reading the conf again with --properties-file; from then on a
    driver without encryption is refused."""
    old, secret = old_cluster
    assert "spark.network.crypto.enabled" not in _conf().read_text()
    said: list[str] = []
    c, reused = spark_cluster.up(workers=1, cores_per_worker=1, memory_per_worker="1g", progress=said.append)
    assert reused and (c.master_port, c.webui_port) == (old.master_port, old.webui_port)
    assert c.master_pid != old.master_pid and c.workers[0].pid != old.workers[0].pid
    assert not processes.is_alive(old.master_pid) and not processes.is_alive(old.workers[0].pid)
    assert any("lacked RPC encryption" in s for s in said), said
    lines = _conf().read_text().splitlines()
    assert lines[:2] == ["spark.authenticate true", f"spark.authenticate.secret {secret}"]
    assert lines[2:] == [f"{k} {v}" for k, v in spark_cluster.RPC_CRYPTO.items()]
    assert os.stat(_conf()).st_mode & 0o777 == 0o600
    for pid in (c.master_pid, c.workers[0].pid):
        assert _java(pid).cmdline()[-2:] == ["--properties-file", str(_conf())]
    assert wait_until(lambda: (spark_cluster.master_state(c) or {}).get("aliveworkers", 0) >= 1, 60, interval_s=0.5), \
        "the restarted worker did not register"
    again, _ = spark_cluster.up(workers=1, cores_per_worker=1, memory_per_worker="1g")
    assert again == c, "a second up restarts nothing"
    with tempfile.TemporaryFile("w+") as err:
        log, stdout = _refusal(_start_refused_driver(c.url, err), err)
    _assert_refused(log, stdout, c)
