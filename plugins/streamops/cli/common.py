"""What every command module shares: the consoles, one-line failures, the timestamped progress
line, the registry loaded (or a clear error), and the root group's handling of a database that
does not answer."""

from __future__ import annotations

from datetime import datetime
from typing import Any, NoReturn

import typer
from rich.console import Console
from typer.core import TyperGroup

from streamops import registry

console = Console(soft_wrap=True)  # long paths and messages stay on one line
err = Console(stderr=True, soft_wrap=True)


def fail(msg: str, code: int = 1) -> NoReturn:
    err.print(f"[bold red]error:[/] {msg}")
    raise typer.Exit(code)


def say(msg: str) -> None:
    console.print(f"[dim]{datetime.now():%H:%M:%S}[/] {msg}")


def load_registry() -> registry.Registry:
    try:
        return registry.load()
    except registry.RegistryError as e:
        fail(f"invalid registry:\n{e}", 2)


class Commands(TyperGroup):
    """Every command: a database that does not answer (refused, timed out, stalled) is one line
    and exit 1, not the ~500-line traceback of SQLAlchemy and psycopg2 (issue 48)."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except Exception as e:
            from streamops.store import db, observe

            if isinstance(e, observe.NOT_ANSWERING):
                fail(f"database not answering: {observe.reason(e)}")
            if isinstance(e, db.DatabaseUnavailable):  # none configured: its message says what to do
                fail(str(e))
            raise
