"""Launchers start and signal stage drivers. The mechanisms only see this protocol, so a
Spark standalone or Kubernetes pool is a new class here, not a change elsewhere."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from streamops import processes
from streamops.paths import REPO_ROOT, state_dir

RUN_STAGE = REPO_ROOT / "spark_apps" / "run_stage.py"


@dataclass(frozen=True)
class Launched:
    pid: int | None
    driver_id: str | None
    log_path: str


class Launcher(Protocol):
    kind: str

    def launch(self, deployment_id: int, stage_id: str, env: dict[str, str]) -> Launched: ...

    def is_alive(self, pid: int | None, driver_id: str | None) -> bool: ...

    def terminate(self, pid: int | None, driver_id: str | None, force: bool = False) -> None: ...


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

    def launch(self, deployment_id: int, stage_id: str, env: dict[str, str]) -> Launched:
        log_path = state_dir() / "logs" / f"{stage_id}-{deployment_id}.log"
        child_env = {**os.environ, **env, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
        # Its own session: it survives the CLI that started it; Ctrl-C there does not reach it.
        proc = processes.spawn_detached([sys.executable, str(RUN_STAGE), "--deployment-id", str(deployment_id)],
                                        log_path=log_path, pid_file=self.pid_file(stage_id),
                                        env=child_env, cwd=str(REPO_ROOT))
        self._children[proc.pid] = proc
        return Launched(pid=proc.pid, driver_id=None, log_path=str(log_path))

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


_LAUNCHERS: dict[str, Launcher] = {}


def launcher_for(master: str) -> Launcher:
    """The launcher for a pool's Spark master URL."""
    if master == "local" or master.startswith("local["):
        return _LAUNCHERS.setdefault("local", LocalProcessLauncher())
    raise NotImplementedError(f"no launcher yet for master {master!r}; only local pools are supported")
