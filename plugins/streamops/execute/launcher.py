"""Launchers start and signal stage drivers. The mechanisms only see this protocol, so a
Spark standalone or Kubernetes pool is a new class here, not a change elsewhere."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from streamops import processes
from streamops.paths import REPO_ROOT, state_dir
from streamops.ports import LOOPBACK, free_port
from streamops.spark_cluster import UI_PORT_ENV

RUN_STAGE = REPO_ROOT / "spark_apps" / "run_stage.py"
# A warm spare is built this much nicer than the data plane, and given the data plane's priority
# when it is adopted (`adopt`): its JVM start and warm-up take the CPU a running stage leaves. In a
# fresh demo on 2 cores, taxi's batches ran 7-11 s for the 80 s its spare took, against 2-4 s.
SPARE_NICE = 10
# … but no longer than this: on a machine the stages keep saturated, a spare at nice 10 gets a
# few percent of a core and would not be ready for many minutes, leaving failovers cold.
SPARE_NICE_AT_MOST_S = 120.0

log = logging.getLogger("streamops.supervisor")


@dataclass(frozen=True)
class Launched:
    pid: int | None
    driver_id: str | None
    log_path: str
    ui_url: str | None = None  # the driver's Spark UI, on the port the launcher chose (None: off)


class Launcher(Protocol):
    """What stages/, the supervisor and the mechanisms ask of a pool's launcher: start, judge and
    signal a driver, and keep the warm spares (`Spare`) that a restart adopts."""

    kind: str

    def launch(self, deployment_id: int, stage_id: str, env: dict[str, str], spark_ui: bool = True) -> Launched: ...

    def is_alive(self, pid: int | None, driver_id: str | None = None) -> bool: ...

    def terminate(self, pid: int | None, driver_id: str | None = None, force: bool = False) -> None: ...

    def terminate_all(self) -> list[int]: ...

    def spawn_spare(self, stage_id: str, cores: int, env: dict[str, str], pool: dict[str, Any] | None = None) -> Spare:
        ...

    def adopt(self, spare: Spare, deployment_id: int) -> Launched: ...

    def discard(self, spare: Spare) -> None: ...


@dataclass
class Spare:
    """A warm driver: JVM, SparkSession and Python workers up, no query, waiting on its stdin for
    the deployment it is to run. It is the difference between a failover in seconds and a new
    JVM's start (10–40 s on this machine under load). It exits if its owner goes away. On a
    cluster pool it is registered with the master and holds no executor while it waits: it asks
    for the run's executors when it is adopted."""

    stage_id: str
    cores: int
    proc: subprocess.Popen[bytes]
    log_path: str
    ready_file: Path
    adopted: bool = False  # handed a deployment: it is a driver now, not a spare
    master: str = "local"  # its launcher's: a spare runs only a run that launcher would start
    ui_url: str | None = None  # its Spark UI, which the run it adopts keeps (None: off)
    niced: bool = False  # built at SPARE_NICE, not yet given the data plane's priority
    built_at: float = field(default_factory=time.monotonic)

    @property
    def ready(self) -> bool:
        return self.proc.poll() is None and self.ready_file.exists()

    def hurry_if_slow(self) -> None:
        """A spare still building at SPARE_NICE after SPARE_NICE_AT_MOST_S gets the data plane's priority."""
        if self.niced and not self.ready and time.monotonic() - self.built_at > SPARE_NICE_AT_MOST_S:
            processes.renice(self.proc.pid, processes.DATA_PLANE_NICE)
            self.niced = False
            log.info("stage %s: action=spare not ready after %.0fs at nice %d: built at the data plane's "
                     "priority from now", self.stage_id, SPARE_NICE_AT_MOST_S, SPARE_NICE)


# What a driver may inherit from its launcher's environment (the CLI, the supervisor, an Airflow
# task): the platform's and Spark's own variables, the interpreter's, the locale and paths. Not
# Airflow's secrets (its JWT and API keys are in a task's environment), nor anything else a
# driver has no use for.
_DRIVER_ENV_PREFIXES = ("STREAMOPS_", "SPARK_", "PYSPARK_", "JAVA_", "JDK_", "HADOOP_", "PYTHON", "LC_", "UV_")
_DRIVER_ENV_NAMES = {"PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "VIRTUAL_ENV", "SHELL",
                     "HOSTNAME", "TERM", "COVERAGE_PROCESS_START"}


def driver_env(extra: dict[str, str]) -> dict[str, str]:
    """The environment of a driver process: the allowed part of this one, plus `extra`."""
    inherited = {k: v for k, v in os.environ.items() if k in _DRIVER_ENV_NAMES or k.startswith(_DRIVER_ENV_PREFIXES)}
    return {**inherited, **extra, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}


def _spark_ui(on: bool) -> tuple[dict[str, str], str | None]:
    """The driver's Spark UI: a port free on loopback now, the environment that gives it to the
    driver, and its URL; ({}, None) when off. The driver's JVM binds it seconds later; if another
    process took it meanwhile, Spark binds the next free one and the driver records that URL
    (run_stage: `deployments.ui_url` from sc.uiWebUrl). SPARK_LOCAL_IP is where Spark binds its
    UI (else every address), SPARK_PUBLIC_DNS the host its URL names (else the driver's host)."""
    if not on:
        return {}, None
    port = free_port(LOOPBACK)
    return {UI_PORT_ENV: str(port), "SPARK_LOCAL_IP": LOOPBACK, "SPARK_PUBLIC_DNS": LOOPBACK}, \
        f"http://{LOOPBACK}:{port}"


class LocalProcessLauncher:
    """A detached `local[cores]` driver process on this machine, with a pid file and a log file."""

    kind = "local"

    def __init__(self) -> None:
        # Our own children must be reaped, or a dead driver lingers as a zombie that looks alive.
        self._children: dict[int, subprocess.Popen] = {}

    @staticmethod
    def pid_file(stage_id: str) -> Path:
        d = state_dir() / "run"
        d.mkdir(exist_ok=True)
        return d / f"{stage_id}.pid"

    def launch(self, deployment_id: int, stage_id: str, env: dict[str, str], spark_ui: bool = True) -> Launched:
        log_path = state_dir() / "logs" / f"{stage_id}-{deployment_id}.log"
        ui_env, ui_url = _spark_ui(spark_ui)
        child_env = driver_env({**env, **ui_env})
        # Its own session: it survives the CLI that started it; Ctrl-C there does not reach it.
        proc = processes.spawn_detached([sys.executable, str(RUN_STAGE), "--deployment-id", str(deployment_id)],
                                        log_path=log_path, pid_file=self.pid_file(stage_id),
                                        env=child_env, cwd=str(REPO_ROOT), nice=processes.DATA_PLANE_NICE)
        self._children[proc.pid] = proc
        return Launched(pid=proc.pid, driver_id=None, log_path=str(log_path), ui_url=ui_url)

    def spawn_spare(self, stage_id: str, cores: int, env: dict[str, str], pool: dict[str, Any] | None = None) -> Spare:
        """A warm `local[cores]` driver for `stage_id` (`pool`: the run's pool settings; its
        `spark_ui`)."""
        return self._spawn_spare(stage_id, cores, env, [], "local", (pool or {}).get("spark_ui", True))

    def _spawn_spare(self, stage_id: str, cores: int, env: dict[str, str], args: list[str], master: str,
                     spark_ui: bool = True) -> Spare:
        n = len(self._children)
        log_path = state_dir() / "logs" / f"{stage_id}-spare-{os.getpid()}-{n}.log"
        ready = state_dir() / "run" / f"{stage_id}-spare-{os.getpid()}-{n}.ready"
        ready.unlink(missing_ok=True)
        ui_env, ui_url = _spark_ui(spark_ui)
        child_env = driver_env({**env, **ui_env})
        niced = processes.may_renice() and SPARE_NICE > processes.DATA_PLANE_NICE
        proc = processes.spawn_detached(
            [sys.executable, str(RUN_STAGE), "--standby", stage_id, "--cores", str(cores), "--ready-file", str(ready),
             *args],
            log_path=log_path, env=child_env, cwd=str(REPO_ROOT), stdin_pipe=True,
            nice=SPARE_NICE if niced else processes.DATA_PLANE_NICE)
        self._children[proc.pid] = proc
        return Spare(stage_id, cores, proc, str(log_path), ready, master=master, ui_url=ui_url, niced=niced)

    @staticmethod
    def adopt(spare: Spare, deployment_id: int) -> Launched:
        """Hand the spare its deployment: it runs it as a launched driver would. Its stdin is closed
        then: it reads one line, and an open pipe per adopted spare would leak."""
        stdin = spare.proc.stdin
        assert stdin is not None, "a spare is spawned with a stdin pipe"
        processes.renice(spare.proc.pid, processes.DATA_PLANE_NICE)  # built in the background, run in front
        stdin.write(f"{deployment_id}\n".encode())
        stdin.flush()
        stdin.close()
        spare.adopted = True
        return Launched(pid=spare.proc.pid, driver_id=None, log_path=spare.log_path, ui_url=spare.ui_url)

    def discard(self, spare: Spare) -> None:
        processes.send(spare.proc.pid, signal.SIGKILL, group=True)
        spare.proc.wait(10)
        if spare.proc.stdin is not None and not spare.proc.stdin.closed:
            spare.proc.stdin.close()
        spare.ready_file.unlink(missing_ok=True)
        self._children.pop(spare.proc.pid, None)

    def is_alive(self, pid: int | None, driver_id: str | None = None) -> bool:
        if pid is None:
            return False
        child = self._children.get(pid)
        if child is not None:
            return child.poll() is None
        return processes.is_alive(pid)

    def terminate(self, pid: int | None, driver_id: str | None = None, force: bool = False) -> None:
        if pid is None:
            return
        if force:  # the driver leads its own process group: take its JVM down with it
            processes.send(pid, signal.SIGKILL, group=True)
        else:
            processes.send(pid, signal.SIGTERM)

    def terminate_all(self) -> list[int]:
        """SIGKILL every driver this launcher started that still runs (test teardown)."""
        killed = [pid for pid in self._children if self.is_alive(pid)]
        for pid in killed:
            self.terminate(pid, force=True)
        return killed

    def exit_code(self, pid: int) -> int | None:
        child = self._children.get(pid)
        return child.poll() if child is not None else None


class StandaloneLauncher(LocalProcessLauncher):
    """A client-mode driver on this machine (PySpark apps cannot use cluster deploy mode on a
    standalone cluster), whose executors are the cluster's: the driver process is launched and
    supervised as a local one; it is told the master URL, resolved at launch (`embedded`: the
    embedded cluster or $STREAMOPS_SPARK_MASTER), so a restarted cluster on a new port is found."""

    kind = "standalone"

    def __init__(self, master: str) -> None:
        super().__init__()
        self.master = master

    def master_url(self) -> str:
        from streamops import spark_cluster

        return spark_cluster.master_url() if self.master == "embedded" else self.master

    def launch(self, deployment_id: int, stage_id: str, env: dict[str, str], spark_ui: bool = True) -> Launched:
        return super().launch(deployment_id, stage_id, {**env, **self._cluster_env()}, spark_ui)

    def _cluster_env(self) -> dict[str, str]:
        from streamops import spark_cluster

        # The embedded cluster's drivers authenticate with its secret (SPARK_CONF_DIR); another
        # cluster's come from the launcher's own SPARK_CONF_DIR, if any (docker/spark-auth.sh).
        embedded = self.master == "embedded" and not os.environ.get(spark_cluster.ENV_MASTER)
        auth = spark_cluster.client_env() if embedded else {}
        return {**auth, spark_cluster.RUN_MASTER_ENV: self.master_url()}

    def spawn_spare(self, stage_id: str, cores: int, env: dict[str, str], pool: dict[str, Any] | None = None) -> Spare:
        """A warm client-mode driver of this cluster for `stage_id`: registered with the master,
        its session and the stage's query warmed up on one borrowed executor (when a core is
        free), then holding none; adopted, it asks for the run's executors (`pool`: the run's
        executor size)."""
        pool = pool or {}
        args = ["--executor-cores", str(pool.get("executor_cores", 1)),
                "--executor-memory", str(pool.get("executor_memory", "1g"))]
        return self._spawn_spare(stage_id, cores, {**env, **self._cluster_env()}, args, self.master,
                                 pool.get("spark_ui", True))


_LAUNCHERS: dict[str, Launcher] = {}


def launcher_for(master: str) -> Launcher:
    """The launcher for a pool's master (`local`, `embedded` or `spark://host:port`)."""
    if master == "local" or master.startswith("local["):
        return _LAUNCHERS.setdefault("local", LocalProcessLauncher())
    if master == "embedded" or master.startswith("spark://"):
        return _LAUNCHERS.setdefault(master, StandaloneLauncher(master))
    raise NotImplementedError(f"no launcher for master {master!r}: expected local, embedded or spark://host:port")


def terminate_all_drivers() -> list[int]:
    """SIGKILL every driver this process's launchers started that still runs (test teardown)."""
    return [pid for launcher in _LAUNCHERS.values() for pid in launcher.terminate_all()]
