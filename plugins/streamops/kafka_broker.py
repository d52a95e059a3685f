"""A private Kafka broker for development, demos and tests: one KRaft node that is both broker
and controller (`process.roles=broker,controller`), run from the jars `make venv` fetched
(`<venv>/jars/kafka-broker/`, jars/pom.xml) as `java -cp 'kafka-broker/*' kafka.Kafka`.

Its state is `.streamops/kafka/`: the log directory `data/`, `server.properties` and
`credentials.json` (both mode 0600: they hold the passwords), `log4j2.xml`, the logs, and
`broker.json`, the record of its ports, cluster id and pid. Its two ports are chosen free once
and kept across restarts: every client holds the bootstrap address.

It listens on 127.0.0.1 only, unless `up(host=…)` (`streamops kafka up --host ADDR`, or
`$STREAMOPS_KAFKA_HOST`) puts the clients' listener on a host address for other hosts' drivers
and executors (docs/cluster.md); the controller stays on loopback. Clients authenticate with
SASL/SCRAM-SHA-256 (`SASL_PLAINTEXT`); the user and its generated password are written into the
metadata log when the log directory is formatted (`--add-scram`), so no listener takes a client
without a password. The controller listener (loopback too) takes SASL/PLAIN with a second
generated password: the broker half is its only client. No ACLs: an authenticated client may do anything.

`STREAMOPS_KAFKA_BOOTSTRAP` names an existing cluster instead (with `STREAMOPS_KAFKA_USER` and
`STREAMOPS_KAFKA_PASSWORD`, or `STREAMOPS_KAFKA_CREDENTIALS`: a json file with `username` and
`password`); `client_settings()` is then that cluster's and nothing is started here.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import secrets
import shutil
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from streamops import processes
from streamops.paths import jars_dir, state_dir, write_private
from streamops.ports import LOOPBACK, free_port, port_free
from streamops.waiting import wait_until

log = logging.getLogger(__name__)

MECHANISM = "SCRAM-SHA-256"
USER = "streamops"
BOOTSTRAP_ENV = "STREAMOPS_KAFKA_BOOTSTRAP"
USER_ENV = "STREAMOPS_KAFKA_USER"
PASSWORD_ENV = "STREAMOPS_KAFKA_PASSWORD"
CREDENTIALS_ENV = "STREAMOPS_KAFKA_CREDENTIALS"
HOST_ENV = "STREAMOPS_KAFKA_HOST"  # the clients' listener's address when other hosts must reach it
JAVA_OPTIONS_ENV = "STREAMOPS_KAFKA_JAVA_OPTIONS"
# A modest JVM: the box's 2 cores and its memory are Spark's and PostgreSQL's too. C1 only and
# the serial collector start it in about half the CPU time; a dev broker's load is light.
JAVA_OPTIONS = "-Xms64m -Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true"


class KafkaBrokerError(RuntimeError):
    """The embedded broker cannot be formatted, started or reached."""


@dataclass(frozen=True)
class Broker:
    port: int  # the SASL_PLAINTEXT listener: the clients' bootstrap
    controller_port: int
    cluster_id: str
    pid: int | None = None
    started: float | None = None  # the pid's start time: a pid the kernel reused is not the broker
    host: str = LOOPBACK  # the clients' listener; the controller's stays on loopback

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class ClientSettings:
    """How a client reaches the cluster: the embedded broker's, or `$STREAMOPS_KAFKA_BOOTSTRAP`'s."""
    bootstrap: str
    username: str | None = None  # None: no SASL (an external cluster named without credentials)
    password: str | None = None
    mechanism: str = MECHANISM

    @property
    def security_protocol(self) -> str:
        return "SASL_PLAINTEXT" if self.username else "PLAINTEXT"

    def properties(self) -> dict[str, str]:
        """In the Java client's spelling (`bootstrap.servers`, `sasl.jaas.config`, …)."""
        props = {"bootstrap.servers": self.bootstrap, "security.protocol": self.security_protocol}
        if self.username:
            user, password = json.dumps(self.username), json.dumps(self.password or "")
            props["sasl.mechanism"] = self.mechanism
            props["sasl.jaas.config"] = ("org.apache.kafka.common.security.scram.ScramLoginModule required "
                                         f"username={user} password={password};")
        return props

    def spark_options(self) -> dict[str, str]:
        """The same for Spark's Kafka source and sink: each prefixed with `kafka.`."""
        return {f"kafka.{k}": v for k, v in self.properties().items()}

    def librdkafka(self) -> dict[str, str]:
        """The same for confluent-kafka (librdkafka): `sasl.username` and `sasl.password`."""
        conf = {"bootstrap.servers": self.bootstrap, "security.protocol": self.security_protocol}
        if self.username:
            conf.update({"sasl.mechanism": self.mechanism, "sasl.username": self.username,
                         "sasl.password": self.password or ""})
        return conf

    def librdkafka_producer(self) -> dict[str, Any]:
        """A producer's: idempotent, so a send retried across a broker crash is not written twice
        (a kill -9 of the broker under 85 000 sends left 20 duplicates without it, 0 with it)."""
        return {**self.librdkafka(), "enable.idempotence": True}


def home() -> Path:
    d = state_dir() / "kafka"
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    return d


def log_dir() -> Path:
    return home() / "data"


def broker_jars() -> Path:
    return jars_dir() / "kafka-broker"


def connector_jars() -> list[Path]:
    """Spark's Kafka connector and its dependencies (none of pyspark's own), for `spark.jars`."""
    jars = sorted((jars_dir() / "spark-kafka").glob("*.jar"))
    if not jars:
        raise KafkaBrokerError(f"no Spark Kafka connector jars in {jars_dir() / 'spark-kafka'}: run `make venv`")
    return jars


def spark_jars() -> str:
    """`spark.jars` for a session that reads or writes Kafka: the connector's jars as local
    files, comma-separated (never `spark.jars.packages`: nothing is fetched at run time)."""
    return ",".join(str(p) for p in connector_jars())


def _record_path() -> Path:
    return home() / "broker.json"


def _credentials_path() -> Path:
    return home() / "credentials.json"


def load_record() -> Broker | None:
    try:
        return Broker(**json.loads(_record_path().read_text()))
    except (FileNotFoundError, ValueError, TypeError):
        return None


def _save(b: Broker) -> None:
    _record_path().write_text(json.dumps(asdict(b), indent=2) + "\n")


def _credentials() -> dict[str, str]:
    """The client user's and the controller's generated passwords, made once (0600)."""
    path = _credentials_path()
    if not path.exists():
        creds = {"username": USER, "password": secrets.token_urlsafe(24),
                 "controller_password": secrets.token_urlsafe(24)}
        write_private(path, json.dumps(creds, indent=2) + "\n")
    stored: dict[str, str] = json.loads(path.read_text())
    return stored


def client_settings(bootstrap: str | None = None) -> ClientSettings:
    """`bootstrap`'s cluster (a stage's `source.bootstrap_servers`), else `$STREAMOPS_KAFKA_BOOTSTRAP`'s,
    else the embedded broker (recorded by `up`). An external cluster's credentials come from the
    environment."""
    if bootstrap and (named := load_record()) is not None and bootstrap.strip() == named.bootstrap:
        bootstrap = None  # the embedded broker named by its address: its own credentials
    external = (bootstrap or os.environ.get(BOOTSTRAP_ENV, "")).strip()
    if external:
        user, password = os.environ.get(USER_ENV), os.environ.get(PASSWORD_ENV)
        if os.environ.get(CREDENTIALS_ENV):
            creds = json.loads(Path(os.environ[CREDENTIALS_ENV]).read_text())
            user, password = creds["username"], creds["password"]
        return ClientSettings(external, user or None, password)
    embedded = load_record()
    if embedded is None:
        raise KafkaBrokerError(f"no Kafka broker: run `streamops kafka up`, or set {BOOTSTRAP_ENV}=host:port")
    creds = _credentials()
    return ClientSettings(embedded.bootstrap, creds["username"], creds["password"])


def _java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    java = str(Path(java_home) / "bin" / "java") if java_home else shutil.which("java")
    if not java or not Path(java).exists():
        raise KafkaBrokerError("no `java` (JAVA_HOME or PATH): the broker needs Java 17 or later")
    return java


def _classpath() -> str:
    if not any(broker_jars().glob("kafka_2.13-*.jar")):
        raise KafkaBrokerError(f"no Kafka broker jars in {broker_jars()}: run `make venv` (it fetches them with Maven)")
    return f"{broker_jars()}/*"


def _jvm(main: str) -> list[str]:
    opts = os.environ.get(JAVA_OPTIONS_ENV, JAVA_OPTIONS).split()
    return [_java(), *opts, f"-Dlog4j2.configurationFile={home() / 'log4j2.xml'}", f"-Dkafka.logs.dir={home()}",
            "-cp", _classpath(), main]


def _server_properties(b: Broker, creds: dict[str, str]) -> str:
    q = json.dumps  # a JAAS value in double quotes, escaped
    controller_pw, password = q(creds["controller_password"]), q(creds["password"])
    return "\n".join([
        "process.roles=broker,controller",
        "node.id=1",
        f"controller.quorum.voters=1@{LOOPBACK}:{b.controller_port}",
        f"listeners=SASL_PLAINTEXT://{b.host}:{b.port},CONTROLLER://{LOOPBACK}:{b.controller_port}",
        f"advertised.listeners=SASL_PLAINTEXT://{b.host}:{b.port}",
        "listener.security.protocol.map=CONTROLLER:SASL_PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "controller.listener.names=CONTROLLER",
        "inter.broker.listener.name=SASL_PLAINTEXT",
        f"sasl.enabled.mechanisms={MECHANISM}",
        f"sasl.mechanism.inter.broker.protocol={MECHANISM}",
        f"listener.name.sasl_plaintext.{MECHANISM.lower()}.sasl.jaas.config="
        f"org.apache.kafka.common.security.scram.ScramLoginModule required username={q(creds['username'])} "
        f"password={password};",
        "sasl.mechanism.controller.protocol=PLAIN",
        "listener.name.controller.sasl.enabled.mechanisms=PLAIN",
        "listener.name.controller.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule "
        f"required username=\"controller\" password={controller_pw} user_controller={controller_pw};",
        f"log.dirs={log_dir()}",
        "num.partitions=1",
        "offsets.topic.replication.factor=1",
        "transaction.state.log.replication.factor=1",
        "transaction.state.log.min.isr=1",
        "share.coordinator.state.topic.replication.factor=1",
        "share.coordinator.state.topic.min.isr=1",
        "group.initial.rebalance.delay.ms=0",
        # A restart after a kill -9 waits for the dead incarnation's session to lapse (9 s by
        # default) before the controller lets the new one in: 5 s, with a beat every second.
        "broker.heartbeat.interval.ms=1000",
        "broker.session.timeout.ms=5000",
        "log.retention.hours=168",
        "",
    ])


_LOG4J2 = """<Configuration status="warn">
  <Appenders>
    <RollingFile name="server" fileName="${sys:kafka.logs.dir}/logs/server.log"
                 filePattern="${sys:kafka.logs.dir}/logs/server.log.%i">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
      <SizeBasedTriggeringPolicy size="10MB"/>
      <DefaultRolloverStrategy max="3"/>
    </RollingFile>
  </Appenders>
  <Loggers>
    <Root level="info"><AppenderRef ref="server"/></Root>
    <Logger name="state.change.logger" level="warn"/>
  </Loggers>
</Configuration>
"""


def _write_config(b: Broker) -> Path:
    creds = _credentials()
    (home() / "log4j2.xml").write_text(_LOG4J2)
    path = home() / "server.properties"
    write_private(path, _server_properties(b, creds))
    return path


def _format(b: Broker, config: Path) -> None:
    """Format the log directory once, with the client user's SCRAM credential in its metadata.
    The arguments go through a 0600 argument file (`java @file`): no password on a command line."""
    import subprocess

    if (log_dir() / "meta.properties").exists():
        return
    creds = _credentials()
    scram = f"{MECHANISM}=[name={creds['username']},password={creds['password']}]"  # url-safe: no quoting
    argfile = home() / "format.args"
    write_private(argfile, "\n".join(["format", "--config", str(config), f"--cluster-id={b.cluster_id}",
                                      "--add-scram", scram]) + "\n")
    try:
        res = subprocess.run([*_jvm("kafka.tools.StorageTool"), f"@{argfile}"], capture_output=True, text=True,
                             timeout=120)
    finally:
        argfile.unlink(missing_ok=True)
    if res.returncode != 0:  # its stdout lists the credential's salted form: only stderr is told
        raise KafkaBrokerError(f"formatting {log_dir()} failed: {res.stderr.strip()[-2000:]}")


def _new_cluster_id() -> str:
    """A Kafka cluster id: a random UUID's 16 bytes in url-safe base64, unpadded (22 chars), drawn
    again while it starts with "-", as Kafka's own Uuid.randomUuid does: kafka-storage's argument
    parser takes such a value for an option (1 format in 64 failed in the clean-clone CI)."""
    import base64
    import uuid

    while (cid := base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")).startswith("-"):
        continue
    return cid


def is_alive(b: Broker) -> bool:
    return b.pid is not None and processes.is_same_process(b.pid, b.started)


def answers(b: Broker | None = None, timeout_s: float = 3.0) -> list[str] | None:
    """The topics the broker lists to our SCRAM user (a real, authenticated request), or None
    when it does not answer."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    b = b or load_record()
    if b is None:
        return None
    creds = _credentials()
    conf = ClientSettings(b.bootstrap, creds["username"], creds["password"]).librdkafka()
    try:
        meta = AdminClient({**conf, "log_level": 0}).list_topics(timeout=timeout_s)
    except KafkaException:
        return None
    return sorted(t for t in meta.topics if not t.startswith("__"))


def is_running(b: Broker | None = None) -> bool:
    b = b or load_record()
    return b is not None and is_alive(b) and answers(b) is not None


def _start(b: Broker, timeout_s: float) -> Broker:
    """Start the broker on `b`'s ports (formatting a new log directory first), record it, and
    wait until it answers an authenticated request."""
    for port, host in ((b.port, b.host), (b.controller_port, LOOPBACK)):  # after a kill: the old sockets let go
        if not wait_until(functools.partial(port_free, port, host), 30.0, interval_s=0.5):
            raise KafkaBrokerError(f"port {port}, recorded for the embedded Kafka broker, is held by another process "
                                   f"(`ss -ltnp 'sport = :{port}'` names it); every client uses it, so the broker "
                                   f"does not move: free it and run `streamops kafka up` again")
    config = _write_config(b)
    _format(b, config)
    proc = processes.spawn_detached([*_jvm("kafka.Kafka"), str(config)], log_path=home() / "logs" / "broker.out",
                                    pid_file=home() / "broker.pid", cwd=str(home()))
    b = replace(b, pid=proc.pid, started=processes.started_at(proc.pid))
    _save(b)
    if not wait_until(lambda: not is_alive(b) or answers(b, timeout_s=2.0) is not None, timeout_s, interval_s=0.5) \
            or not is_alive(b):
        processes.stop(proc.pid, grace_s=5, group=True)
        raise KafkaBrokerError(f"the Kafka broker did not come up on {b.bootstrap} within {timeout_s:.0f}s; "
                               f"see {home() / 'logs'}")
    return b


def up(timeout_s: float = 90.0, host: str | None = None) -> tuple[Broker, bool]:
    """Start (or reuse) the embedded broker. Returns it and whether it was already running.
    `host` (else `$STREAMOPS_KAFKA_HOST`, else loopback): the address the clients' listener binds
    and advertises, for drivers and executors on other hosts; they still authenticate (SCRAM)."""
    host = host or os.environ.get(HOST_ENV) or LOOPBACK
    b = load_record()
    if b is not None and is_alive(b):
        if b.host != host:
            raise KafkaBrokerError(f"the Kafka broker runs on {b.bootstrap}, not on {host}: "
                                   "`streamops kafka down` first to move it")
        if wait_until(lambda: answers(b) is not None, timeout_s, interval_s=1.0) is None:
            raise KafkaBrokerError(f"the Kafka broker (pid {b.pid}) runs but does not answer on {b.bootstrap}; "
                                   f"see {home() / 'logs'}, or `streamops kafka down` and up again")
        return b, True
    if b is None or not (log_dir() / "meta.properties").exists():
        shutil.rmtree(log_dir(), ignore_errors=True)  # a log directory with no record: nobody's cluster
        b = Broker(free_port(host), free_port(), b.cluster_id if b else _new_cluster_id(), host=host)
    elif b.host != host:  # a stopped broker moved to another address keeps its data and ports
        b = replace(b, host=host)
    elif not _credentials_path().exists():
        raise KafkaBrokerError(f"the Kafka broker's credentials file {_credentials_path()} is missing, and its "
                               f"log directory holds that password: restore the file, or remove {home()} to start "
                               "from an empty broker")
    return _start(b, timeout_s), False


def heal(timeout_s: float = 90.0) -> bool:
    """Restart the recorded broker if it died (a kill -9, an OOM), on its ports with its log
    directory. Returns whether it restarted it. A broker stopped by `down` has no pid in its
    record: it is not to run, and stays stopped."""
    b = load_record()
    if b is None or b.pid is None or is_alive(b):
        return False
    log.warning("action=heal the Kafka broker (pid %s, port %d) died; restarting it on its port", b.pid, b.port)
    try:
        _start(b, timeout_s)
    except KafkaBrokerError as e:
        log.error("action=heal the Kafka broker did not come back: %s", e)
        return False
    return True


def down(grace_s: float = 20.0) -> bool:
    """Stop the broker (its data and ports are kept for the next `up`). Returns whether it ran."""
    b = load_record()
    if b is None:
        return False
    was = is_alive(b)
    if was and b.pid is not None:
        processes.stop(b.pid, grace_s=grace_s, group=True)
    _save(replace(b, pid=None, started=None))
    return was


def status() -> dict[str, object]:
    """What `streamops kafka status` shows: running, pid, ports, log directory, topics."""
    b = load_record()
    if b is None:
        return {"running": False, "bootstrap": None}
    alive = is_alive(b)
    topics = answers(b, timeout_s=2.0) if alive else None
    return {"running": alive and topics is not None, "pid": b.pid if alive else None, "bootstrap": b.bootstrap,
            "controller_port": b.controller_port, "log_dir": str(log_dir()), "logs": str(home() / "logs"),
            "topics": None if topics is None else len(topics)}
