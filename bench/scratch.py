"""A scratch database of a benchmark's own on the server streamops uses, dropped afterwards."""

from __future__ import annotations

import psycopg2

from streamops.store import db


def scratch_database(name: str) -> tuple[str, str]:
    """(url of a fresh database `name`, url of the server's `postgres` database)."""
    server = db.libpq_url(db.database_url())
    admin = db.with_database(server, "postgres")
    conn = psycopg2.connect(admin)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        cur.execute(f'CREATE DATABASE "{name}"')
    conn.close()
    return db.with_database(server, name), admin


def drop_database(admin_url: str, name: str) -> None:
    conn = psycopg2.connect(admin_url)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    conn.close()
