"""Scratch databases: a fresh database of one's own on the server streamops uses (a test
session's, a benchmark's), dropped afterwards. The one place tests and bench/ get them."""

from __future__ import annotations

from streamops.store import db


def _on_server(server_url: str, statement: str, name: str) -> None:
    """Run `sql/queries/<statement>.sql` with the database name as an identifier, from the
    server's `postgres` database in autocommit (CREATE/DROP DATABASE refuse a transaction)."""
    from psycopg2 import sql

    if not name:
        raise ValueError("a scratch database needs a name")
    conn = db.writer_connection(db.with_database(server_url, "postgres"))
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(sql.SQL(db.query(statement).text).format(name=sql.Identifier(name)))
    finally:
        conn.close()


def recreate_database(server_url: str, name: str) -> str:
    """Database `name` on the server of `server_url`, empty (an old one is dropped, its sessions
    ended); its URL."""
    _on_server(server_url, "database_drop", name)
    _on_server(server_url, "database_create", name)
    return db.with_database(server_url, name)


def drop_database(server_url: str, name: str) -> None:
    """Drop database `name` (if it exists) on the server of `server_url`, ending its sessions."""
    _on_server(server_url, "database_drop", name)
