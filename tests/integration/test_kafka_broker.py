"""The embedded Kafka broker, for real: one KRaft JVM started in the session's home and shared
by the module, clients through confluent-kafka with the generated SCRAM credentials, Spark's
connector (the jars `make venv` fetched) reading it in a stateful query. No PostgreSQL."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from streamops import kafka_broker
from streamops.paths import REPO_ROOT

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaException, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

LOOPBACK_ADDRESSES = {"127.0.0.1", "::ffff:127.0.0.1"}


@pytest.fixture(scope="module")
def broker(test_home):
    """One broker for the module (its JVM start is the slow part), stopped at the end."""
    b, reused = kafka_broker.up()
    assert not reused
    yield b
    kafka_broker.down()


def _conf() -> dict[str, str]:
    return {**kafka_broker.client_settings().librdkafka(), "log_level": 0}


def _topic(partitions: int = 1) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(_conf())  # kept until the futures are done: a destroyed handle fails them
    for f in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        f.result(timeout=30)
    return name


def _produce(topic: str, records: list[tuple[str, str]], partitions: int = 1) -> None:
    p = Producer(_conf())
    for i, (key, value) in enumerate(records):
        p.produce(topic, key=key.encode(), value=value.encode(), partition=i % partitions)
    assert p.flush(30) == 0, "records left unsent"


def _consume(topic: str, n: int, timeout_s: float = 30) -> list[str]:
    c = Consumer({**_conf(), "group.id": f"g-{uuid.uuid4().hex[:8]}", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got: list[str] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(got) < n and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                got.append(m.value().decode())
    finally:
        c.close()
    return got


def _listening(pid: int) -> list[tuple[str, int]]:
    return [(c.laddr.ip, c.laddr.port) for c in psutil.Process(pid).net_connections(kind="inet")
            if c.status == psutil.CONN_LISTEN]


def test_status_then_a_round_trip_with_the_scram_credentials(broker):
    s = kafka_broker.status()
    assert s["running"] and s["pid"] == broker.pid and s["bootstrap"] == f"127.0.0.1:{broker.port}"
    settings = kafka_broker.client_settings()
    assert settings.properties()["security.protocol"] == "SASL_PLAINTEXT"
    assert settings.spark_options()["kafka.sasl.mechanism"] == "SCRAM-SHA-256"
    assert "ScramLoginModule required" in settings.spark_options()["kafka.sasl.jaas.config"]
    topic = _topic()
    _produce(topic, [("k", f"v{i}") for i in range(20)])
    assert _consume(topic, 20) == [f"v{i}" for i in range(20)]
    assert kafka_broker.status()["topics"] == s["topics"] + 1


@pytest.mark.parametrize("conf", [{"security.protocol": "PLAINTEXT"},
                                  {"sasl.password": "not-the-password"}], ids=["no-credentials", "wrong-password"])
def test_a_client_without_the_credentials_is_refused(broker, conf):
    errors: list = []
    bad = {**_conf(), **conf, "error_cb": errors.append}
    if conf.get("security.protocol") == "PLAINTEXT":
        for key in ("sasl.mechanism", "sasl.username", "sasl.password"):
            bad.pop(key)
    admin = AdminClient(bad)
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)
    admin.poll(1)  # the error callback is served here
    if "sasl.password" in conf:  # the broker said why: SCRAM refused the password
        assert any(e.code() == confluent_kafka.KafkaError._AUTHENTICATION for e in errors), errors
    else:  # a client that skips SASL is disconnected before any request is answered
        assert errors and all(e.code() != confluent_kafka.KafkaError._AUTHENTICATION for e in errors), errors


def test_only_loopback_listens_and_the_secrets_are_private(broker):
    listening = _listening(broker.pid)
    assert {ip for ip, _ in listening} <= LOOPBACK_ADDRESSES, listening
    assert {port for _, port in listening} == {broker.port, broker.controller_port}
    home = kafka_broker.home()
    for name in ("credentials.json", "server.properties"):
        assert stat.S_IMODE((home / name).stat().st_mode) == 0o600, name
    password = json.loads((home / "credentials.json").read_text())["password"]
    assert password not in " ".join(psutil.Process(broker.pid).cmdline())
    assert not (home / "format.args").exists(), "the format's argument file (with the password) is left"


def test_down_then_up_keeps_the_port_and_the_topics(broker):
    topic = _topic()
    _produce(topic, [("k", "kept")])
    assert kafka_broker.down()
    assert not kafka_broker.heal(), "a broker stopped on purpose is not healed"
    b, reused = kafka_broker.up()
    assert not reused and (b.port, b.controller_port) == (broker.port, broker.controller_port)
    assert _consume(topic, 1) == ["kept"]


def test_heal_restarts_a_killed_broker_on_its_port(broker):
    before = kafka_broker.load_record()
    os.kill(before.pid, signal.SIGKILL)
    psutil.Process(before.pid).wait(10)
    assert not kafka_broker.status()["running"]
    started = time.monotonic()
    assert kafka_broker.heal()
    after = kafka_broker.load_record()
    assert after.pid != before.pid and after.port == before.port and kafka_broker.is_running(after)
    assert not kafka_broker.heal(), "a live broker is left alone"
    print(f"healed in {time.monotonic() - started:.1f}s")
    topic = _topic()
    _produce(topic, [("k", "after-heal")])
    assert _consume(topic, 1) == ["after-heal"]


def test_an_external_cluster_wins(monkeypatch, tmp_path):
    monkeypatch.setenv(kafka_broker.BOOTSTRAP_ENV, "kafka.example:9092")
    assert kafka_broker.client_settings().properties() == {"bootstrap.servers": "kafka.example:9092",
                                                           "security.protocol": "PLAINTEXT"}
    monkeypatch.setenv(kafka_broker.USER_ENV, "u")
    monkeypatch.setenv(kafka_broker.PASSWORD_ENV, 'p"w')
    opts = kafka_broker.client_settings().spark_options()
    assert opts["kafka.security.protocol"] == "SASL_PLAINTEXT"
    assert opts["kafka.sasl.jaas.config"].endswith('username="u" password="p\\"w";')
    creds = tmp_path / "creds.json"
    creds.write_text(json.dumps({"username": "file-user", "password": "x"}))
    monkeypatch.setenv(kafka_broker.CREDENTIALS_ENV, str(creds))
    assert kafka_broker.client_settings().librdkafka()["sasl.username"] == "file-user"


def _count_query(topic: str, checkpoint: Path, total: int) -> dict:
    path = os.pathsep.join([str(REPO_ROOT / "plugins"), str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYTHONPATH": path}
    res = subprocess.run([sys.executable, str(Path(__file__).with_name("kafka_count_query.py")), topic,
                          str(checkpoint), str(total)], capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.e2e
def test_spark_counts_a_topic_through_the_connector_with_rocksdb_state(broker, tmp_path):
    """pyspark 4.3.0 with the 4.2.0 connector (`spark.jars`, local files): a stateful count over
    several batches, then a restart from the checkpoint that resumes its offsets and state."""
    topic = _topic(partitions=2)
    _produce(topic, [("abc"[i % 3], f"v{i}") for i in range(300)], partitions=2)
    first = _count_query(topic, tmp_path / "ckpt", 300)
    assert first["counts"] == {"a": 100, "b": 100, "c": 100}
    assert len(first["batches"]) >= 3 and sum(first["batches"]) == 300, first["batches"]
    assert first["rocksdb_metrics"], "the RocksDB state store reported no metrics"
    _produce(topic, [("ad"[i % 2], f"w{i}") for i in range(150)], partitions=2)
    second = _count_query(topic, tmp_path / "ckpt", 450)
    print(f"first run: {first}\nafter a restart from the checkpoint: {second}")
    assert second["counts"] == {"a": 175, "b": 100, "c": 100, "d": 75}, "state or offsets not resumed"
    assert sum(second["batches"]) == 150, second["batches"]
