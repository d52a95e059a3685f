"""`streamops db up | down | status`: the PostgreSQL database, embedded or external, and its schema."""

from __future__ import annotations

import os

import typer

from streamops.cli.common import console, fail, say

app = typer.Typer(help="The PostgreSQL database: embedded cluster and schema.", no_args_is_help=True)


@app.command("up")
def db_up() -> None:
    """Start the embedded cluster (unless STREAMOPS_DATABASE_URL is set) and apply the schema."""
    from streamops.store import db, embedded, migrate

    try:
        if not os.environ.get("STREAMOPS_DATABASE_URL"):
            cluster, reused = embedded.up()
            say(f"embedded PostgreSQL {'already running' if reused else 'started'} on 127.0.0.1:{cluster.port} "
                 f"(data {cluster.datadir})")
            if reused and not embedded.commits_wait_for_disk(cluster):
                say("[yellow]warning:[/] it was started with synchronous_commit=off, so a crash of the server "
                     "loses commits it acknowledged: `streamops db down` then `streamops db up` restarts it with on")
            iface = embedded.listen_interface()
            if iface is not None:
                say(f"also on {iface.ip}, open to {iface.network}: on those hosts set STREAMOPS_DATABASE_URL="
                     f"{cluster.url(host=str(iface.ip))} (with a copy of that password file)")
        applied = migrate.apply()
    except (embedded.EmbeddedPgError, migrate.MigrationError, db.DatabaseUnavailable) as e:
        fail(str(e))
    names = ", ".join(m.path.name for m in applied)
    say(f"schema: {len(applied)} migration(s) applied" + (f": {names}" if applied else ", up to date"))
    console.print(db.libpq_url(db.database_url()))


@app.command("down")
def db_down() -> None:
    """Stop the embedded cluster (data is kept)."""
    from streamops.store import embedded

    say("embedded PostgreSQL stopped" if embedded.down() else "embedded PostgreSQL was not running")


@app.command("status")
def db_status(quiet: bool = typer.Option(False, "--quiet", "-q", help="no output; exit 0 only if running")) -> None:
    """Report the database and print its connection URL for psql and reporting tools. The embedded
    cluster's URL names its 0600 password file (`?passfile=`); an external URL's password is
    printed as *** (libpq reads it from PGPASSWORD or ~/.pgpass)."""
    from streamops.store import db, embedded

    if os.environ.get("STREAMOPS_DATABASE_URL"):
        if not quiet:
            console.print(f"external database (STREAMOPS_DATABASE_URL)\n{db.masked_url(db.database_url())}")
        return
    c = embedded.load_record()
    running = c is not None and embedded.is_running(c)
    if quiet:
        raise typer.Exit(0 if running else 1)
    if c is None:
        fail("embedded PostgreSQL was never created; run `streamops db up`", 1)
    console.print(f"embedded PostgreSQL: {'[green]running[/]' if running else '[red]stopped[/]'}; "
                  f"port {c.port}; data {c.datadir}; log {c.logfile}")
    console.print(c.url("streamops"))
    if not running:
        raise typer.Exit(1)
