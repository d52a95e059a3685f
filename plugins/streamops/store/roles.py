"""The platform's PostgreSQL roles beside the superuser, and URLs that connect as them.

Each reader of the database gets only what it needs (issue 44 item 11), so a hole in one (an
injection in the page, a leaked exporter URL) cannot write or reach another's data:

- `streamops_reader`: analysts; SELECT on the `reporting` and `sinks` schemas (sql/reports/90_grants.sql).
- `streamops_observer`: the Streams page, `/metrics` and `streamops status` (store/observe);
  SELECT on the tables they show (sql/schema/041_observer_role.sql), no write, no function.
- `streamops_airflow`: Airflow's metadata; owns its database, no privilege on the platform's.

On the embedded cluster each has a password in the cluster's password file, which `db up`
generates and sets; elsewhere an administrator creates them (docs/architecture.md).
"""

from __future__ import annotations

import contextlib
import fcntl
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

from streamops.paths import sql_dir, write_private

READER = "streamops_reader"
OBSERVER = "streamops_observer"
AIRFLOW = "streamops_airflow"
LOGIN_ROLES = (READER, OBSERVER, AIRFLOW)


def names_passfile(url: str) -> bool:
    """Whether `url` takes its password from a libpq password file (the embedded cluster's URLs
    do): then every role's password is there, and the URL can switch role."""
    return "passfile" in parse_qs(urlsplit(url).query)


def passfile_of(url: str) -> Path | None:
    """The password file `url` names, or None."""
    found = parse_qs(urlsplit(url).query).get("passfile")
    return Path(found[0]) if found else None


def passfile_line(role: str, password: str) -> str:
    return f"*:*:*:{role}:{password}\n"


def read_passwords(path: Path) -> dict[str, str]:
    """Role → password, from a libpq password file."""
    fields = (line.split(":", 4) for line in path.read_text().splitlines())
    return {f[3]: f[4] for f in fields if len(f) == 5}


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One process at a time adds roles: two would each generate a password for a new one."""
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _statement(name: str) -> str:
    return (sql_dir() / "queries" / f"{name}.sql").read_text()  # raw text: psycopg2 parameters


def _superuser_session(url: str) -> Any:
    import psycopg2

    conn = psycopg2.connect(url)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(_statement("quiet_errors"))
    return conn


def ensure_login_roles(superuser_url: str) -> None:
    """Every role of LOGIN_ROLES exists with the password the URL's password file gives it; a
    role missing from the file gets one generated there first (0600). Its grants are the
    migrations'. `superuser_url` names a password file (the embedded cluster's)."""
    from psycopg2 import sql

    path = passfile_of(superuser_url)
    if path is None:
        raise ValueError("roles are made with the passwords of a password file: the URL names none")
    with _locked(path):
        known = read_passwords(path)
        missing = [r for r in LOGIN_ROLES if r not in known]
        if missing:
            text = path.read_text()
            text += ("" if not text or text.endswith("\n") else "\n")
            write_private(path, text + "".join(passfile_line(r, secrets.token_urlsafe(24)) for r in missing))
            known = read_passwords(path)
        conn = _superuser_session(superuser_url)
        try:
            with conn.cursor() as cur:
                for role in LOGIN_ROLES:
                    cur.execute(_statement("role_exists"), {"name": role})
                    name = "role_password" if cur.fetchone() else "login_role_create"
                    cur.execute(sql.SQL(_statement(name)).format(role=sql.Identifier(role)),
                                {"password": known[role]})
        finally:
            conn.close()


def ensure_owned_database(superuser_url: str, name: str, owner: str) -> bool:
    """Database `name` exists and is `owner`'s, with everything in it (a database made before
    its role is handed over). `superuser_url`: any database of the server. Returns whether it
    was created."""
    from psycopg2 import sql

    conn = _superuser_session(superuser_url)
    try:
        with conn.cursor() as cur:
            cur.execute(_statement("database_owner"), {"name": name})
            found = cur.fetchone()
            if found is not None and found[0] == owner:
                return False
            if found is None:
                cur.execute(sql.SQL(_statement("database_create_owned")).format(
                    name=sql.Identifier(name), owner=sql.Identifier(owner)))
    finally:
        conn.close()
    inside = _superuser_session(_with_database(superuser_url, name))
    try:
        with inside.cursor() as cur:
            cur.execute(sql.SQL(_statement("database_give")).format(
                name=sql.Identifier(name), owner=sql.Identifier(owner), owner_name=sql.Literal(owner)))
    finally:
        inside.close()
    return found is None


def _with_database(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


def as_role(url: str, role: str) -> str:
    """`url` connecting as `role`: same server, database and query, no password of its own
    (the password file supplies it)."""
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit(parts._replace(netloc=f"{role}@{host}"))
