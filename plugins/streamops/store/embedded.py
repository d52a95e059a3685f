"""A private PostgreSQL cluster for development, demos and tests.

It uses the server binaries already on the machine and listens on loopback, plus one network
address when `STREAMOPS_PG_LISTEN` names it with the network allowed to connect (CIDR, e.g.
`10.0.0.5/24`): drivers and executors on other hosts reach it there (docs/cluster.md).
`initdb` refuses to run as root, so as root the cluster runs as the unprivileged
`postgres` user; its data directory must then be somewhere that user can reach.

Every connection authenticates with a scram-sha-256 password: the superuser's and those of the
roles in store/roles.py are generated once and kept in a libpq password file (`.streamops/pg.pgpass`, mode
0600), which the cluster's URLs name (`?passfile=`), so no password is in a URL, a command line,
an environment or a log. A cluster made before this (`initdb -A trust`) is converted at its
next `up`.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import pwd
import re
import secrets
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from streamops.paths import state_dir, write_private
from streamops.ports import free_port, port_free
from streamops.store import roles

DATABASES = ("streamops",)
AIRFLOW_DATABASE = "airflow"  # its role's (roles.AIRFLOW), not the superuser's
SUPERUSER = "postgres"
RECORD_NAME = "pg.json"
PASSFILE_NAME = "pg.pgpass"
PG_ROOT = Path("/usr/lib/postgresql")  # Debian's layout: one bin/ per major version
LISTEN_ENV = "STREAMOPS_PG_LISTEN"
_HBA_MARK = "# streamops: " + LISTEN_ENV


class EmbeddedPgError(RuntimeError):
    """The embedded cluster cannot be created, started or reached."""


@dataclass(frozen=True)
class Cluster:
    bindir: str
    datadir: str
    port: int
    run_as: str | None  # unprivileged OS user that owns the cluster, when we are root
    passfile: str | None = None  # the roles' passwords (libpq format, 0600); None: a trust cluster not yet converted

    @property
    def logfile(self) -> str:
        return str(Path(self.datadir).parent / "postgres.log")

    def url(self, database: str = "streamops", role: str = SUPERUSER, host: str = "127.0.0.1") -> str:
        """The URL on this host (loopback), or through `host`: the listen address, for other hosts."""
        from urllib.parse import quote

        auth = f"?passfile={quote(self.passfile)}" if self.passfile else ""
        return f"postgresql://{role}@{host}:{self.port}/{database}{auth}"


def listen_interface() -> ipaddress.IPv4Interface | ipaddress.IPv6Interface | None:
    """`$STREAMOPS_PG_LISTEN` parsed: the address to listen on beside loopback, and its network
    (the clients allowed in, by scram password). None: loopback only."""
    value = os.environ.get(LISTEN_ENV, "").strip()
    if not value:
        return None
    try:
        return ipaddress.ip_interface(value if "/" in value else f"{value}/32")
    except ValueError as e:
        raise EmbeddedPgError(f"{LISTEN_ENV}={value!r} is not an address with a network, e.g. 10.0.0.5/24") from e


def find_bindir() -> Path:
    """Newest `/usr/lib/postgresql/<v>/bin`, else `pg_ctl` on PATH; `STREAMOPS_PG_BIN` overrides."""
    override = os.environ.get("STREAMOPS_PG_BIN")
    candidates = [Path(override)] if override else []
    versioned = PG_ROOT.glob("*/bin")
    candidates += sorted(versioned, key=lambda p: _version_key(p.parent.name), reverse=True)
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(Path(on_path).parent)
    for c in candidates:
        if (c / "initdb").exists() and (c / "pg_ctl").exists():
            return c
    raise EmbeddedPgError(
        "PostgreSQL server binaries not found (no /usr/lib/postgresql/*/bin/initdb): "
        "run `apt-get install postgresql`, or set STREAMOPS_DATABASE_URL=postgresql://USER@HOST:PORT/streamops "
        "to use an existing server."
    )


def _version_key(name: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", name)) or (0,)


def _owner() -> str | None:
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam(SUPERUSER)
    except KeyError as e:
        raise EmbeddedPgError(
            "running as root, and initdb refuses root, but there is no unprivileged `postgres` user: "
            "create one (`useradd --system postgres`) or set STREAMOPS_DATABASE_URL."
        ) from e
    return SUPERUSER


def _runuser() -> str:
    # /usr/sbin is often missing from a non-login PATH.
    for candidate in (shutil.which("runuser"), "/usr/sbin/runuser", "/sbin/runuser"):
        if candidate and Path(candidate).exists():
            return candidate
    raise EmbeddedPgError("running as root needs `runuser` (util-linux) to start PostgreSQL as `postgres`")


def _as_owner(cmd: list[str], owner: str | None) -> list[str]:
    return [_runuser(), "-u", owner, "--", *cmd] if owner else cmd


def _reachable_by(owner: str | None, path: Path) -> bool:
    if owner is None:
        return True
    return subprocess.run(_as_owner(["test", "-x", str(path)], owner), capture_output=True).returncode == 0


def _record_path() -> Path:
    return state_dir() / RECORD_NAME


def load_record() -> Cluster | None:
    p = _record_path()
    if not p.exists():
        return None
    return Cluster(**json.loads(p.read_text()))


def _save_record(c: Cluster) -> None:
    _record_path().write_text(json.dumps(asdict(c), indent=2) + "\n")


def _pick_datadir(owner: str | None) -> Path:
    """`.streamops/pg`, unless the cluster's owner cannot traverse the checkout (a 0700 home):
    then a directory under /var/tmp named for the state directory, so that two homes (a soak's
    temporary one beside the checkout's) never share, or inherit, a cluster."""
    preferred = state_dir() / "pg"
    if _reachable_by(owner, state_dir()):
        return preferred / "data"
    digest = hashlib.sha1(str(state_dir().resolve()).encode()).hexdigest()[:12]
    return Path("/var/tmp") / f"streamops-{digest}" / "data"


def _recorded_port(c: Cluster, wait_s: float = 30.0) -> int:
    """The port the cluster had: every client (drivers, the supervisor, Airflow) holds it, so a
    restart must come back on it. Waits for another listener to let go; refuses to move."""
    from streamops.waiting import wait_until

    if not wait_until(lambda: port_free(c.port), wait_s, interval_s=0.5):
        raise EmbeddedPgError(f"port {c.port}, recorded for the embedded PostgreSQL, is held by another process "
                              f"(`ss -ltnp 'sport = :{c.port}'` names it); every client uses that port, so the "
                              f"cluster does not move: free the port and run `streamops db up` again")
    return c.port


def _pg_ctl(c: Cluster, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    cmd = _as_owner([str(Path(c.bindir) / "pg_ctl"), "-D", c.datadir, *args], c.run_as)
    res = subprocess.run(cmd, capture_output=True, text=True)
    if check and res.returncode != 0:
        raise EmbeddedPgError(f"{' '.join(cmd)} failed: {res.stderr.strip() or res.stdout.strip()} (log: {c.logfile})")
    return res


def is_running(c: Cluster) -> bool:
    return Path(c.datadir).exists() and _pg_ctl(c, "status", check=False).returncode == 0


def _new_passfile() -> Path:
    """Generate every role's password into a fresh libpq password file."""
    path = state_dir() / PASSFILE_NAME
    write_private(path, "".join(roles.passfile_line(r, secrets.token_urlsafe(24))
                                for r in (SUPERUSER, *roles.LOGIN_ROLES)))
    return path


def _any_host_passfile(c: Cluster) -> None:
    """A password file from before `STREAMOPS_PG_LISTEN` names 127.0.0.1 as its host: libpq would
    not use it for the listen address, so its host field becomes `*` (same passwords)."""
    if not c.passfile:
        return
    path = Path(c.passfile)
    lines = [line.split(":", 4) for line in path.read_text().splitlines()]
    if all(len(f) == 5 and f[0] == "*" for f in lines):
        return
    write_private(path, "".join(f"*:{':'.join(f[1:])}\n" for f in lines if len(f) == 5))


def _ensure_hba(c: Cluster, iface: Any) -> None:
    """pg_hba.conf lets the listen address's network in (scram-sha-256), replacing the line an
    earlier setting wrote; no setting, no such line."""
    hba = Path(c.datadir) / "pg_hba.conf"
    lines = [line for line in hba.read_text().splitlines() if not line.endswith(_HBA_MARK)]
    if iface is not None:
        lines.append(f"host all all {iface.network} scram-sha-256 {_HBA_MARK}")
    write_private(hba, "\n".join(lines) + "\n", c.run_as)


def passwords(c: Cluster) -> dict[str, str]:
    """Role → password, from the cluster's password file."""
    return roles.read_passwords(Path(c.passfile)) if c.passfile else {}


def _initdb(c: Cluster) -> None:
    data = Path(c.datadir)
    data.parent.mkdir(parents=True, exist_ok=True)
    if c.run_as:
        pw = pwd.getpwnam(c.run_as)
        os.chown(data.parent, pw.pw_uid, pw.pw_gid)
    pwfile = data.parent / "initdb.pw"  # initdb reads it as the cluster's owner; gone right after
    write_private(pwfile, passwords(c)[SUPERUSER] + "\n", c.run_as)
    cmd = [str(Path(c.bindir) / "initdb"), "-D", c.datadir, "-A", "scram-sha-256", f"--pwfile={pwfile}",
           "-U", SUPERUSER, "-E", "UTF8", "--no-instructions"]
    try:
        res = subprocess.run(_as_owner(cmd, c.run_as), capture_output=True, text=True)
    finally:
        pwfile.unlink(missing_ok=True)
    if res.returncode != 0:
        raise EmbeddedPgError(f"initdb failed: {res.stderr.strip()}")


def _convert_from_trust(c: Cluster) -> None:
    """A cluster made with `initdb -A trust` (any local user was its superuser): set the
    superuser's password while trust still lets us in, then make every pg_hba line scram."""
    import psycopg2

    _set_password(psycopg2.connect(c.url("postgres")), SUPERUSER, passwords(c)[SUPERUSER])
    hba = Path(c.datadir) / "pg_hba.conf"
    lines = [re.sub(r"\btrust\s*$", "scram-sha-256", line) if not line.lstrip().startswith("#") else line
             for line in hba.read_text().splitlines()]
    write_private(hba, "\n".join(lines) + "\n", c.run_as)
    _pg_ctl(c, "reload")


def _set_password(conn: Any, role: str, password: str) -> None:
    from psycopg2 import sql

    from streamops.paths import sql_dir

    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(sql.SQL((sql_dir() / "queries" / "role_password.sql").read_text()).format(
                            role=sql.Identifier(role)),
                        {"password": password})
    finally:
        conn.close()


def _ensure_roles(c: Cluster) -> None:
    """The login roles of store/roles.py, with their passwords from the file (set again on every
    `up`; a role the file lacks, from an older cluster, gets one); Airflow's database is its own."""
    roles.ensure_login_roles(c.url("postgres"))
    roles.ensure_owned_database(c.url("postgres"), AIRFLOW_DATABASE, roles.AIRFLOW)


def _start(c: Cluster) -> None:
    # TCP only: no Unix socket, so no socket-path length or permission trouble.
    iface = listen_interface()
    _ensure_hba(c, iface)
    listen = "127.0.0.1" if iface is None else f"127.0.0.1,{iface.ip}"
    # synchronous_commit=on, said even though it is the default: a commit is acknowledged once its
    # WAL is on disk, so a crash of the server loses none that a caller was told of (with `off`,
    # any backend's crash lost some). Only metrics and heartbeats opt out, per transaction
    # (db.transaction(durable=False), docs/ha.md).
    opts = (
        f"-p {c.port} -c listen_addresses={listen} -c unix_socket_directories='' "
        "-c max_connections=200 -c synchronous_commit=on -c shared_buffers=256MB"
    )
    _pg_ctl(c, "-o", opts, "-l", c.logfile, "-w", "-t", "60", "start")


def ensure_database(server_url: str, name: str) -> bool:
    """Create database `name` on the server `server_url` points at (connected through any of its
    databases) unless it exists. Returns whether it was created."""
    import psycopg2
    from psycopg2 import sql

    from streamops.paths import sql_dir

    def statement(n: str) -> str:  # raw text: psycopg2 params
        return (sql_dir() / "queries" / f"{n}.sql").read_text()
    conn = psycopg2.connect(server_url)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(statement("database_exists"), {"name": name})
            if cur.fetchone() is not None:
                return False
            cur.execute(sql.SQL(statement("database_create")).format(name=sql.Identifier(name)))
            return True
    finally:
        conn.close()


def _ensure_databases(c: Cluster) -> None:
    for name in DATABASES:
        ensure_database(c.url("postgres"), name)


def up() -> tuple[Cluster, bool]:
    """Start (or reuse) the embedded cluster. Returns the cluster and whether it was already running."""
    c = load_record()
    if c and c.passfile and is_running(c):
        _check_listening(c)
        _ensure_roles(c)
        _ensure_databases(c)
        return c, True
    owner = _owner()
    bindir = str(find_bindir())
    if c is None or not Path(c.datadir).exists():
        datadir = _pick_datadir(owner)
        c = Cluster(bindir=bindir, datadir=str(datadir), port=free_port(), run_as=owner, passfile=str(_new_passfile()))
        if not (Path(c.datadir) / "PG_VERSION").exists():
            _initdb(c)
        trust = False
    else:
        trust = c.passfile is None
        if c.passfile is not None and not Path(c.passfile).exists():
            raise EmbeddedPgError(f"the embedded PostgreSQL's password file {c.passfile} is missing: restore it, or "
                                  f"remove {Path(c.datadir).parent} and {_record_path()} "
                                  "to start from an empty cluster")
        running = is_running(c)
        c = Cluster(bindir=bindir, datadir=c.datadir, port=c.port if running else _recorded_port(c), run_as=c.run_as,
                    passfile=str(_new_passfile()) if trust else c.passfile)
        if running:  # a trust cluster from before passwords, still running: converted in place
            _convert_from_trust(c)
            _save_record(c)
            _ensure_roles(c)
            _ensure_databases(c)
            return c, True
    _save_record(c)
    _any_host_passfile(c)
    _start(c)
    _wait_accepting(c)
    if trust:
        _convert_from_trust(c)
    _ensure_roles(c)
    _ensure_databases(c)
    return c, False


def _check_listening(c: Cluster) -> None:
    """A running cluster listens where `STREAMOPS_PG_LISTEN` says, or says how to apply it (the
    server reads listen_addresses at start only)."""
    import psycopg2

    from streamops.paths import sql_dir

    iface = listen_interface()
    if iface is None:
        return
    conn = psycopg2.connect(c.url("postgres"))
    try:
        with conn.cursor() as cur:
            cur.execute((sql_dir() / "queries" / "listen_addresses.sql").read_text())
            listening = cur.fetchone()[0].split(",")
    finally:
        conn.close()
    if str(iface.ip) not in listening:
        raise EmbeddedPgError(f"the embedded PostgreSQL runs on {','.join(listening)} only, not {iface.ip} "
                              f"({LISTEN_ENV}): it reads its addresses at start; run `streamops db down` then "
                              "`streamops db up`")


def commits_wait_for_disk(c: Cluster) -> bool:
    """Whether the running cluster acknowledges a commit only once its WAL is on disk: one started
    by an earlier streamops ran with synchronous_commit off, which only a restart changes."""
    import psycopg2

    from streamops.paths import sql_dir

    conn = psycopg2.connect(c.url("postgres"))
    try:
        with conn.cursor() as cur:
            cur.execute((sql_dir() / "queries" / "synchronous_commit.sql").read_text())
            setting: str = cur.fetchone()[0]
            return setting != "off"
    finally:
        conn.close()


def _wait_accepting(c: Cluster, timeout_s: float = 30) -> None:
    import psycopg2

    from streamops.waiting import wait_until

    def accepting() -> bool:
        try:
            psycopg2.connect(c.url("postgres"), connect_timeout=2).close()
            return True
        except psycopg2.OperationalError:
            return False

    if not wait_until(accepting, timeout_s, interval_s=0.2):
        raise EmbeddedPgError(f"cluster did not accept connections within {timeout_s}s (log: {c.logfile})")


def down() -> bool:
    """Stop the cluster if it runs. Returns whether it was running."""
    c = load_record()
    if c is None or not is_running(c):
        return False
    _pg_ctl(c, "-m", "fast", "-w", "stop")
    return True
