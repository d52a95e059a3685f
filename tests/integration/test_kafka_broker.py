"""The embedded Kafka broker, for real: one KRaft JVM started in the session's home and shared
by the module, clients through confluent-kafka with the generated SCRAM credentials, Spark's
connector (the jars `make venv` fetched) read by a stage's driver, exactly once through poison
messages and a kill -9 (that one test is `db`; the others need no PostgreSQL)."""

from __future__ import annotations

import json
import os
import random
import signal
import stat
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psutil
import pytest
from sqlalchemy import text

from streamops import kafka_broker
from streamops.generator import SCHEMAS, sample_lines
from streamops.ports import free_port
from streamops.records import check_line

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402
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
    p = Producer({**kafka_broker.client_settings().librdkafka_producer(), "log_level": 0})
    for i, (key, value) in enumerate(records):
        while True:
            try:
                p.produce(topic, key=key.encode(), value=value.encode(), partition=i % partitions)
                break
            except BufferError:  # the client's queue (100 000 messages) is full: let it send
                p.poll(0.5)
    assert p.flush(60) == 0, "records left unsent"


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


def test_the_cli_says_the_broker_runs_and_where(broker):
    from typer.testing import CliRunner

    from streamops.cli import app

    res = CliRunner().invoke(app, ["kafka", "status"])
    assert res.exit_code == 0, res.output
    assert f"127.0.0.1:{broker.port}" in res.output and str(broker.pid) in res.output
    assert CliRunner().invoke(app, ["kafka", "status", "--quiet"]).exit_code == 0
    again = CliRunner().invoke(app, ["kafka", "up"])
    assert again.exit_code == 0 and "already running" in again.output, again.output


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


def test_the_client_listener_moves_to_a_host_address_and_back_with_its_port_and_topics(broker):
    """`up(host=…)` (`kafka up --host`) for other hosts' clients: refused while the broker runs
    elsewhere; on a stopped broker the clients' listener binds and advertises that address (here
    127.0.0.2, another loopback address), the controller's stays on 127.0.0.1, the port and the
    topics are kept, and a client still authenticates."""
    topic = _topic()
    _produce(topic, [("k", "moved")])
    with pytest.raises(kafka_broker.KafkaBrokerError, match=f"runs on 127.0.0.1:{broker.port}, not on 127.0.0.2"):
        kafka_broker.up(host="127.0.0.2")
    assert kafka_broker.down()
    try:
        moved, _ = kafka_broker.up(host="127.0.0.2")
        assert (moved.bootstrap, moved.controller_port) == (f"127.0.0.2:{broker.port}", broker.controller_port)
        listening = {(ip.removeprefix("::ffff:"), port) for ip, port in _listening(moved.pid)}  # Java's v4-mapped
        assert listening == {("127.0.0.2", broker.port), ("127.0.0.1", broker.controller_port)}
        assert kafka_broker.client_settings().bootstrap == moved.bootstrap
        assert _consume(topic, 1) == ["moved"]
    finally:
        kafka_broker.down()
        back, _ = kafka_broker.up()
    assert back.bootstrap == broker.bootstrap


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


class TopicFeeder:
    """Valid web records with keys (their ids) into `topic` until stopped, 20 every 0.2 s; the
    partitioner spreads the keys over the topic's partitions."""

    def __init__(self, topic: str, seed: int = 7):
        self.topic, self.rng, self.sent = topic, random.Random(seed), 0
        self.stop = threading.Event()
        self.producer = Producer({**kafka_broker.client_settings().librdkafka_producer(), "log_level": 0})
        self.thread = threading.Thread(target=self._run, daemon=True)

    def send(self, key: bytes, value: bytes | None) -> None:
        self.producer.produce(self.topic, key=key, value=value)
        self.sent += 1

    def _run(self) -> None:
        schema = SCHEMAS["web"]
        while not self.stop.wait(0.2):
            now = datetime.now(UTC)
            for line in sample_lines(schema, 20, rng=self.rng, ts_from=now - timedelta(seconds=5), ts_to=now):
                self.send(json.loads(line)["id"].encode(), line.encode())
            self.producer.poll(0)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(10)
        assert self.producer.flush(30) == 0, "records left unsent"


def _read_topic(topic: str, total: int, timeout_s: float = 60) -> list:
    """Every message of the topic, from each partition's low to its high watermark, read by a
    client of its own: the oracle's input. Read to the end offsets, not to a count: a producer that
    was not idempotent may have written a retried send twice, and the stage reads both."""
    c = Consumer({**_conf(), "group.id": f"oracle-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False})
    parts = c.list_topics(topic, timeout=30).topics[topic].partitions
    ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30) for p in parts}
    c.assign([TopicPartition(topic, p, lo) for p, (lo, hi) in ends.items() if hi > lo])
    left = {p for p, (lo, hi) in ends.items() if hi > lo}
    got: list = []
    deadline = time.monotonic() + timeout_s
    try:
        while left and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is not None and m.error() is None:
                got.append(m)
                if m.offset() >= ends[m.partition()][1] - 1:
                    left.discard(m.partition())
    finally:
        c.close()
    assert not left, f"partitions {sorted(left)} not read to their end offsets in {timeout_s:.0f}s"
    assert len(got) == total, f"the topic holds {len(got)} messages, {total} were sent (each once: idempotent)"
    return got


def settle_against_topic(engine, sid: str, feeder: TopicFeeder, topic: str) -> tuple[list, dict]:
    """Stop feeding, then wait until the wordcount sink equals an oracle over every message the
    topic holds, read by a client of its own: (the messages, the expected counts)."""
    from demo.oracles import actual, expected
    from tests.integration.test_e2e_stage import eventually

    feeder.stop.set()
    feeder.thread.join(10)
    assert feeder.producer.flush(60) == 0, "records left unsent"
    messages = _read_topic(topic, feeder.sent, timeout_s=120)
    want = expected("wordcount", [json.loads(m.value()) for m in messages])
    eventually(lambda: actual(engine, sid, "wordcount") == want, 180, "the sink to equal the oracle")
    return messages, want


def _commits(engine, sid: str) -> int:
    with engine.connect() as conn:
        return conn.execute(text("SELECT count(*) FROM sink_commits WHERE stage_id = :s AND rows > 0"),
                            {"s": sid}).scalar_one()


def _quarantine(engine, sid: str) -> dict[str, tuple[str, str]]:
    with engine.connect() as conn:
        return {r.source_file: (r.reason_kind, r.reason) for r in conn.execute(
            text("SELECT source_file, reason_kind, reason FROM quarantine WHERE stage_id = :s"), {"s": sid})}


MAX_BYTES = 1024
POISON = [(b"p-utf8", b'{"id": "x1", "words": "\xff\xfe"}'),
          (b"p-type", b'{"id": "x2", "ip": "1.2.3.4", "url": "/", "user": "u", "words": 12345, '
                      b'"ts": "2026-01-01T00:00:00Z", "status": 200}'),
          (b"p-large", b'{"id": "x3", "words": "' + b"w " * 700 + b'"}'),
          (b"p-null", None)]


@pytest.mark.e2e
@pytest.mark.db
def test_a_kafka_stage_counts_exactly_once_through_poison_and_a_driver_kill(broker, clean_db):
    """A wordcount stage over a 2-partition topic fed with keys, poison messages among them, a
    kill -9 of its driver mid-stream and a restart from the checkpoint: the sink equals an
    oracle that reads the topic with its own client and applies check_line and the job's rule,
    and the quarantine holds each poison message once, by `topic/partition/offset`. The
    connector (`spark.jars`, local files) is pyspark 4.3.0's 4.2.0 one."""
    from demo.oracles import actual, expected
    from demo.stages import demo_job
    from streamops import registry
    from streamops.execute import stages
    from streamops.store import ledger
    from tests.integration.test_e2e_stage import eventually

    topic = _topic(partitions=2)
    stage = {**demo_job("wordcount", {"kind": "kafka", "topic": topic, "max_offsets_per_trigger": 1000,
                                      "max_record_bytes": MAX_BYTES}),
             "cores": {"initial": 1, "max": 2}, "state_partitions": 2, "trigger_interval_ms": 1000, "pool": "p"}
    reg = registry.parse({"pools": {"p": {"cores": 2, "spark_ui": False}},
                          "apps": {"k": {"r_max_ms": 5000, "maintenance_window": {"cron": "0 3 * * *",
                                                                                   "duration_min": 30},
                                         "stages": {"wc": stage}}}})
    sid, started = "k.wc", time.monotonic()
    phases: list[str] = []

    def phase(what: str) -> None:
        phases.append(f"{what} {time.monotonic() - started:.1f}s")

    with TopicFeeder(topic) as feeder:
        run = stages.start_stage(sid, reg, warm_up=False)
        eventually(lambda: _commits(clean_db, sid) >= 1, 120, "a first commit")
        phase("first commit")
        for key, value in POISON:
            feeder.send(key, value)
        eventually(lambda: _commits(clean_db, sid) >= 3, 120, "three committed batches")
        os.killpg(run.pid, signal.SIGKILL)
        eventually(lambda: not stages.is_alive(ledger.deployment(run.deployment_id)), 30, "the driver to die")
        phase("killed")
        killed_at = _commits(clean_db, sid)
        run = stages.start_stage(sid, reg, warm_up=False)
        eventually(lambda: _commits(clean_db, sid) >= killed_at + 2, 120, "the stream going on after the kill")
        phase("two commits after the restart")
    messages = _read_topic(topic, feeder.sent)
    schema = reg.apps["k"].stages["wc"].record_schema
    verdicts = [(m, check_line(schema, m.value() or b"", MAX_BYTES)) for m in messages]
    want = expected("wordcount", [v.record for _, v in verdicts if v.valid])
    bad = {f"{topic}/{m.partition()}/{m.offset()}": v.kind for m, v in verdicts if not v.valid}
    try:
        eventually(lambda: actual(clean_db, sid, "wordcount") == want, 90, "the sink to equal the oracle")
        phase("sink = oracle")
        eventually(lambda: {k: kind for k, (kind, _) in _quarantine(clean_db, sid).items()} == bad, 60,
                   "every poison message quarantined by its locator")
    except AssertionError:
        print(Path(run.log_path).read_text()[-6000:])
        raise
    finally:
        stages.stop_stage(sid, reg, deadline_s=30)
    assert sorted(bad.values()) == ["empty line", "invalid UTF-8", "too large", "wrong type"], bad
    assert {m.partition() for m in messages} == {0, 1}, "the keys reached both partitions"
    quarantined = _quarantine(clean_db, sid)
    assert all(reason.startswith(kind) for kind, reason in quarantined.values()), quarantined
    print(f"{len(messages)} messages ({len(bad)} poison), {sum(want.values())} words in {len(want)} keys, "
          f"{_commits(clean_db, sid)} commits; {', '.join(phases)}")


def test_a_cluster_id_that_starts_with_a_dash_formats_and_none_is_drawn(tmp_path, monkeypatch):
    """kafka-storage's parser took `--cluster-id -V6k…` for an option, and 1 format in 64 failed
    (the clean-clone CI of 2026-11-28): the value goes as `--cluster-id=…`, and new ids are drawn
    again while they start with "-", as Kafka's own Uuid.randomUuid does."""
    import base64

    monkeypatch.setenv("STREAMOPS_HOME", str(tmp_path))  # a log directory of its own: no broker runs on it
    dashed = "-" + base64.urlsafe_b64encode(bytes(16)).decode().rstrip("=")[1:]
    b = kafka_broker.Broker(free_port(), free_port(), dashed)
    kafka_broker._format(b, kafka_broker._write_config(b))
    meta = (kafka_broker.log_dir() / "meta.properties").read_text()
    assert f"cluster.id={dashed}" in meta, meta
    draws = iter([uuid.UUID(bytes=bytes([0xF8]) + bytes(15)), uuid.UUID(bytes=bytes([0x10]) + bytes(15))])
    monkeypatch.setattr(uuid, "uuid4", lambda: next(draws))  # the first encodes to "-A…"
    assert not kafka_broker._new_cluster_id().startswith("-")
