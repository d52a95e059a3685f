"""The Airflow installation streamops runs: its configuration, secrets, metadata database and
background processes (api-server, scheduler, dag-processor, triggerer).

Configuration is environment variables (written to `$AIRFLOW_HOME/env.sh` too, so that an
operator can `source` it and use the `airflow` CLI by hand). Metadata lives in the embedded
PostgreSQL's `airflow` database, as its own role (store/roles.py); the executor is the
LocalExecutor. Auth is the Simple auth manager with an admin and a read-only viewer, whose
passwords we generate once, mode 0600.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from streamops import processes
from streamops.paths import REPO_ROOT, registry_path, state_dir, write_private
from streamops.store import db, embedded, roles
from streamops.waiting import wait_until

log = logging.getLogger(__name__)

COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
# Airflow's worker and triggerer log servers bind every interface on fixed ports (8793, 8794) and
# have no host setting. Every component here runs on one machine and the API server reads task
# logs from the shared log folder, so they are not started at all: nothing listens beyond
# loopback, and two sites never collide. Their ports are still derived from the site's port for
# anyone who starts a component by hand from env.sh.
COMPONENT_ARGS = {"scheduler": ["--skip-serve-logs"], "triggerer": ["--skip-serve-logs"]}
USERS = {"admin": "admin", "viewer": "viewer"}  # username → Simple auth manager role
RECONFIGURE_POOL = "streamops_reconfigure"


@dataclass(frozen=True)
class AirflowSite:
    home: Path
    database: str
    port: int
    # Tests create DAGs paused, so that only what they unpause runs; the demo runs them all.
    paused_at_creation: bool = False

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def site(home: Path | None = None, database: str | None = None, port: int | None = None,
         paused_at_creation: bool = False) -> AirflowSite:
    """The demo's site by default; tests pass their own home, database and port."""
    return AirflowSite(
        home=home or Path(os.environ.get("STREAMOPS_AIRFLOW_HOME", state_dir() / "airflow")),
        database=database or os.environ.get("STREAMOPS_AIRFLOW_DB", "airflow"),
        port=port or int(os.environ.get("STREAMOPS_AIRFLOW_PORT", "8080")),
        paused_at_creation=paused_at_creation,
    )


def _secrets(s: AirflowSite) -> dict[str, str]:
    path = s.home / "secrets.json"
    if path.exists():
        return json.loads(path.read_text())
    values = {"jwt_secret": secrets.token_urlsafe(48), "api_secret_key": secrets.token_urlsafe(32)}
    write_private(path, json.dumps(values))
    return values


def passwords_file(s: AirflowSite) -> Path:
    return s.home / "passwords.json"


def passwords(s: AirflowSite) -> dict[str, str]:
    """The users' passwords, generated at first use (the Simple auth manager reads this file)."""
    path = passwords_file(s)
    current = json.loads(path.read_text()) if path.exists() else {}
    missing = [u for u in USERS if u not in current]
    if missing:
        current.update({u: secrets.token_urlsafe(12) for u in missing})
        write_private(path, json.dumps(current) + "\n")
    return current


def metadata_url(s: AirflowSite) -> str:
    """Airflow's database as `streamops_airflow`, which owns it and reads nothing of the platform's,
    where the server's URL takes passwords from a password file (the embedded cluster's); else
    as the platform's role (compose names its own URL: docker/compose.yaml)."""
    url = db.with_database(db.database_url(), s.database)
    return db.sqlalchemy_url(roles.as_role(url, roles.AIRFLOW) if roles.names_passfile(url) else url)


def environment(s: AirflowSite) -> dict[str, str]:
    """What every Airflow process (and the tasks it runs) needs, on top of os.environ."""
    sec = _secrets(s)
    passwords(s)
    venv_bin = str(Path(sys.executable).parent)
    env = {
        "AIRFLOW_HOME": str(s.home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO_ROOT / "dags"),
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": str(s.paused_at_creation),
        # Two cores: a few task processes at a time; reconfigurations are further limited by a pool.
        "AIRFLOW__CORE__PARALLELISM": "8",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{s.base_url}/execution/",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": ",".join(f"{u}:{r}" for u, r in USERS.items()),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords_file(s)),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": metadata_url(s),
        "AIRFLOW__API__BASE_URL": s.base_url,
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(s.port),
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(s.port + 1),
        "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(s.port + 2),
        "AIRFLOW__API__SECRET_KEY": sec["api_secret_key"],
        "AIRFLOW__API_AUTH__JWT_SECRET": sec["jwt_secret"],
        # New or edited DAG files show up within seconds in the demo.
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "30",
        "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "30",
        "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
        "STREAMOPS_HOME": str(state_dir()),
        "STREAMOPS_APPS": str(registry_path()),
        "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}",  # components spawn `airflow`
    }
    if os.environ.get("STREAMOPS_DATABASE_URL"):
        env["STREAMOPS_DATABASE_URL"] = os.environ["STREAMOPS_DATABASE_URL"]
    return env


def _airflow(s: AirflowSite, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
    cmd = [str(Path(sys.executable).parent / "airflow"), *args]
    res = subprocess.run(cmd, env={**os.environ, **environment(s)}, capture_output=True, text=True, timeout=timeout)
    if check and res.returncode != 0:
        raise RuntimeError(f"`airflow {' '.join(args)}` failed ({res.returncode}):\n{res.stderr[-3000:]}")
    return res


def _ensure_database(s: AirflowSite) -> None:
    server = db.with_database(db.database_url(), "postgres")
    if not roles.names_passfile(server):
        embedded.ensure_database(server, s.database)
        return
    roles.ensure_login_roles(server)  # a cluster started by an older streamops has no such role yet
    roles.ensure_owned_database(server, s.database, roles.AIRFLOW)


def init(s: AirflowSite) -> float:
    """Create and migrate the metadata database, the reconfiguration pool and `env.sh`. Idempotent.
    Returns the seconds it took."""
    started = time.monotonic()
    s.home.mkdir(parents=True, exist_ok=True)
    _ensure_database(s)
    _airflow(s, "db", "migrate")
    # One reconfiguration at a time on this 2-core machine; the per-stage database lock still
    # serializes a stage's changes whatever the pool size.
    _airflow(s, "pools", "set", RECONFIGURE_POOL, "1", "streamops reconfigurations running at once")
    env = environment(s)
    write_private(s.home / "env.sh", "".join(f"export {k}={shlex.quote(v)}\n" for k, v in sorted(env.items())))
    return time.monotonic() - started


def _pid_file(s: AirflowSite, component: str) -> Path:
    return s.home / "run" / f"{component}.pid"


def log_file(s: AirflowSite, component: str) -> Path:
    return s.home / "logs" / f"{component}.log"


def running(s: AirflowSite) -> dict[str, int]:
    out = {}
    for c in COMPONENTS:
        pid = processes.read_pid(_pid_file(s, c))
        if pid is not None and processes.is_alive(pid):
            out[c] = pid
    return out


def health(s: AirflowSite, timeout: float = 3.0) -> dict | None:
    """The api-server's /api/v2/monitor/health document, or None while it is not answering."""
    import httpx

    try:
        r = httpx.get(f"{s.base_url}/api/v2/monitor/health", timeout=timeout)
        return r.json() if r.status_code == 200 else None
    except httpx.HTTPError:
        return None


def _start(s: AirflowSite, component: str, env: dict[str, str]) -> int:
    proc = processes.spawn_detached([str(Path(sys.executable).parent / "airflow"), component,
                                     *COMPONENT_ARGS.get(component, [])],
                                    log_path=log_file(s, component), pid_file=_pid_file(s, component), env=env,
                                    cwd=s.home)
    return proc.pid


def up(s: AirflowSite, wait_s: float = 240, progress=lambda _: None) -> float:
    """Start the four components in the background (each in its own session, so that `down`
    stops a component with its children) and wait until the API answers and the scheduler and
    dag-processor are healthy. Returns the seconds it took."""
    started = time.monotonic()
    env = {**os.environ, **environment(s)}
    already = running(s)
    for c in COMPONENTS:
        if c in already:
            progress(f"airflow {c} already running (pid {already[c]})")
            continue
        pid = _start(s, c, env)
        progress(f"airflow {c} started (pid {pid}, log {log_file(s, c)})")

    def healthy() -> bool:
        h = health(s)
        parts = ("metadatabase", "scheduler", "dag_processor")
        if h and all((h.get(k) or {}).get("status") == "healthy" for k in parts):
            return True
        dead = [c for c in COMPONENTS if c not in running(s)]
        if dead:
            raise RuntimeError(f"airflow {', '.join(dead)} exited during start-up; see {log_file(s, dead[0])}")
        return False

    if wait_until(healthy, wait_s, interval_s=2):
        return time.monotonic() - started
    raise TimeoutError(f"Airflow was not healthy within {wait_s:.0f}s (last health: {health(s)}); "
                       f"see the logs under {s.home / 'logs'}")


def down(s: AirflowSite, timeout_s: float = 30) -> list[str]:
    """SIGTERM every component's process group, SIGKILL what is left after `timeout_s`."""
    procs = running(s)
    for c in COMPONENTS:  # first: the supervisor's ComponentKeeper restarts a dead component whose file is left
        _pid_file(s, c).unlink(missing_ok=True)
    processes.stop_all(procs.values(), grace_s=timeout_s, group=True)
    return list(procs)


class ComponentKeeper:
    """Airflow's own process manager: restarts a component that died (its pid file is left; `down`
    removes them, so components stopped on purpose, or never started, are left alone). The
    supervisor runs it every housekeeping pass, and the watchdog DAG restarts the supervisor: each
    watches the other. A component that dies again soon after its restart (the scheduler exits
    while the database is away) waits before the next try, doubling up to `max_s`."""

    def __init__(self, s: AirflowSite, first_s: float = 5.0, max_s: float = 120.0, reset_after_s: float = 60.0,
                 clock=time.monotonic) -> None:
        self.site, self.first_s, self.max_s, self.reset_after_s, self.clock = s, first_s, max_s, reset_after_s, clock
        self._delay: dict[str, float] = {}
        self._restarted_at: dict[str, float] = {}

    def __call__(self, progress=lambda _: None) -> list[str]:
        """One pass: restart what is due. Returns the components restarted."""
        now, done = self.clock(), []
        for c in COMPONENTS:
            pid = processes.read_pid(_pid_file(self.site, c))
            if pid is None:
                continue
            since = now - self._restarted_at.get(c, float("-inf"))
            if processes.is_alive(pid):
                if since >= self.reset_after_s:
                    self._delay.pop(c, None)  # it stayed up: the next death is restarted at once
                continue
            delay = self._delay.get(c, 0.0)
            if since < delay:
                continue
            processes.stop(pid, grace_s=5, group=True)  # children of the dead leader (task runners, gunicorn)
            new = _start(self.site, c, {**os.environ, **environment(self.site)})
            self._restarted_at[c] = now
            self._delay[c] = min(self.max_s, max(self.first_s, 2 * delay))
            log.warning("action=restart-airflow component=%s the %s (pid %d) had died; restarted as pid %d",
                        c, c, pid, new)
            progress(f"action=restart-airflow airflow {c} (pid {pid}) had died; restarted as pid {new}")
            done.append(c)
        return done
