"""`streamops kafka up | down | status`: the embedded Kafka broker (docs/kafka.md)."""

from __future__ import annotations

import os
import time

import typer
from rich.table import Table

from streamops.cli.common import console, fail

app = typer.Typer(help="The embedded Kafka broker (KRaft, SASL/SCRAM on loopback): docs/kafka.md.",
                  no_args_is_help=True)


@app.command("up")
def kafka_up(timeout: float = typer.Option(90, help="seconds to wait for the broker to answer"),
             host: str = typer.Option(None, envvar="STREAMOPS_KAFKA_HOST",
                                      help="the address the clients' listener binds and advertises, for drivers "
                                           "and executors on other hosts (default 127.0.0.1)")) -> None:
    """Start (or reuse) the embedded Kafka broker: one KRaft node on 127.0.0.1 (or --host), its
    port kept across restarts, clients authenticated by SASL/SCRAM-SHA-256
    (.streamops/kafka/credentials.json: copy it to the other hosts)."""
    from streamops import kafka_broker

    external = os.environ.get(kafka_broker.BOOTSTRAP_ENV)
    if external:
        console.print(f"external Kafka ({kafka_broker.BOOTSTRAP_ENV}): {external}; nothing started")
        return
    started = time.monotonic()
    try:
        with console.status("starting the Kafka broker …"):
            b, reused = kafka_broker.up(timeout_s=timeout, host=host)
    except kafka_broker.KafkaBrokerError as e:
        fail(str(e))
    console.print(f"Kafka broker {'already running' if reused else f'started in {time.monotonic() - started:.1f}s'}: "
                  f"{b.bootstrap} (SASL_PLAINTEXT, {kafka_broker.MECHANISM}), pid {b.pid}")


@app.command("down")
def kafka_down() -> None:
    """Stop the embedded broker (its topics, credentials and port are kept for the next `up`)."""
    from streamops import kafka_broker

    console.print("Kafka broker stopped" if kafka_broker.down() else "Kafka broker was not running")


@app.command("status")
def kafka_status(quiet: bool = typer.Option(False, "--quiet", "-q", help="no output; exit 0 only if running")) -> None:
    """Whether the broker runs and answers, its pid, bootstrap address, log directory and topics."""
    from streamops import kafka_broker

    external = os.environ.get(kafka_broker.BOOTSTRAP_ENV)
    s = {} if external else kafka_broker.status()
    if quiet:
        raise typer.Exit(0 if external or s.get("running") else 1)
    if external:
        console.print(f"external Kafka ({kafka_broker.BOOTSTRAP_ENV}): {external}")
        return
    if s.get("bootstrap") is None:
        fail("the embedded Kafka broker was never started; run `streamops kafka up`", 1)
    t = Table(show_header=False, box=None)
    t.add_row("running", "[green]yes[/]" if s["running"] else "[red]no[/]")
    for key in ("pid", "bootstrap", "controller_port", "log_dir", "logs", "topics"):
        t.add_row(key.replace("_", " "), "-" if s.get(key) is None else str(s[key]))
    console.print(t)
    if not s["running"]:
        raise typer.Exit(1)
