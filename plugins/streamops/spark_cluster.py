"""An embedded Spark standalone cluster: a master and workers started from the installed
pyspark's own jars (`bin/spark-class`), on loopback (or on `--host`, `$STREAMOPS_SPARK_HOST`),
with their logs, pids and work directories under `.streamops/spark/`. Pools with `master:
embedded` run their stages' executors on it; `STREAMOPS_SPARK_MASTER=spark://host:port` points
those pools at an existing cluster instead. Workers on other machines join a master with
`streamops spark worker` (`worker_argv`, docs/cluster.md).

The wheel has no `sbin/start-*.sh`; `spark-class` with `--host ADDRESS` is what they would run.

Every RPC is authenticated (`spark.authenticate`) with a secret generated once into
`.streamops/spark/conf/spark-defaults.conf` (mode 0600). The master and the workers read it with
`--properties-file`, the drivers of embedded pools through PYSPARK_SUBMIT_ARGS (`client_env`), and
each worker hands it to its executors in their environment: the secret is on no command line.
Without it, a process that reaches the master's port cannot register. Not SPARK_CONF_DIR: Spark
puts it on every JVM's classpath, where a non-empty directory stops the class archive's mapping.

Every RPC is also encrypted (`RPC_CRYPTO`, issue 44: AES-GCM, key exchange version 2, no SASL
fallback), since tasks carry what their closures hold, a sink's database URL among them. The same
file carries it to the master and workers; a driver hands it to its executors. `up` adds it to a
conf from before it and restarts a running cluster on its ports. Local disk (shuffle files,
spills) stays plain: it is on the workers' own disks, beside this file and the passfile.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, overload

import httpx

from streamops import processes
from streamops.paths import state_dir, write_private
from streamops.ports import LOOPBACK, free_port
from streamops.waiting import wait_until

log = logging.getLogger("streamops.spark_cluster")

ENV_MASTER = "STREAMOPS_SPARK_MASTER"
# The master a stage's driver connects to, set by its launcher; unset means local[cores].
RUN_MASTER_ENV = "STREAMOPS_RUN_MASTER"
# The loopback port of a stage driver's Spark UI, set by its launcher; unset means no UI.
UI_PORT_ENV = "STREAMOPS_SPARK_UI_PORT"
# The address the embedded master and workers bind and advertise (default: loopback).
HOST_ENV = "STREAMOPS_SPARK_HOST"


class SparkClusterError(RuntimeError):
    """The embedded cluster could not start, or no cluster is known for a standalone pool."""


@dataclass(frozen=True)
class Worker:
    pid: int
    cores: int
    memory: str
    webui_port: int


@dataclass(frozen=True)
class Cluster:
    master_port: int
    webui_port: int
    master_pid: int
    workers: list[Worker] = field(default_factory=list)
    host: str = LOOPBACK  # what the master binds and advertises (records from before it: loopback)

    @property
    def url(self) -> str:
        return f"spark://{self.host}:{self.master_port}"

    @property
    def ui(self) -> str:
        return f"http://{self.host}:{self.webui_port}"


def default_host() -> str:
    return os.environ.get(HOST_ENV, "").strip() or LOOPBACK


def home() -> Path:
    """`.streamops/spark/`: the record, logs and work directories."""
    d = state_dir() / "spark"
    d.mkdir(parents=True, exist_ok=True)
    return d


def spark_home() -> Path:
    """The installed pyspark package: its `bin/spark-class` and `jars/` are a Spark distribution."""
    import pyspark

    return Path(pyspark.__file__).parent


def conf_dir() -> Path:
    """Where the cluster's `spark-defaults.conf` with the secret is."""
    return home() / "conf"


def _secret_file() -> Path:
    return conf_dir() / "spark-defaults.conf"


# RPC encryption (issue 44). Spark 4 defaults to AES-CTR, which does not authenticate what it
# encrypts, and to key exchange version 1, which skips a KDF round: GCM and version 2 are what
# docs/security.md recommends; both ends must agree on them. Without `saslFallback false` a
# process without encryption would still be served over unencrypted SASL.
RPC_CRYPTO = {"spark.network.crypto.enabled": "true",
              "spark.network.crypto.authEngineVersion": "2",
              "spark.network.crypto.cipher": "AES/GCM/NoPadding",
              "spark.network.crypto.saslFallback": "false"}


def auth_conf() -> Path:
    """The properties file with the cluster's shared secret and `RPC_CRYPTO`, generated once
    (kept across restarts: drivers and workers that outlive a master must still authenticate to
    its successor). A file from before `RPC_CRYPTO` is left as it is here: `up` adds it, when it
    can restart the cluster with it."""
    f = _secret_file()
    if not f.exists():
        f.parent.mkdir(mode=0o700, exist_ok=True)
        lines = ["spark.authenticate true", f"spark.authenticate.secret {secrets.token_hex(32)}",
                 *(f"{k} {v}" for k, v in RPC_CRYPTO.items())]
        write_private(f, "\n".join(lines) + "\n")
    return f


def conf_keys(f: Path) -> set[str]:
    """The keys set in properties file `f` (`key value`, `key=value` or `key: value`)."""
    keys = set()
    for line in f.read_text().splitlines():
        m = re.match(r"\s*([^\s=:#!][^\s=:]*)", line)
        if m:
            keys.add(m[1])
    return keys


def missing_rpc_crypto() -> list[str]:
    """The `RPC_CRYPTO` keys the cluster's conf lacks (none when there is no conf yet)."""
    f = _secret_file()
    return [k for k in RPC_CRYPTO if k not in conf_keys(f)] if f.exists() else []


def ensure_rpc_crypto() -> list[str]:
    """Add to an existing conf the `RPC_CRYPTO` keys it lacks (its secret, and any key it
    already sets, are kept: an operator's own choice stays). Returns the keys added. The file is
    replaced whole, so a driver starting meanwhile reads the old one or the new one."""
    f = _secret_file()
    if not f.exists():
        auth_conf()
        return []
    missing = {k: RPC_CRYPTO[k] for k in missing_rpc_crypto()}
    if missing:
        text = f.read_text()
        tmp = f.with_name(f.name + ".tmp")
        write_private(tmp, text + ("" if text.endswith("\n") or not text else "\n")
                      + "".join(f"{k} {v}\n" for k, v in missing.items()))
        os.replace(tmp, f)
    return list(missing)


def client_env() -> dict[str, str]:
    """What a driver of the embedded cluster needs in its environment to authenticate: PySpark
    starts its JVM with `spark-submit $PYSPARK_SUBMIT_ARGS`."""
    return {"PYSPARK_SUBMIT_ARGS": f"--properties-file {auth_conf()} pyspark-shell"}


def recovery_dir() -> Path:
    """Where the master persists its applications and workers (FILESYSTEM recovery mode)."""
    return home() / "recovery"


def _crypto_restart_marker() -> Path:
    return home() / "rpc-crypto-restart"


def _record_path() -> Path:
    return home() / "cluster.json"


def load_record() -> Cluster | None:
    try:
        d = json.loads(_record_path().read_text())
    except (FileNotFoundError, ValueError):
        return None
    return Cluster(d["master_port"], d["webui_port"], d["master_pid"], [Worker(**w) for w in d["workers"]],
                   d.get("host", LOOPBACK))


def master_state(c: Cluster, timeout_s: float = 3.0) -> dict[str, Any] | None:
    """The master's own view (its web UI's /json/: status, workers, cores, apps), or None if it
    does not answer."""
    try:
        state: dict[str, Any] = httpx.get(f"{c.ui}/json/", timeout=timeout_s).json()
        return state
    except (httpx.HTTPError, ValueError):
        return None


def is_running(c: Cluster) -> bool:
    return processes.is_alive(c.master_pid) and (master_state(c) or {}).get("status") == "ALIVE"


def _env(host: str) -> dict[str, str]:
    # The workers' executors start Python workers: this venv's interpreter, with streamops and
    # spark_apps importable (the executors' working directory is their own work dir).
    from streamops.paths import REPO_ROOT

    path = os.pathsep.join([str(REPO_ROOT / "plugins"), str(REPO_ROOT),
                            os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    # Every port on `host` (SPARK_LOCAL_IP), and no REST submission server: anyone who reaches
    # it could run code on the workers without a word of authentication. The master keeps its
    # applications and workers in `recovery/`, so a master restarted on its port takes them
    # back (they re-register within a second) instead of orphaning every running driver; and
    # it binds its recorded port or fails, never the next free one (maxRetries=0).
    master_opts = ["-Dspark.master.rest.enabled=false", "-Dspark.deploy.recoveryMode=FILESYSTEM",
                   f"-Dspark.deploy.recoveryDirectory={recovery_dir()}", "-Dspark.port.maxRetries=0"]
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_CONF_DIR", "PYSPARK_SUBMIT_ARGS")}
    return {**env, "SPARK_HOME": str(spark_home()), "SPARK_LOCAL_IP": host,
            "SPARK_MASTER_OPTS": " ".join(master_opts),
            "PYSPARK_PYTHON": sys.executable, "PYTHONPATH": path, "SPARK_NO_DAEMONIZE": "1"}


def _spawn(cls: str, args: list[str], name: str, host: str) -> int:
    argv = [str(spark_home() / "bin" / "spark-class"), cls, *args, "--properties-file", str(auth_conf())]
    # A worker's executors inherit its niceness: the data plane; the master stays with the control plane.
    nice = processes.DATA_PLANE_NICE if cls.endswith("Worker") else 0
    proc = processes.spawn_detached(argv, log_path=home() / "logs" / f"{name}.log", pid_file=home() / f"{name}.pid",
                                    env=_env(host), cwd=str(home()), nice=nice)
    return proc.pid


def worker_argv(master: str, host: str, cores: int, memory: str, webui_port: int | None = None,
                work_dir: Path | None = None) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of a worker on this machine that joins `master`, bound
    to `host` (this machine's address as the master and the drivers reach it). The
    command line names the cluster's secret (`--properties-file`), and the environment carries
    this venv's interpreter for the executors' Python workers, as the embedded workers have them."""
    if not _secret_file().exists():  # a new secret here would never match the master's
        raise SparkClusterError(f"no cluster secret at {_secret_file()}: copy the master's "
                                "(mode 0600) before a worker joins it")
    if missing := missing_rpc_crypto():  # a copy from before RPC encryption: a master with it refuses it
        log.warning("the cluster's conf at %s lacks %s: if the master's has them, copy it again",
                    _secret_file(), ", ".join(missing))
    work = work_dir or home() / "work" / f"worker-{host}"
    work.mkdir(parents=True, exist_ok=True)
    argv = [str(spark_home() / "bin" / "spark-class"), "org.apache.spark.deploy.worker.Worker", master,
            "--host", host, "--cores", str(cores), "--memory", memory, "--work-dir", str(work),
            "--properties-file", str(_secret_file())]
    if webui_port is not None:
        argv += ["--webui-port", str(webui_port)]
    return argv, _env(host)


def up(workers: int = 1, cores_per_worker: int = 2, memory_per_worker: str = "4g",
       timeout_s: float = 90.0, progress: Callable[[str], None] = lambda _: None,
       host: str | None = None) -> tuple[Cluster, bool]:
    """Start (or reuse) the embedded cluster: the master, then `workers` workers, each offering
    `cores_per_worker` cores and `memory_per_worker` to executors, all bound to `host` (default
    `$STREAMOPS_SPARK_HOST`, else loopback). Returns it and whether it was already running.
    Waits until the master is ALIVE and every worker has registered (`workers` may be 0: the
    workers are on other machines, `streamops spark worker`). A conf without `RPC_CRYPTO` gets
    it first; a cluster running with such a conf is restarted on its ports to read it."""
    host = host or default_host()
    c = load_record()
    added = missing_rpc_crypto()
    restart = _crypto_restart_marker()
    if added and c is not None and processes.is_alive(c.master_pid):
        restart.touch()
    ensure_rpc_crypto()
    if restart.exists() and c is not None:
        # Started before RPC encryption: stopped, and `heal` below restarts them on their ports with
        # it (their drivers, refused from now on, are restarted by the watchdog). The conf comes
        # first, so a heal by the supervisor meanwhile reads it too; the marker makes an `up`
        # interrupted before the stop do it next time.
        log.warning("action=rpc_crypto added %s to %s; restarting the cluster on its ports", added, _secret_file())
        _stop_processes(c)
        restart.unlink()
        c = load_record()  # the supervisor may have healed it meanwhile, with new pids
    if c is not None and (is_running(c) or not processes.is_alive(c.master_pid)):
        # A live cluster is reused; a dead master comes back on its recorded port, so the
        # drivers and workers that outlived it re-register instead of being orphaned.
        h = heal(c, timeout_s=timeout_s)
        why = f"its conf lacked RPC encryption ({', '.join(added)})" if added else "was dead"
        if h.master_restarted:
            progress(f"the Spark master {why}: restarted on {c.url}")
        for i in h.workers:
            progress(f"worker-{i} {why}: restarted")
        healed = load_record() or c
        if is_running(healed):
            return healed, True
    if c is not None:
        down()
    shutil.rmtree(recovery_dir(), ignore_errors=True)  # a new cluster recovers nobody's old applications
    port, ui = free_port(host), free_port(host)
    c = _start_master(port, ui, timeout_s, host=host)
    progress(f"Spark master {c.url} is ALIVE (UI {c.ui})")
    master_pid = c.master_pid
    started = [_start_worker(c, i, cores_per_worker, memory_per_worker) for i in range(workers)]
    c = Cluster(port, ui, master_pid, started, host)
    _save(c)
    if not wait_until(lambda: (master_state(c) or {}).get("aliveworkers", 0) >= workers, timeout_s, interval_s=0.5):
        raise SparkClusterError(f"{workers} worker(s) did not register with {c.url} within {timeout_s:.0f}s; "
                                f"see {home() / 'logs'}")
    progress(f"{workers} worker(s) registered: {workers * cores_per_worker} cores")
    return c, False


def _start_master(port: int, ui: int, timeout_s: float, workers: list[Worker] | None = None,
                  host: str = LOOPBACK) -> Cluster:
    """Start the master on `host:port` (its web UI on `ui`), record it, and wait until it is
    ALIVE (a restarted one first recovers its applications and workers)."""
    master_pid = _spawn("org.apache.spark.deploy.master.Master",
                        ["--host", host, "--port", str(port), "--webui-port", str(ui)], "master", host)
    c = Cluster(port, ui, master_pid, list(workers or []), host)
    _save(c)
    if not wait_until(lambda: is_running(c) or not processes.is_alive(master_pid), timeout_s, interval_s=0.5) \
            or not processes.is_alive(master_pid):
        processes.stop(master_pid, grace_s=5, group=True)
        raise SparkClusterError(f"the Spark master did not come up on port {port} within {timeout_s:.0f}s; "
                                f"see {home() / 'logs' / 'master.log'}")
    return c


def _start_worker(c: Cluster, i: int, cores: int, memory: str) -> Worker:
    work = home() / "work" / f"worker-{i}"
    work.mkdir(parents=True, exist_ok=True)
    wui = free_port(c.host)
    pid = _spawn("org.apache.spark.deploy.worker.Worker",
                 [c.url, "--host", c.host, "--cores", str(cores), "--memory", memory,
                  "--webui-port", str(wui), "--work-dir", str(work)], f"worker-{i}", c.host)
    return Worker(pid, cores, memory, wui)


@dataclass(frozen=True)
class Heal:
    """What one `heal` did: whether it restarted the master, and which workers."""
    master_restarted: bool = False
    workers: list[int] = field(default_factory=list)
    error: str | None = None  # the master could not be restarted (it is tried again next pass)
    # The last time this process saw a restarted one alive (else when it found it dead): the
    # fault came after it, and a restart takes seconds, so the heal's own time is too late.
    # time.monotonic() of this process: its caller dates it by the database's clock (docs/ha.md, "Clocks").
    down_since_mono: float | None = None

    def __bool__(self) -> bool:
        return self.master_restarted or bool(self.workers)


def heal(c: Cluster | None = None, timeout_s: float = 60.0) -> Heal:
    """Restart what died of the recorded cluster (a kill -9, an OOM), on the same ports and with
    the same cores and memory. A master comes back on its port and recovers its applications and
    workers from `recovery/`: the running drivers keep their executors and can ask for more. A
    worker is restarted and the master launches on it the executors its applications are short
    of. The supervisor and the watchdog call it every pass."""
    c = c or load_record()
    if c is None:
        return Heal()
    now = time.monotonic()
    down = [pid for pid in [c.master_pid, *(w.pid for w in c.workers)] if not _alive_seen(pid, now)]
    down_since = min((_SEEN_ALIVE.get(pid, now) for pid in down), default=None)
    master_restarted = False
    if c.master_pid in down:
        log.warning("action=heal the Spark master (pid %d, port %d) died; restarting it on its port",
                    c.master_pid, c.master_port)
        try:
            c = _start_master(c.master_port, c.webui_port, timeout_s, c.workers, c.host)
        except SparkClusterError as e:  # the port still held, a JVM that would not start: next pass
            log.error("action=heal the Spark master did not come back: %s", e)
            return Heal(error=str(e))
        master_restarted = True
    dead = [i for i, w in enumerate(c.workers) if w.pid in down]
    workers = list(c.workers)
    for i in dead:
        log.warning("action=heal worker-%d (pid %d) died; restarting it", i, workers[i].pid)
        workers[i] = _start_worker(c, i, workers[i].cores, workers[i].memory)
    if dead:
        _save(Cluster(c.master_port, c.webui_port, c.master_pid, workers, c.host))
    return Heal(master_restarted, dead, down_since_mono=down_since)


# When this process last saw each of the cluster's processes alive, by pid (`heal` every pass).
_SEEN_ALIVE: dict[int, float] = {}  # time.monotonic()


def _alive_seen(pid: int, now: float) -> bool:
    if processes.is_alive(pid):
        _SEEN_ALIVE[pid] = now
        return True
    return False


def _save(c: Cluster) -> None:
    _record_path().write_text(json.dumps(asdict(c), indent=2) + "\n")


def down(grace_s: float = 15.0) -> bool:
    """Stop the workers, then the master. Returns whether anything was running."""
    c = load_record()
    if c is None:
        return False
    was = any(processes.is_alive(p) for p in [w.pid for w in c.workers] + [c.master_pid])
    _stop_processes(c, grace_s)
    _record_path().unlink(missing_ok=True)
    return was


def _stop_processes(c: Cluster, grace_s: float = 15.0) -> None:
    # Workers first: a worker that loses its master keeps retrying; the executors are its children.
    processes.stop_all([w.pid for w in c.workers], grace_s=grace_s, group=True)
    processes.stop(c.master_pid, grace_s=grace_s, group=True)


@overload
def master_url(required: Literal[True] = ...) -> str: ...


@overload
def master_url(required: bool) -> str | None: ...


def master_url(required: bool = True) -> str | None:
    """The master that `embedded` pools use: `$STREAMOPS_SPARK_MASTER`, else the running
    embedded cluster's. Raises SparkClusterError (or returns None) if there is neither."""
    url = os.environ.get(ENV_MASTER)
    if url:
        return url
    c = load_record()
    if c is not None and is_running(c):
        return c.url
    if required:
        raise SparkClusterError(f"no Spark cluster: run `streamops spark up`, or set {ENV_MASTER}=spark://host:port")
    return None
