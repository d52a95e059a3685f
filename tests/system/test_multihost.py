"""Nothing assumes one host (issue 28 item 5): the Spark master, two workers, the stage's driver
and a Kafka broker each run on a host of their own, a Linux network namespace with its own
address, and the database on a sixth (the bridge's side). No 127.0.0.1 crosses a host: each
namespace has its own loopback, so a process that used it to reach another would fail. A files
stage deploys through the CLI on the driver's host, scales out live, loses a worker to kill -9,
and its sink equals the generator's ground truth; then a Kafka stage reads a topic on the broker's
host (issue 45), its executors on a worker's, and its sink equals the topic. The file system is
shared, as a cluster's shared storage is."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import psutil
import pytest
import yaml
from sqlalchemy import create_engine, text

from demo import oracles
from demo.stages import demo_job
from streamops import generator
from tests.integration.test_e2e_stage import eventually
from tests.integration.test_reconfigure import Feeder
from tests.system import netns

pytestmark = [pytest.mark.e2e, pytest.mark.db]

BRIDGE, SUBNET = "somh0", "10.213.0"
HOSTS = {"so-master": 10, "so-w1": 11, "so-w2": 12, "so-driver": 20, "so-kafka": 30}
SID, KAFKA_SID, TOPIC = "mh.wc", "mk.wc", "mh-clicks"


@pytest.fixture(scope="module")
def network():
    why = netns.unavailable()
    if why:
        pytest.skip(why)
    net = netns.create(BRIDGE, SUBNET, HOSTS)
    yield net
    netns.destroy(BRIDGE, list(HOSTS))


def _env(home: Path, **extra: str) -> dict[str, str]:
    """A host's environment: its own state directory, and nothing of this session's database."""
    env = {k: v for k, v in os.environ.items() if k not in ("STREAMOPS_DATABASE_URL", "STREAMOPS_SPARK_MASTER")}
    return {**env, "STREAMOPS_HOME": str(home), **extra}


def _cli(*args: str, env: dict[str, str], on: list[str] | None = None, timeout: float = 300) -> str:
    argv = [*(on or []), sys.executable, "-m", "streamops.cli", *args]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"{' '.join(args)} failed ({out.returncode}):\n{out.stdout[-3000:]}\n" \
                                f"{out.stderr[-3000:]}"
    return out.stdout


# The job as a team keeps it on the driver's host only: its module is on no executor's path, and its
# Python UDF (a module-level function, pickled by reference) makes every executor import it, which
# only the code the platform ships (addPyFile) makes possible.
_JOB = '''from pyspark.sql import functions as F
from pyspark.sql.types import StringType

from demo_jobs.web import wordcount


def lower(word):
    return word.lower()


_lower = F.udf(lower, StringType())


def build(records, params):
    return wordcount(records.withColumn("words", _lower("words")), params)
'''


def _apps(path: Path, source: Path, code: Path) -> Path:
    shutil.copytree(Path(demo_job("wordcount")["code"][0]) / "demo_jobs", code / "demo_jobs")
    (code / "mh_job.py").write_text(_JOB)
    common = {"job": "mh_job:build", "code": [str(code)], "cores": {"initial": 1, "max": 2}, "state_partitions": 2,
              "trigger_interval_ms": 1000, "pool": "cluster", "policy": {"kind": "edf"}}
    window = {"r_max_ms": 5000, "maintenance_window": {"cron": "0 3 * * *", "duration_min": 30}}
    files = {**demo_job("wordcount", {"kind": "files", "path": str(source), "max_files_per_trigger": 3}), **common}
    kafka = {**demo_job("wordcount", {"kind": "kafka", "topic": TOPIC, "max_offsets_per_trigger": 1000}), **common}
    path.write_text(yaml.safe_dump({
        "pools": {"cluster": {"master": "embedded", "cores": 2, "executor_cores": 1, "executor_memory": "512m"}},
        "apps": {"mh": {**window, "stages": {"wc": files}}, "mk": {**window, "stages": {"wc": kafka}}}}))
    return path


def _commits(engine, sid: str = SID) -> int:
    with engine.connect() as conn:
        return conn.execute(text("SELECT count(*) FROM sink_commits WHERE stage_id = :s AND rows > 0"),
                            {"s": sid}).scalar_one()


def _executors() -> list[psutil.Process]:
    """The executors of the driver on the driver's host (every executor names its driver)."""
    return [p for p in psutil.process_iter(["cmdline"])
            if "CoarseGrainedExecutorBackend" in " ".join(p.info["cmdline"] or [])
            and f"@{SUBNET}.{HOSTS['so-driver']}:" in " ".join(p.info["cmdline"] or [])]


def _arg(p: psutil.Process, flag: str) -> str:
    argv = p.info["cmdline"]
    return argv[argv.index(flag) + 1]


@pytest.mark.slow  # 150 s: live scaling and a worker kill are test_live_scaling's on one host (make test); the
# network namespaces are make test-all's
def test_stages_across_five_hosts_scale_live_survive_a_worker_kill_read_a_remote_broker_and_lose_nothing(
        network, test_home, tmp_path, monkeypatch):
    net, addr = network, network.hosts
    # Under the session's home (0755): the embedded PostgreSQL runs as `postgres` and keeps its data there.
    homes = {name: test_home / "multihost" / name for name in ("db", *HOSTS)}
    for h in homes.values():
        h.mkdir(parents=True)

    # The database's host: the embedded PostgreSQL, listening on the bridge for the hosts behind it.
    db_env = _env(homes["db"], STREAMOPS_PG_LISTEN=net.cidr)
    _cli("db", "up", env=db_env, timeout=120)
    try:
        record = json.loads((homes["db"] / "pg.json").read_text())
        from streamops.store import embedded

        url = embedded.Cluster(**record).url(host=net.gateway)
        engine = create_engine(url.replace("postgresql://", "postgresql+psycopg2://", 1))
        with engine.connect() as conn:
            assert conn.execute(text("SELECT inet_server_addr()::text")).scalar_one().startswith(net.gateway)

        # The master's host; the workers' and the driver's get a copy of its secret, as machines would.
        master_env = _env(homes["so-master"])
        _cli("spark", "up", "--workers", "0", "--host", addr["so-master"], env=master_env, on=net.netns("so-master"))
        cluster = json.loads((homes["so-master"] / "spark" / "cluster.json").read_text())
        master = f"spark://{addr['so-master']}:{cluster['master_port']}"
        ui = f"http://{addr['so-master']}:{cluster['webui_port']}/json/"
        secret = homes["so-master"] / "spark" / "conf" / "spark-defaults.conf"
        for name in ("so-w1", "so-w2", "so-driver"):
            (homes[name] / "spark" / "conf").mkdir(parents=True)
            shutil.copy2(secret, homes[name] / "spark" / "conf" / secret.name)

        workers = {}
        for name in ("so-w1", "so-w2"):
            log = (tmp_path / f"{name}.log").open("w")
            workers[name] = subprocess.Popen(
                [*net.netns(name), sys.executable, "-m", "streamops.cli", "spark", "worker", master,
                 "--host", addr[name], "--cores", "2", "--memory", "2g"],
                env=_env(homes[name]), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        eventually(lambda: httpx.get(ui, timeout=3).json().get("aliveworkers") == 2, 90, "two workers to register")
        state = httpx.get(ui, timeout=3).json()
        assert sorted(w["host"] for w in state["workers"]) == [addr["so-w1"], addr["so-w2"]]

        # The driver's host runs the CLI, as an Airflow worker would: it starts the driver there.
        source = tmp_path / "input"
        apps = _apps(tmp_path / "apps.yaml", source, homes["so-driver"] / "jobs")
        driver_env = _env(homes["so-driver"], STREAMOPS_APPS=str(apps), STREAMOPS_DATABASE_URL=url,
                          STREAMOPS_SPARK_MASTER=master, STREAMOPS_DRIVER_HOST=addr["so-driver"],
                          SPARK_CONF_DIR=str(homes["so-driver"] / "spark" / "conf"))
        on_driver = net.netns("so-driver")
        with Feeder(str(source), seed=43) as feeder:
            _cli("deploy", "mh", env=driver_env, on=on_driver)
            _cli("start", SID, env=driver_env, on=on_driver)
            eventually(lambda: _commits(engine) >= 2, 180, "two committed batches")
            with engine.connect() as conn:
                pid, sha = conn.execute(text("SELECT pid, config->>'code_sha256' FROM deployments "
                                             "WHERE stage_id = :s AND status = 'running'"), {"s": SID}).one()
            assert sha, "the job's code was packaged for the run and its hash recorded"
            assert net.host_of(pid) == "so-driver", "the driver runs on its own host"

            out = _cli("reconfigure", SID, "--action", "scale_out", "--cores", "2", "--mechanism", "live",
                       env=driver_env, on=on_driver)
            assert "done" in out, out
            eventually(lambda: len(_executors()) == 2, 60, "two executors")
            execs = _executors()
            # Every executor talks to the driver at its host's address, from its worker's.
            assert {_arg(p, "--driver-url").split("@")[1].rsplit(":", 1)[0] for p in execs} == {addr["so-driver"]}
            hosts = {_arg(p, "--hostname") for p in execs}
            assert hosts <= {addr["so-w1"], addr["so-w2"]}, hosts
            assert {net.host_of(p.pid) for p in execs} <= {"so-w1", "so-w2"}

            # kill -9 of a worker that runs an executor: the master re-launches it on the other.
            victim = "so-w1" if addr["so-w1"] in hosts else "so-w2"
            survivor = "so-w2" if victim == "so-w1" else "so-w1"
            os.kill(workers[victim].pid, signal.SIGKILL)
            workers[victim].wait(10)
            before = _commits(engine)
            eventually(lambda: {_arg(p, "--hostname") for p in _executors()} == {addr[survivor]}
                       and len(_executors()) == 2, 120, f"both executors on {survivor}")
            eventually(lambda: _commits(engine) >= before + 3, 120, "commits after the worker kill")
            feeder.__exit__()
            want = oracles.expected("wordcount", generator.read_valid_records(feeder.out))
            eventually(lambda: oracles.actual(engine, SID, "wordcount") == want, 120,
                       "the sink to equal the ground truth")
        with engine.connect() as conn:
            runs = conn.execute(text("SELECT count(*) FROM deployments WHERE stage_id = :s"), {"s": SID}).scalar_one()
            failures = conn.execute(text("SELECT count(*) FROM failures WHERE stage_id = :s"), {"s": SID}).scalar_one()
        assert (runs, failures) == (1, 0), "one run throughout: a lost worker is Spark's business"
        _cli("stop", SID, env=driver_env, on=on_driver)
        _kafka_stage_reads_a_broker_on_another_host(net, homes, apps, driver_env, engine, tmp_path, monkeypatch)
        engine.dispose()
    finally:
        subprocess.run([sys.executable, "-m", "streamops.cli", "kafka", "down"], env=_env(homes["so-kafka"]),
                       capture_output=True, timeout=60)
        for w in (workers if "workers" in locals() else {}).values():
            w.kill()
        subprocess.run([sys.executable, "-m", "streamops.cli", "spark", "down"], env=_env(homes["so-master"]),
                       capture_output=True, timeout=60, cwd=str(tmp_path))
        subprocess.run([sys.executable, "-m", "streamops.cli", "db", "down"], env=db_env, capture_output=True,
                       timeout=60)


def _kafka_stage_reads_a_broker_on_another_host(net, homes, apps, driver_env, engine, tmp_path, monkeypatch) -> None:
    """The broker on its own host, its clients' listener on that host's address (SCRAM still): the
    driver's host and this test reach it with a copy of its credentials, the executors through the
    options the driver hands them. The sink equals the topic read by a client of the test's own."""
    from streamops import kafka_broker
    from streamops.generator.topic import ensure_topic
    from tests.integration.test_kafka_broker import TopicFeeder, settle_against_topic

    addr = net.hosts["so-kafka"]
    kafka_env = _env(homes["so-kafka"])
    out = _cli("kafka", "up", "--host", addr, env=kafka_env, on=net.netns("so-kafka"), timeout=120)
    assert f"{addr}:" in out, out
    broker = json.loads((homes["so-kafka"] / "kafka" / "broker.json").read_text())
    assert net.host_of(broker["pid"]) == "so-kafka"
    creds = tmp_path / "kafka-credentials.json"  # as an operator copies it to the other hosts
    shutil.copy2(homes["so-kafka"] / "kafka" / "credentials.json", creds)
    remote = {kafka_broker.BOOTSTRAP_ENV: f"{addr}:{broker['port']}", kafka_broker.CREDENTIALS_ENV: str(creds)}
    for k, v in remote.items():
        monkeypatch.setenv(k, v)
    ensure_topic(kafka_broker.client_settings().librdkafka(), TOPIC, 2)
    on_driver = net.netns("so-driver")
    env = {**driver_env, **remote}
    with TopicFeeder(TOPIC, seed=47) as feeder:
        _cli("deploy", "mk", env=env, on=on_driver)
        _cli("start", KAFKA_SID, env=env, on=on_driver)
        try:
            eventually(lambda: _commits(engine, KAFKA_SID) >= 2, 180, "two committed batches from the remote broker")
            executors = _executors()
            assert executors and {net.host_of(p.pid) for p in executors} <= {"so-w1", "so-w2"}
            messages, want = settle_against_topic(engine, KAFKA_SID, feeder, TOPIC)
        finally:
            _cli("stop", KAFKA_SID, env=env, on=on_driver)
    print(f"Kafka across hosts: {len(messages)} messages from {addr}, {sum(want.values())} words: sink = topic")
