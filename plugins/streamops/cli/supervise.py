"""`streamops supervise | metrics`: the supervisor's fast failover, and the Prometheus metrics it
serves (docs/ha.md, docs/reporting.md)."""

from __future__ import annotations

import contextlib
import signal
import sys

import typer

from streamops.cli.common import fail, load_registry, say
from streamops.paths import state_dir

app = typer.Typer()


@app.command()
def supervise(poll: float = typer.Option(0.5, help="seconds between looks at the drivers"),
              stale: float = typer.Option(15.0, help="heartbeat age (s) that makes a driver hung"),
              duration: float | None = typer.Option(None, help="stop after this many seconds (default: run until "
                                                                   "Ctrl-C or SIGTERM)"),
              background: bool = typer.Option(False, "--background", help="detach; `streamops down` stops it"),
              no_spares: bool = typer.Option(False, "--no-spares",
                                             help="no warm spare drivers (cold restarts)")) -> None:
    """Fail over in seconds: restart any dead or hung driver (replicas too) from its checkpoint,
    keep a warm spare driver per single-replica stage of a local pool, keep each stage's replicas
    at their wanted count, and restart a dead Spark master or worker and dead Airflow components."""
    import threading

    from streamops import processes
    from streamops.execute import supervisor

    if background:
        running = processes.read_pid(supervisor.pid_file())
        if running is not None and processes.is_alive(running):
            say(f"the supervisor already runs (pid {running})")
            return
        args = ["--poll", f"{poll!r}", "--stale", f"{stale!r}", *(["--no-spares"] if no_spares else []),
                *([] if duration is None else ["--duration", f"{duration!r}"])]
        pid = supervisor.start_background(args)
        say(f"supervisor running in the background (pid {pid}, log {state_dir() / 'logs' / 'supervisor.log'}); "
             f"the watchdog DAG restarts it if it dies")
        return

    from streamops.orchestrate import airflow_home
    from streamops.report import prometheus

    stop_event = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop_event.set())
    sup = supervisor.Supervisor(load_registry(), supervisor.SupervisorOptions(
        poll_s=poll, stale_s=stale, warm_spares=not no_spares), progress=say,
        keepers=[airflow_home.ComponentKeeper(airflow_home.site())], exporter=prometheus.start_exporter)
    say(f"supervising every {poll:g}s (hung after {stale:g}s without a heartbeat); Ctrl-C to stop")
    try:
        sup.run(stop_event, duration)
    except KeyboardInterrupt:
        stop_event.set()
    supervisor.stopped_cleanly()
    say(f"supervisor stopped after {sup.recovered_count} recoveries")


@app.command()
def metrics(serve: bool = typer.Option(False, "--serve", help="serve /metrics on $STREAMOPS_METRICS_HOST:"
                                                              "$STREAMOPS_METRICS_PORT (127.0.0.1:9464) until Ctrl-C "
                                                              "or SIGTERM, without a supervisor")) -> None:
    """Print the Prometheus metrics once, as /metrics answers them (read from PostgreSQL now).
    The supervisor serves them; docs/reporting.md lists each one."""
    import threading

    from streamops.report import prometheus
    from streamops.store import db

    if not serve:
        try:
            db.database_url()
        except db.DatabaseUnavailable as e:
            fail(str(e))
        sys.stdout.write(prometheus.exposition())
        return
    settings = prometheus.Settings.from_env()
    if settings.port == 0:
        fail(f"{prometheus.PORT_ENV}=0: the exporter is off")
    try:
        exporter = prometheus.serve(settings.host, settings.port)
    except OSError as e:
        fail(f"cannot listen on {settings.host}:{settings.port}: {e.strerror or e}")
    stop_event = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop_event.set())
    say(f"serving {exporter.url}; Ctrl-C to stop")
    with contextlib.suppress(KeyboardInterrupt):
        stop_event.wait()
    exporter.close()
