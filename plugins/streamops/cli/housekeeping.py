"""`streamops gc | down`: housekeeping, and the whole platform stopped in order."""

from __future__ import annotations

import contextlib

import typer
from rich.table import Table

from streamops.cli.common import console, fail, load_registry, say

app = typer.Typer()


@app.command()
def gc(dry_run: bool = typer.Option(False, "--dry-run", help="list what would go; remove nothing"),
       metrics_days: int | None = typer.Option(None, "--metrics-days", min=1,
                                                  help="keep this many days of stage_metrics "
                                                       "(default: STREAMOPS_METRICS_RETENTION_DAYS or 30)"),
       records_days: int | None = typer.Option(None, "--records-days", min=1,
                                                  help="keep this many days of quarantine, commits, failed batches, "
                                                       "faults and commands (default: STREAMOPS_RECORDS_RETENTION_DAYS "
                                                       "or 90)"),
       log_days: float = typer.Option(14.0, "--log-days",
                                      help="keep the logs of runs that ended this recently")) -> None:
    """Housekeeping (the nightly DAG does the same): metrics partitions created a week ahead and
    the default partition drained, old rows of every growing table deleted, and the checkpoints
    (rollback copies, switched-from and half-written ones) and driver logs nothing needs removed."""
    from streamops.execute import housekeeping
    from streamops.report.retention import apply_retention
    from streamops.store import db

    try:
        files = housekeeping.collect(log_keep_days=log_days, dry_run=dry_run)
        t = Table(title=f"housekeeping{' (dry run: nothing removed)' if dry_run else ''}", header_style="bold")
        t.add_column("what")
        t.add_column("done", justify="right")
        if not dry_run:
            r = apply_retention(metrics_days, records_keep_days=records_days)
            t.add_row(f"stage_metrics partitions older than {r.keep_days} days dropped", str(len(r.dropped)))
            t.add_row("stage_metrics partitions created (a week ahead, missed days drained)", str(r.created))
            for table, n in r.deleted.items():
                t.add_row(f"{table} rows older than {r.records_keep_days} days deleted", f"{n:,}")
        t.add_row("checkpoint directories no run needs", str(len(files.checkpoints)))
        t.add_row(f"driver logs older than {log_days:g} days", str(len(files.logs)))
        t.add_row("live logs rotated (over 64 MB)", str(len(files.rotated)))
        t.add_row("disk freed" if not dry_run else "disk to free", f"{files.bytes / 1e6:,.1f} MB")
    except db.DatabaseUnavailable as e:
        fail(str(e))
    console.print(t)
    for path in files.checkpoints + files.logs if dry_run else []:
        console.print(f"  {path}")


@app.command()
def down(db_too: bool = typer.Option(False, "--db", help="also stop the embedded PostgreSQL")) -> None:
    """Stop Airflow and the supervisor, cancel every pending reconfiguration (with the reason),
    stop every running stage and background generator, then the embedded Spark cluster and the
    embedded Kafka broker."""
    from streamops import processes
    from streamops.execute import pending, replicas, stages, supervisor
    from streamops.orchestrate import airflow_home
    from streamops.store import db, embedded

    # Airflow first: its scheduler would otherwise let the watchdog restart what we stop.
    stopped = airflow_home.down(airflow_home.site())
    if stopped:
        say(f"Airflow stopped: {', '.join(stopped)}")
    # The supervisor next: it would restart the stages stopped below. Its pid file goes with it:
    # stopped on purpose, it is not to be restarted.
    sup_pid = processes.stop_pid_file(supervisor.pid_file(), grace_s=30)
    if sup_pid is not None:
        say(f"supervisor {sup_pid} stopped (its spares with it)")
    for sid in processes.stop_generators():
        say(f"generator {sid} stopped")
    try:
        # Nobody is left to run a pending change: cancelled, so that the next start does not run it unasked.
        pending.cancel_all("cancelled: the platform went down (streamops down) before it started; nothing was "
                           "changed; request it again", progress=say)
        reg = load_registry()
        live = [r.stage_id for r in db.rows("stage_status") if r.status in ("starting", "running", "stopping")]
        for sid in live:
            with contextlib.suppress(stages.StageNotRunning):
                replicas.stop_with_replicas(sid, reg, progress=say)
    except db.DatabaseUnavailable:
        pass
    from streamops import spark_cluster

    if spark_cluster.down():  # after the stages: their drivers stop their executors first
        say("embedded Spark cluster stopped")
    from streamops import kafka_broker

    if kafka_broker.down():  # after the stages: none reads or writes it any more
        say("embedded Kafka broker stopped")
    if db_too:
        say("embedded PostgreSQL stopped" if embedded.down() else "embedded PostgreSQL was not running")
