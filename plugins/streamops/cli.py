"""`streamops`: the command line of the platform."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import typer
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text
from typer.core import TyperGroup

from streamops import registry
from streamops.cli_job import job_app, print_report, run_check
from streamops.cli_kafka import kafka_app
from streamops.paths import state_dir
from streamops.plan.mechanisms import RULES as MECHANISM_RULES
from streamops.plan.options import OperatorOptions


class _Commands(TyperGroup):
    """Every command: a database that does not answer (refused, timed out, stalled) is one line
    and exit 1, not the ~500-line traceback of SQLAlchemy and psycopg2 (issue 48)."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except Exception as e:
            from streamops.store import db, observe

            if isinstance(e, observe.NOT_ANSWERING):
                _fail(f"database not answering: {observe.reason(e)}")
            if isinstance(e, db.DatabaseUnavailable):  # none configured: its message says what to do
                _fail(str(e))
            raise


app = typer.Typer(help="Operations platform for streaming Spark applications.", no_args_is_help=True,
                  context_settings={"help_option_names": ["-h", "--help"]}, cls=_Commands)
db_app = typer.Typer(help="The PostgreSQL database: embedded cluster and schema.", no_args_is_help=True)
app.add_typer(db_app, name="db")
airflow_app = typer.Typer(help="The Airflow that runs the DAGs: metadata in the embedded PostgreSQL.",
                          no_args_is_help=True)
app.add_typer(airflow_app, name="airflow")
spark_app = typer.Typer(help="The embedded Spark standalone cluster that `embedded` pools run on.",
                        no_args_is_help=True)
app.add_typer(spark_app, name="spark")
app.add_typer(kafka_app, name="kafka")
app.add_typer(job_app, name="job")
console = Console(soft_wrap=True)  # long paths and messages stay on one line
err = Console(stderr=True, soft_wrap=True)


def _fail(msg: str, code: int = 1) -> None:
    err.print(f"[bold red]error:[/] {msg}")
    raise typer.Exit(code)


def _load_registry() -> registry.Registry:
    try:
        return registry.load()
    except registry.RegistryError as e:
        _fail(f"invalid registry:\n{e}", 2)


def _say(msg: str) -> None:
    console.print(f"[dim]{datetime.now():%H:%M:%S}[/] {msg}")


@app.callback()
def _main(verbose: bool = typer.Option(False, "--verbose", "-v", help="log at INFO level")) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


# -- db ----------------------------------------------------------------------------------------
@db_app.command("up")
def db_up() -> None:
    """Start the embedded cluster (unless STREAMOPS_DATABASE_URL is set) and apply the schema."""
    from streamops.store import db, embedded, migrate

    try:
        if not os.environ.get("STREAMOPS_DATABASE_URL"):
            cluster, reused = embedded.up()
            _say(f"embedded PostgreSQL {'already running' if reused else 'started'} on 127.0.0.1:{cluster.port} "
                 f"(data {cluster.datadir})")
            if reused and not embedded.commits_wait_for_disk(cluster):
                _say("[yellow]warning:[/] it was started with synchronous_commit=off, so a crash of the server "
                     "loses commits it acknowledged: `streamops db down` then `streamops db up` restarts it with on")
            iface = embedded.listen_interface()
            if iface is not None:
                _say(f"also on {iface.ip}, open to {iface.network}: on those hosts set STREAMOPS_DATABASE_URL="
                     f"{cluster.url(host=str(iface.ip))} (with a copy of that password file)")
        applied = migrate.apply()
    except (embedded.EmbeddedPgError, migrate.MigrationError, db.DatabaseUnavailable) as e:
        _fail(str(e))
    names = ", ".join(m.path.name for m in applied)
    _say(f"schema: {len(applied)} migration(s) applied" + (f": {names}" if applied else ", up to date"))
    console.print(db.libpq_url(db.database_url()))


@db_app.command("down")
def db_down() -> None:
    """Stop the embedded cluster (data is kept)."""
    from streamops.store import embedded

    _say("embedded PostgreSQL stopped" if embedded.down() else "embedded PostgreSQL was not running")


@db_app.command("status")
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
        _fail("embedded PostgreSQL was never created; run `streamops db up`", 1)
    console.print(f"embedded PostgreSQL: {'[green]running[/]' if running else '[red]stopped[/]'}; "
                  f"port {c.port}; data {c.datadir}; log {c.logfile}")
    console.print(c.url("streamops"))
    if not running:
        raise typer.Exit(1)


# -- spark -------------------------------------------------------------------------------------
@spark_app.command("up")
def spark_up(workers: int = typer.Option(1, min=0, help="workers to start here (0: they join from other machines "
                                                       "with `streamops spark worker`)"),
             cores: int = typer.Option(2, min=1, help="cores each worker offers to executors"),
             memory: str = typer.Option("4g", help="memory each worker offers to executors"),
             host: str = typer.Option("127.0.0.1", envvar="STREAMOPS_SPARK_HOST",
                                      help="the address the master and workers bind and advertise: loopback, or "
                                           "this machine's address on the cluster's network")) -> None:
    """Start (or reuse) a Spark master and workers, from the installed pyspark."""
    from streamops import spark_cluster

    started = time.monotonic()
    try:
        with console.status("starting the Spark master and workers …"):
            c, reused = spark_cluster.up(workers, cores, memory, progress=_say, host=host)
    except spark_cluster.SparkClusterError as e:
        _fail(str(e))
    _say(f"Spark cluster {'already running' if reused else f'started in {time.monotonic() - started:.1f}s'}: "
         f"{c.url}, UI {c.ui}")


@spark_app.command("worker")
def spark_worker(master: str = typer.Argument(..., metavar="MASTER", help="spark://host:port of the master"),
                 host: str = typer.Option(..., envvar="STREAMOPS_SPARK_HOST",
                                          help="this machine's address, as the master and the drivers reach it"),
                 cores: int = typer.Option(2, min=1, help="cores offered to executors"),
                 memory: str = typer.Option("4g", help="memory offered to executors"),
                 webui_port: int | None = typer.Option(None, help="the worker's web UI port (default Spark's 8081)"),
                 ) -> None:
    """Run a worker on this machine that joins MASTER, in the foreground (for systemd or a
    container). It needs the cluster's secret: the master's `.streamops/spark/conf/spark-defaults.conf`,
    copied to the same place here (docs/cluster.md)."""
    from streamops import spark_cluster

    try:
        argv, env = spark_cluster.worker_argv(master, host, cores, memory, webui_port)
    except spark_cluster.SparkClusterError as e:
        _fail(str(e))
    _say(f"worker on {host} joining {master} with {cores} cores and {memory}")
    sys.stdout.flush()
    os.execve(argv[0], argv, env)  # the worker's JVM takes this process: a signal to it reaches the worker


@spark_app.command("archive")
def spark_archive(rebuild: bool = typer.Option(False, "--rebuild", help="dump it again even if it exists"),
                  quiet: bool = typer.Option(False, "--quiet", "-q", help="print only errors")) -> None:
    """Build this venv's class archive of Spark's classes (once per venv and JDK, about 15 s):
    every driver and executor JVM then maps them instead of loading them from the jars.
    `make venv` runs it; STREAMOPS_JVM_ARCHIVE=off turns its use off."""
    from streamops import jvm_archive

    try:
        path = jvm_archive.build(force=rebuild, progress=(lambda _: None) if quiet else _say)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        _fail(f"class archive: {e}")
    if not quiet:
        _say(f"class archive: {path}" if path else "no class archive (no JDK found)")


@spark_app.command("down")
def spark_down() -> None:
    """Stop the embedded cluster's workers (and their executors), then its master."""
    from streamops import spark_cluster

    _say("Spark cluster stopped" if spark_cluster.down() else "Spark cluster was not running")


@spark_app.command("status")
def spark_status(quiet: bool = typer.Option(False, "--quiet", "-q", help="no output; exit 0 only if running")) -> None:
    """The master URL and UI, its workers, cores in use and applications."""
    from streamops import spark_cluster

    external = os.environ.get(spark_cluster.ENV_MASTER)
    c = spark_cluster.load_record()
    state = spark_cluster.master_state(c) if c is not None else None
    if quiet:
        raise typer.Exit(0 if external or (state or {}).get("status") == "ALIVE" else 1)
    if external:
        console.print(f"external cluster ({spark_cluster.ENV_MASTER}): {external}")
        return
    if c is None or state is None:
        _fail("the embedded Spark cluster is not running; run `streamops spark up`", 1)
    console.print(f"Spark master {c.url}: [green]{state.get('status')}[/]; UI {c.ui}; "
                  f"{state.get('aliveworkers', 0)} worker(s), {state.get('coresused', 0)} of {state.get('cores', 0)} "
                  f"cores in use; logs {spark_cluster.home() / 'logs'}")
    if not state.get("activeapps"):
        console.print("no applications running")
        return
    t = Table(title="applications", header_style="bold")
    for col in ("id", "name", "cores", "executor memory", "state", "running for"):
        t.add_column(col)
    for a in state.get("activeapps", []):
        t.add_row(a.get("id", ""), a.get("name", ""), str(a.get("cores", "")), f"{a.get('memoryperexecutor', '')} MB",
                  a.get("state", ""), f"{a.get('duration', 0) / 1000:.0f}s")
    console.print(t)


# -- airflow -----------------------------------------------------------------------------------
@airflow_app.command("up")
def airflow_up(wait: float = typer.Option(300, help="seconds to wait for Airflow to be healthy")) -> None:
    """Create and migrate Airflow's metadata database (first time), then start the api-server,
    scheduler, dag-processor and triggerer in the background. Prints the UI address and logins."""
    from streamops.orchestrate import airflow_home

    s = airflow_home.site()
    try:
        with console.status("migrating Airflow's metadata database …"):
            took = airflow_home.init(s)
        _say(f"Airflow metadata database {s.database!r} ready in {took:.0f}s")
        with console.status("starting Airflow …"):
            took = airflow_home.up(s, wait_s=wait, progress=_say)
    except (RuntimeError, TimeoutError) as e:
        _fail(str(e))
    _say(f"Airflow healthy {took:.0f}s after start")
    _print_logins(s)


def _print_logins(s) -> None:
    from streamops.orchestrate import airflow_home

    pw = airflow_home.passwords(s)
    console.print(f"Airflow UI: [bold]{s.base_url}[/]   logins (also in {airflow_home.passwords_file(s)}, mode 0600):")
    for user, role in airflow_home.USERS.items():
        console.print(f"  {user:<7} / {pw[user]}   ({role})")
    console.print(f"Airflow CLI by hand: [dim]source {s.home / 'env.sh'}[/]")


@airflow_app.command("logins")
def airflow_logins() -> None:
    """Print the UI address and the generated logins."""
    from streamops.orchestrate import airflow_home

    _print_logins(airflow_home.site())


@airflow_app.command("down")
def airflow_down() -> None:
    """Stop the Airflow processes (SIGTERM, then SIGKILL after 30 s)."""
    from streamops.orchestrate import airflow_home

    stopped = airflow_home.down(airflow_home.site())
    _say(f"Airflow stopped: {', '.join(stopped)}" if stopped else "Airflow was not running")


@airflow_app.command("status")
def airflow_status() -> None:
    """Which Airflow processes run, and what the API's health check says."""
    from streamops.orchestrate import airflow_home

    s = airflow_home.site()
    procs = airflow_home.running(s)
    for c in airflow_home.COMPONENTS:
        console.print(f"{c:<14} {'[green]pid ' + str(procs[c]) + '[/]' if c in procs else '[red]not running[/]'}"
                      f"   log {airflow_home.log_file(s, c)}")
    h = airflow_home.health(s)
    console.print(f"health: {h if h else 'the API does not answer at ' + s.base_url}")
    if not procs:
        raise typer.Exit(1)


@airflow_app.command("trigger")
def airflow_trigger(dag_id: str = typer.Argument(..., help="e.g. streamops_deploy"),
                    conf: str = typer.Option("{}", help="the run's conf, JSON (validated against the DAG's Params)"),
                    wait: bool = typer.Option(False, "--wait", help="poll until the run finishes"),
                    user: str = typer.Option("admin", help="login to use")) -> None:
    """Trigger a DAG run through the REST API, as the UI's form does."""
    import json

    from streamops.orchestrate import airflow_home
    from streamops.orchestrate.rest import AirflowAPIError, AirflowClient

    s = airflow_home.site()
    try:
        with AirflowClient(s.base_url, user, airflow_home.passwords(s)[user]) as api:
            api.wait_for_dags([dag_id], timeout_s=180)  # right after `airflow up` the files may be unparsed
            run = api.trigger(dag_id, json.loads(conf))
            _say(f"{dag_id}: run {run['dag_run_id']} {run['state']}")
            why = None
            if wait:
                run = api.wait(dag_id, run["dag_run_id"], progress=_say)
                if run["state"] != "success":  # the reason is in the failed task's log: say it here
                    why = api.failure(dag_id, run["dag_run_id"])
    except (AirflowAPIError, json.JSONDecodeError, TimeoutError) as e:
        _fail(str(e))
    except Exception as e:  # httpx connection errors: Airflow is not up
        _fail(f"cannot reach Airflow at {s.base_url}: {e} (start it with `streamops airflow up`)")
    if wait and run["state"] != "success":
        _fail(f"{dag_id}: run {run['dag_run_id']} {run['state']}" + (f": {why}" if why else ""))


# -- registry and stages -----------------------------------------------------------------------
@app.command()
def deploy(app_name: str = typer.Argument(..., metavar="APP", help="app name from apps.yaml"),
           start: bool = typer.Option(False, "--start", help="also start every stage that is not running"),
           check: bool = typer.Option(True, "--check/--no-check", help="run `job check` on each stage first "
                                                                      "and refuse a job that fails it"),
           upgrade: str = typer.Option("auto", help="how a running stage whose job or code changed is upgraded: "
                                                    "auto (active_backup when its pool has room beside it) | "
                                                    "active_backup | pause_resume | none (leave it running)")
           ) -> None:
    """Validate apps.yaml, check each stage's job (`streamops job check`), sync APP's pools, app
    and stage rows into PostgreSQL, and upgrade each running stage whose job or code changed (a
    reconfiguration, rolled back by the quality gate if the new version fails)."""
    from streamops.execute import stages

    reg = _load_registry()
    if app_name not in reg.apps:
        _fail(f"no app {app_name!r} in the registry; known apps: {', '.join(reg.apps)}", 2)
    for name in reg.apps[app_name].stages if check else []:
        with console.status(f"checking {app_name}.{name}'s job over a sample …"):
            report = run_check(f"{app_name}.{name}")
        table = getattr(reg.apps[app_name].stages[name].sink, "table", None)
        if table and not report.get("error"):
            from streamops.store import sink_tables

            try:
                sink_tables.ensure(table, f"{app_name}.{name}", [tuple(c) for c in report["output_schema"]],
                                   apply=False)
            except sink_tables.SinkTableMismatch as e:
                report["error"] = str(e)
        if report.get("error"):
            print_report(report)
            _fail(f"{app_name}.{name}: the job fails its check; nothing was deployed", 2)
        _say(f"{app_name}.{name}: job {report['job']} checked ("
             f"{'stateful: ' + ', '.join(report['state_operators']) if report['stateful'] else 'stateless'})")
    try:
        synced = stages.sync_registry(reg, [app_name])
    except registry.RegistryError as e:
        _fail(str(e), 2)
    _say(f"registry synced: app {app_name} with stages {', '.join(synced)}")
    if upgrade != "none":
        _upgrade_changed(reg, synced, upgrade)
    if start:
        for sid in synced:
            _start(sid, reg, None, None, 180)


def _upgrade_changed(reg, stage_ids: list[str], mechanism: str) -> None:
    """Each running stage whose job or code differs from its run's: an `upgrade` reconfiguration."""
    from streamops.execute import reconfigure
    from streamops.orchestrate.tasks import upgrade_changed

    try:
        outcomes = upgrade_changed(reg, stage_ids, mechanism, progress=_say)
    except (reconfigure.ReconfigurationBusy, ValueError) as e:
        _fail(f"upgrade not made: {e}")
    if any(o.status != "done" for o in outcomes):
        raise typer.Exit(1)


def _start(ref: str, reg, cores, partitions, wait_s) -> None:
    from streamops.execute import stages

    try:
        with console.status(f"starting {ref} …"):
            res = stages.start_stage(ref, reg, cores=cores, state_partitions=partitions, wait_s=wait_s, progress=_say)
    except (stages.AdmissionRefused, registry.RegistryError, RuntimeError, TimeoutError) as e:
        _fail(str(e))
    if res.already_running:
        _say(f"{res.stage_id} is already running (deployment {res.deployment_id}, pid {res.pid})")


@app.command()
def start(stage: str = typer.Argument(..., metavar="STAGE", help="app.stage (or a unique stage name)"),
          cores: int | None = typer.Option(None, help="start at these cores (default: what its input needs)"),
          partitions: int | None = typer.Option(None, help="override the state partitions (first run only)"),
          wait: float = typer.Option(180, help="seconds to wait for the driver to run; 0 = do not wait")) -> None:
    """Start a stage's driver (a detached local[cores] process), after checking the pool has room."""
    _start(stage, _load_registry(), cores, partitions, wait)


@app.command()
def stop(stage: str = typer.Argument(..., metavar="STAGE", help="app.stage (or a unique stage name)"),
         deadline: float = typer.Option(60, help="seconds to wait for a graceful stop before SIGTERM")) -> None:
    """Stop a stage (its replicas first) at a batch boundary; SIGTERM after --deadline, then SIGKILL."""
    from streamops.execute import replicas, stages

    reg = _load_registry()
    try:
        app_name, name, _ = reg.stage(stage)
        replicas.stop_with_replicas(registry.stage_id(app_name, name), reg, deadline_s=deadline, progress=_say)
    except (stages.StageNotRunning, registry.RegistryError) as e:
        _fail(str(e))


# -- high availability -------------------------------------------------------------------------
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

    pid_file = state_dir() / "run" / "supervisor.pid"
    if background:
        running = processes.read_pid(pid_file)
        if running is not None and processes.is_alive(running):
            _say(f"the supervisor already runs (pid {running})")
            return
        args = [a for a in sys.argv[sys.argv.index("supervise") + 1:] if a != "--background"] \
            if "supervise" in sys.argv else []
        pid = supervisor.start_background(args)
        _say(f"supervisor running in the background (pid {pid}, log {state_dir() / 'logs' / 'supervisor.log'}); "
             f"the watchdog DAG restarts it if it dies")
        return

    from streamops.orchestrate import airflow_home
    from streamops.report import prometheus

    stop_event = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop_event.set())
    sup = supervisor.Supervisor(_load_registry(), supervisor.SupervisorOptions(
        poll_s=poll, stale_s=stale, warm_spares=not no_spares), progress=_say,
        keepers=[airflow_home.ComponentKeeper(airflow_home.site())], exporter=prometheus.start_exporter)
    _say(f"supervising every {poll:g}s (hung after {stale:g}s without a heartbeat); Ctrl-C to stop")
    try:
        sup.run(stop_event, duration)
    except KeyboardInterrupt:
        stop_event.set()
    supervisor.stopped_cleanly()
    _say(f"supervisor stopped after {sup.recovered_count} recoveries")


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
            _fail(str(e))
        sys.stdout.write(prometheus.exposition())
        return
    settings = prometheus.Settings.from_env()
    if settings.port == 0:
        _fail(f"{prometheus.PORT_ENV}=0: the exporter is off")
    try:
        exporter = prometheus.serve(settings.host, settings.port)
    except OSError as e:
        _fail(f"cannot listen on {settings.host}:{settings.port}: {e.strerror or e}")
    stop_event = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop_event.set())
    _say(f"serving {exporter.url}; Ctrl-C to stop")
    with contextlib.suppress(KeyboardInterrupt):
        stop_event.wait()
    exporter.close()


@app.command()
def fault(stage: str = typer.Argument(..., metavar="STAGE", help="app.stage (or a unique stage name)"),
          kind: str = typer.Option(..., help="slow_batch | driver_kill | executor_kill | heartbeat_cut | db_outage"),
          magnitude: float = typer.Option(5.0, help="seconds of pause, cut or outage (mean, with --mtbf)"),
          sd: float = typer.Option(1.0, help="standard deviation of the magnitude (with --mtbf)"),
          mtbf: float | None = typer.Option(None, help="keep injecting: mean seconds between faults "
                                                           "(exponential gaps); default: one fault now"),
          duration: float = typer.Option(600, help="with --mtbf: for how many seconds"),
          replica: str | None = typer.Option(None, help="the replica to hit (primary, replica-1, …); "
                                                           "default: a random running one"),
          seed: int | None = typer.Option(None, help="with --mtbf: the same seed injects the same faults")) -> None:
    """Inject faults into a running stage; each is recorded (`injected_faults`) so reports tell
    injected failures from real ones."""
    from streamops.execute import faults

    try:
        app_name, name, _ = _load_registry().stage(stage)
    except registry.RegistryError as e:
        _fail(str(e))
    sid = registry.stage_id(app_name, name)
    try:
        if mtbf is None:
            s = faults.send(sid, kind, magnitude if kind in registry.TIMED_FAULTS else None, role=replica)
            _say(f"{sid}: {kind} → {s.role or 'nobody'}: {s.outcome}")
            return
        spec = registry.Fault(kind=kind, mtbf_s=mtbf, magnitude_s=magnitude, magnitude_sd_s=sd)
        sent = faults.run_schedule(sid, [spec], duration, seed=seed, progress=_say)
        _say(f"{sid}: {len(sent)} fault(s) injected in {duration:g}s")
    except (ValueError, LookupError) as e:
        _fail(str(e))


# -- control loop ------------------------------------------------------------------------------
@app.command()
def replan(app_name: str | None = typer.Argument(None, metavar="[APP]", help="one app; default: every app"),
           dry_run: bool = typer.Option(False, "--dry-run",
                                        help="recommend only: record requests and decisions, plan nothing"),
           operators: bool = typer.Option(True, help="also run the stages' Operator Managers first "
                                                     "(as their drivers do)")) -> None:
    """Run one control cycle: Operator Managers request, each Application Manager grants, and
    grants become `pending` reconfigurations. Prints the decisions."""
    from streamops import control
    from streamops.store import db

    try:
        report = control.replan(app_name, dry_run=dry_run, operators=operators, decided_by="cli")
    except (LookupError, db.DatabaseUnavailable) as e:
        _fail(str(e))
    t = Table(title=f"re-plan{' (dry run: nothing planned)' if dry_run else ''} · "
                    f"{report.stages_analyzed} stage window(s), {len(report.requests)} request(s), "
                    f"{report.seconds['total_s'] * 1000:.0f} ms", header_style="bold")
    for col in ("app", "stage", "action", "target", "outcome", "reason", "gain", "cost s", "tokens", "plan"):
        t.add_column(col)
    colors = {"granted": "green", "declined": "red", "deferred": "yellow"}
    for r in control.to_rows(report):
        plan = f"#{r['reconfiguration']} pending" if r["reconfiguration"] else (
            f"until {r['defer_until']:%Y-%m-%d %H:%M}" if r["defer_until"] else "")
        t.add_row(r["app"], r["stage"], r["action"], str(r["target"] or ""),
                  f"[{colors[r['outcome']]}]{r['outcome']}[/]", r["reason"], f"{r['gain']:.3g}",
                  f"{r['cost_ms'] / 1000:.1f}", r["tokens"], plan)
    if not t.rows:
        t.caption = "no requests to decide: every stage is within its thresholds (or its window is not full yet)"
    console.print(t)


@app.command()
def reconfigure(
    stage: str | None = typer.Argument(None, metavar="[STAGE]", help="app.stage to change now"),
    action: str = typer.Option("scale_out", help="scale_out | scale_in | migrate | upgrade (the registry's job and "
                                                 "code for the running stage) (scale-out is read as scale_out)"),
    cores: int | None = typer.Option(None, help="target cores (within the stage's min/max)"),
    partitions: int | None = typer.Option(None, help="target state partitions (offline repartition)"),
    pool: str | None = typer.Option(None, help="target pool (migration)"),
    mechanism: str = typer.Option("auto", help="auto (the cost rule, as for a policy's grant: the smallest outage the "
                                               f"resources allow) | {' | '.join(MECHANISM_RULES)} "
                                               "(docs/reconfiguration.md)"),
    pending: bool = typer.Option(False, "--pending", help="realize every pending reconfiguration (granted by replan)"),
    resume: bool = typer.Option(False, "--resume", help="also finish or roll back what a dead executor left running"),
    wait: bool = typer.Option(True, "--wait/--no-wait",
                              help="realize it now and show each phase (default), or only record it as pending "
                                   "for `--pending` within 10 min, or a scale-in or migration for its app's next "
                                   "maintenance window; later it is cancelled as stale"),
) -> None:
    """Realize a reconfiguration: persisted as pending first, then stop at a batch boundary,
    copy the checkpoint, repartition offline, restart; roll back if the new run fails."""
    from streamops import quality
    from streamops.execute import reconfigure
    from streamops.plan.change import InvalidChange

    reg = _load_registry()
    outcomes = []
    try:
        if stage:
            rid = reconfigure.request(stage, action, cores=cores, partitions=partitions, pool=pool, mechanism=mechanism,
                                      reg=reg)
            _say(f"reconfiguration {rid} recorded as pending")
            if not wait:
                return
            outcomes.append(reconfigure.execute_requested(rid, gate=quality.gate_new_run, reg=reg, progress=_say))
        elif pending or resume:
            outcomes += reconfigure.resume(reg, progress=_say, gate=quality.gate_new_run)
        else:
            _fail("name a STAGE, or use --pending / --resume", 2)
    except InvalidChange as e:  # refused before anything was recorded or stopped
        _fail(str(e), 2)
    except (reconfigure.ReconfigurationBusy, ValueError, LookupError, registry.RegistryError) as e:
        _fail(str(e))
    t = Table(title="reconfigurations", header_style="bold")
    for col in ("id", "stage", "status", "output gap s", "took s", "detail"):
        t.add_column(col)
    for o in outcomes:
        color = {"done": "green", "rolled_back": "yellow"}.get(o.status, "red")
        t.add_row(str(o.reconfiguration_id), o.stage_id, f"[{color}]{o.status}[/]",
                  "–" if o.downtime_ms is None else f"{o.downtime_ms / 1000:.1f}", f"{o.seconds:.1f}", o.detail)
    console.print(t)
    if any(o.status == "failed" for o in outcomes):
        raise typer.Exit(1)


@app.command()
def prestage(stage: str = typer.Argument(..., metavar="STAGE", help="a running app.stage"),
             partitions: int | None = typer.Option(None, help="repartition the copy to this many state "
                                                                 "partitions")) -> None:
    """Copy the running stage's checkpoint (consistent as of its last committed batch) and
    repartition the copy, so that a later scale-out skips both."""
    from streamops.execute import staging

    try:
        with console.status(f"pre-staging {stage} …"):
            staged = staging.prestage(stage, partitions, _load_registry(), progress=_say)
    except (RuntimeError, ValueError, registry.RegistryError) as e:
        _fail(str(e))
    _say(f"staged copy {staged.path} (batch {staged.as_of_batch}, {staged.partitions} partitions)")


@app.command()
def release(stage: str = typer.Argument(..., metavar="STAGE", help="app.stage")) -> None:
    """Discard the stage's pre-staged checkpoint copy (the alarm cleared)."""
    from streamops.execute import staging

    try:
        found = staging.release(stage, _load_registry())
    except registry.RegistryError as e:
        _fail(str(e))
    _say("staged copy discarded" if found else "nothing was pre-staged")


@app.command()
def sim(policy: str = typer.Option("recommended", help="a named configuration (see --help of `streamops bench`) "
                                                         "or edf|threshold3|ds2|mpc"),
        trace: str = typer.Option("diurnal", help="diurnal, ramp, steps, spikes, a generator spec, a CSV "
                                                   "file with columns t_s,rate (or a stage_metrics export), or "
                                                   "suite:<family>:<seed>, a trace of the suite: <family> is "
                                                   "diurnal_noise, flash_crowd, outage, step_drift, weekly_growth, "
                                                   "pareto_bursts, real_export or issue15_day (held out); seeds "
                                                   "1-3 are the training split, 101-103 the test split (`streamops "
                                                   "bench suite` tunes on the first and reports on the second)"),
        seed: int = typer.Option(1, help="seed of every random draw: same seed, same result"),
        duration: float | None = typer.Option(None, help="seconds to simulate (default: the trace's own)"),
        out: Path = typer.Option(Path("sim-out"), help="writes DIR/summary.json and DIR/response.png"),
        faults: str | None = typer.Option(None, help="fault injector on every stage, e.g. "
                                                         "'driver_kill:mtbf_s=120;slow_batch:mtbf_s=60,magnitude_s=3'"),
        replicas: int | None = typer.Option(None, min=1, max=4, help="static replicas of every stage"),
        redundancy: bool = typer.Option(False, "--redundancy", help="the redundancy manager sets the replicas"),
        restart_s: float | None = typer.Option(None, help="seconds a killed driver takes to come back "
                                                              "(default 10)"),
        slo_price: float | None = typer.Option(None, min=0, help="the price of one second above R_max in "
                                                                     "core-seconds, for --policy mpc (default "
                                                                     f"{OperatorOptions().slo_price:g})"),
        bound: bool = typer.Option(False, "--bound", help="also the clairvoyant bound of the trace: DIR/frontier.csv "
                                                          "and DIR/frontier.png, with the policy's run as a point and "
                                                          "its regret (docs/policies.md §14)"),
        calibrate: str | None = typer.Option(None, "--calibrate", metavar="STAGE_ID",
                                                help="instead of a policy run: fit the model to this stage's real "
                                                     "run in the database and replay it (DIR/calibration.json, .png)"),
        since: str | None = typer.Option(None, help="with --calibrate: the run from this time (ISO 8601)"),
        until: str | None = typer.Option(None, help="with --calibrate: … until this time (default: its last batch)"),
        minutes: float | None = typer.Option(None, help="with --calibrate: the last N minutes of its batches"),
        export_trace: Path | None = typer.Option(None, help="with --calibrate: also write the run's stage_metrics "
                                                               "as a CSV trace (what --trace replays)")) -> None:
    """Run the real Operator and Application Manager code against a model of the stages, on a
    load trace, and report availability, seconds above R_max, reconfigurations and core-hours;
    with faults, replicas or the redundancy manager also violated 1 s windows, MTTR and replica-hours.
    The trace suite (docs/policies.md §13) has seeded families with a train/test split: seeds 1-3
    train, 101-103 test; `streamops bench suite` tunes on the training seeds only and reports every
    configuration on the test seeds. With --calibrate STAGE_ID: the simulator checked against a
    real run instead (docs/policies.md §11.4)."""
    if calibrate:
        return _sim_calibrate(calibrate, since, until, minutes, out, export_trace, seed)
    from streamops.sim import POLICY_CONFIGS, run_simulation

    known = {**POLICY_CONFIGS}
    if policy not in known and policy not in ("edf", "threshold3", "ds2"):
        _fail(f"unknown policy {policy!r}; named configurations: {', '.join(known)}", 2)
    with console.status(f"simulating {policy} on {trace} …"):
        try:
            summary = run_simulation(policy if policy in known else known["recommended"], trace, seed=seed,
                                     out_dir=out, duration_s=duration, faults=faults, replicas=replicas,
                                     redundancy=redundancy or None,
                                     **({} if policy in known else {"operator": policy}),
                                     **({} if restart_s is None else {"restart_s": restart_s}),
                                     **({} if slo_price is None else {"slo_price": slo_price}))
        except (ValueError, FileNotFoundError) as e:
            _fail(str(e), 2)
    t = Table(title=f"{summary['policy']} on {summary['trace']} (seed {seed})", show_header=False)
    for key in ("availability", "downtime_s", "seconds_above_rmax", "violated_windows", "reconfigurations",
                "core_hours", "convergence_decisions"):
        v = summary[key]
        t.add_row(key, f"{v:.4%}" if key == "availability" else (f"{v:,.2f}" if isinstance(v, float) else str(v)))
    ha = (summary.get("ha") or {}).get("total") or {}
    for key, v in ha.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            t.add_row(f"ha.{key}", f"{v:,.2f}" if isinstance(v, float) else str(v))
    console.print(t)
    _say(f"wrote {out / 'summary.json'} and {out / 'response.png'}")
    if bound:
        _sim_bound(summary, policy if policy in known else "recommended", trace, duration, out)


def _sim_bound(summary: dict, policy: str, trace: str, duration: float | None, out: Path) -> None:
    """`sim --bound`: the trace's clairvoyant frontier, the policy's run on it, its regret."""
    import csv

    from streamops.sim import SimConfig, load_trace, resolve_policy
    from streamops.sim.bound import frontier, model_from_sim, regret, window_open_mask
    from streamops.sim.frontier_chart import Panel, plot_frontiers

    tr = load_trace(trace)
    T = int(duration if duration is not None else tr.default_duration_s)
    cfg = SimConfig()
    model = model_from_sim(cfg, resolve_policy(policy).app_opts())  # the policy's own bucket
    with console.status(f"the clairvoyant bound of {trace} ({T} s, {T // model.window_s} intervals) …"):
        front = frontier([tr.rows(t) for t in range(T)], model, window_open_mask(cfg, T, model.window_s))
    with (out / "frontier.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["core_hours", "seconds_above_rmax", "changes", "price"])
        w.writeheader()
        w.writerows(front.rows())
    point = (summary["core_hours"], summary["seconds_above_rmax"])
    plot_frontiers([Panel(trace, front, {summary["policy"]: point})], out / "frontier.png",
                   f"the clairvoyant frontier of {trace} and {summary['policy']}")
    r = regret(front, *point)
    t = Table(title=f"{summary['policy']} against the clairvoyant bound ({len(front.points)} frontier points)",
              show_header=False)
    t.add_row("core-hours / bound at its seconds above R_max", f"{point[0]:.2f} / {r['bound_core_hours']}")
    t.add_row("seconds above R_max / bound at its core-hours", f"{point[1]} / {r['bound_seconds_above']}")
    t.add_row("core regret (share of its core-hours a clairvoyant saves)",
              "beyond the bound" if r["core_regret"] is None else f"{r['core_regret']:.1%}")
    t.add_row("violation regret (share of its seconds above it avoids)",
              "beyond the bound" if r["violation_regret"] is None else f"{r['violation_regret']:.1%}")
    console.print(t)
    _say(f"wrote {out / 'frontier.csv'} and {out / 'frontier.png'}")


def _sim_calibrate(stage_id: str, since: str | None, until: str | None, minutes: float | None, out: Path,
                   export_trace: Path | None, seed: int) -> None:
    """`sim --calibrate`: measured vs simulated, the calibrated parameters, the files written."""
    from streamops.sim.calibrate import calibrate_and_replay
    from streamops.sim.rundata import RunData
    from streamops.sim.rundata import export_trace as write_trace
    from streamops.store.db import DatabaseUnavailable
    from streamops.store.runs import stage_run

    def when(v: str | None, name: str) -> datetime | None:
        if v is None:
            return None
        try:
            d = datetime.fromisoformat(v.replace("Z", "+00:00"))
        except ValueError:
            _fail(f"--{name}: not an ISO 8601 time: {v!r}", 2)
        return d if d.tzinfo else d.replace(tzinfo=UTC)

    if since and minutes:
        _fail("give --since or --minutes, not both", 2)
    try:
        run = RunData(**stage_run(stage_id, since=when(since, "since"), until=when(until, "until"), minutes=minutes))
        with console.status(f"calibrating on {stage_id}: {len(run.metrics)} batches, {run.duration_s} s …"):
            res = calibrate_and_replay(run, out_dir=out, seed=seed)
    except DatabaseUnavailable as e:
        _fail(str(e))
    except ValueError as e:
        _fail(str(e), 2)
    t = Table(title=f"{stage_id} {res['from']} … {res['to']}: measured vs simulated")
    for col in ("", "measured", "simulated", "error"):
        t.add_column(col, justify="left" if not col else "right")
    for key, r in res["comparison"].items():
        fmt = (lambda v: f"{v:.3%}") if key in ("availability", "availability_accounting", "share_within_rmax",
                                                "response_series_mape") \
            else (lambda v: f"{v:,.1f}")
        t.add_row(key, "" if r["measured"] is None else fmt(r["measured"]),
                  "" if r["simulated"] is None else fmt(r["simulated"]),
                  "" if r["error"] is None else f"{r['error']:+.1%}")
    console.print(t)
    cal = res["calibrated"]
    p = Table(title="calibrated model", show_header=False)
    for key in ("rate_per_core", "batch_overhead_ms", "base_latency_ms", "trigger_interval_s", "max_batch_rows",
                "state_bytes", "rows_per_busy_core_s", "batches_fitted", "batches_steady"):
        p.add_row(key, str(cal[key]))
    for mech, costs in cal["restart_costs"].items():
        p.add_row(f"restart {mech}", ", ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}"
                                               for k, v in costs.items() if v is not None))
    for c in res.get("restart_costs_replayed", []):
        p.add_row(f"replayed {c['mechanism']} at {c['t_s']:.0f} s",
                  f"{c['downtime_s']:.1f} s from {c['downtime_source']} ({c['downtime_detail']}); "
                  f"own gap {c['own_gap_s']:.1f} s")
    console.print(p)
    if export_trace is not None:
        _say(f"wrote {write_trace(run, export_trace)} ({len(run.metrics)} batches)")
    _say(f"wrote {res['calibration_json']} and {res['calibration_png']}")


@app.command()
def bench(what: str = typer.Argument("all", help="policies | suite | scale | reconfig | reporting | sink | ha | "
                                                  "ha-sim | jvm-archive | spark-ui | rpc-crypto | upgrade | kafka | "
                                                  "soak | all "
                                                  "(soak is not in all: it takes an hour)"),
          quick: bool = typer.Option(False, help="fewer seeds, a smaller scale run, 10k state keys only"),
          cluster: bool = typer.Option(False, help="reconfig and ha on the embedded Spark cluster: live and "
                                                   "in-driver changes, first batches, executor kills, MTTR on "
                                                   "a cluster pool")) -> None:
    """Benchmarks: the policy comparison in the simulator, the trace suite (tuned on training
    seeds, reported on test seeds, each configuration's regret against the clairvoyant bound),
    replicas and the redundancy manager in the simulator (ha-sim), one control cycle over 10 000 stages
    in PostgreSQL, reconfiguration downtime per mechanism and state size, the sink's staged
    write against a direct upsert, failover and replicas under injected faults (the last
    two long: real drivers), cold Spark JVMs with and without the class archive, and a stage's
    batch time, memory and CPU with its Spark UI on and off (spark-ui), the cost of Spark RPC
    encryption on the embedded cluster (rpc-crypto: shuffle and result throughput, a stage's
    batch time), the Kafka demo app's drain rate and latency at 1, 2 and 4 cores against the
    same job on files (kafka). `soak`
    runs two stages on the embedded cluster for an hour of random real faults (--quick: 5
    minutes). Results go to bench/results/*.json; a table is printed."""
    from streamops.paths import REPO_ROOT

    scripts = {"policies": ["bench/policies.py"] + (["--seeds", "1"] if quick else []),
               "scale": ["bench/scale.py"] + (["--apps", "100", "--runs", "3"] if quick else []),
               "reconfig": ["bench/reconfig.py"] + (["--quick"] if quick else []),
               "reporting": ["bench/reporting.py"] + (["--stages", "10,50", "--runs", "1"] if quick else []),
               "sink": ["bench/sink.py"] + (["--sizes", "2000,20000"] if quick else []),
               "ha": ["bench/ha.py"] + (["--quick"] if quick else []),
               "ha-sim": ["bench/ha_sim.py"],
               "suite": ["bench/suite.py"] + (["--quick"] if quick else []),
               "jvm-archive": ["bench/jvm_archive.py"] + (["--runs", "2"] if quick else []),
               "spark-ui": ["bench/spark_ui.py"] + (["--runs", "1", "--batches", "10"] if quick else []),
               "rpc-crypto": ["bench/rpc_crypto.py"] + (["--rounds", "2", "--runs", "1"] if quick else []),
               "upgrade": ["bench/upgrade.py"] + (["--runs", "2"] if quick else []),
               "kafka": ["bench/kafka.py"] + (["--quick"] if quick else []),
               "soak": ["bench/soak.py"] + (["--minutes", "5", "--fault-every", "40"] if quick else [])}
    if cluster:
        scripts["reconfig"].append("--cluster")
        scripts["ha"].append("--cluster")
        scripts["jvm-archive"].append("--cluster")
    if what not in (*scripts, "all"):
        _fail(f"unknown benchmark {what!r}; choose {', '.join(scripts)} or all", 2)
    for name, cmd in scripts.items():
        if what == name or (what == "all" and name != "soak"):
            rc = subprocess.call([sys.executable, *cmd], cwd=REPO_ROOT)
            if rc:
                raise typer.Exit(rc)


# -- generator ---------------------------------------------------------------------------------
@app.command()
def gen(stage: str | None = typer.Argument(None, metavar="STAGE", help="app.stage whose input directory to feed "
                                                                          "(with --stop: the one to stop; none: all)"),
        trace: str = typer.Option("constant:rate=100", help="rate trace, e.g. 'ramp:start_rate=200,doubling_s=500'"),
        duration: float = typer.Option(60, help="seconds to generate"),
        seed: int = typer.Option(1, help="seed: same seed and start, same files"),
        garbage: float = typer.Option(0.0, help="fraction of malformed records (0.01 = 1 %)"),
        tick: float = typer.Option(1.0, help="seconds per published file"),
        fast: bool = typer.Option(False, help="write all files at once instead of pacing in real time"),
        background: bool = typer.Option(False, help="detach and log under .streamops/logs"),
        partitions: int | None = typer.Option(None, min=1, help="a Kafka stage's topic, when gen creates it: its "
                                                                   "partitions (default: source.partitions, else 4)"),
        stop: bool = typer.Option(False, "--stop", help="stop the background generator of STAGE (none: all of them); "
                                                        "the stages keep running")) -> None:
    """Write replayable JSON files into a stage's input directory at a rate that follows a trace; for a
    Kafka stage, produce each line as a message to its topic (keyed by the record's id)."""
    from streamops import generator

    if stop:
        stopped = _stop_generators(stage)
        if not stopped:
            _say(f"no background generator{f' of {stage}' if stage else ''} is running")
        return
    if stage is None:
        _fail("STAGE is required (app.stage), unless --stop", 2)
    reg = _load_registry()
    try:
        app_name, name, st = reg.stage(stage)
        generator.parse_trace(trace)
    except (registry.RegistryError, ValueError) as e:
        _fail(str(e), 2)
    sid = registry.stage_id(app_name, name)
    kind = generator.kind_for(st.record_schema)
    if kind is None or st.record_schema.format != "json":
        _fail(f"{sid}: the generator writes JSON records of the kinds {', '.join(generator.KINDS)} "
              f"({', '.join(f'{k}: {s.ddl}' for k, s in generator.SCHEMAS.items())}); this stage's source is "
              f"{st.record_schema.format} of ({st.record_schema.ddl}): feed it with your own producer", 2)
    if background:
        _spawn_generator(sid, sys.argv)
        return
    if st.source.kind == "kafka":
        from streamops import kafka_broker

        topic = st.source.topic
        out = registry.resolve_path(f"_kafka/{topic}")  # the manifest: the ground truth, and where a resume goes on
        conf = {**kafka_broker.client_settings(st.source.bootstrap_servers).librdkafka(), "log_level": 0}
        n = partitions or st.source.partitions or generator.topic.DEFAULT_PARTITIONS
        write = functools.partial(generator.produce_to_topic, out, conf, topic, partitions=n)
        where = f"topic {topic} (created with {n} partitions if missing; manifest {out})"
    else:
        out = registry.resolve_path(st.source.path)
        write, where = functools.partial(generator.generate, out), str(out)
    _say(f"{sid}: writing {kind} records to {where} ({trace}, {duration:.0f}s, seed {seed})")

    def on_tick(entry: dict) -> None:
        if entry["tick"] % 10 == 0:
            _say(f"{sid}: tick {entry['tick']}: {entry['rows']} rows ({entry['garbage']} malformed) → "
                 f"{entry.get('topic') or entry['file']}")

    stop_event = __import__("threading").Event()
    signal.signal(signal.SIGTERM, lambda *_: stop_event.set())
    try:
        summary = write(kind, trace, seed=seed, duration_s=duration, tick_s=tick,
                        garbage_fraction=garbage, realtime=not fast, on_tick=on_tick,
                        stop_event=stop_event, start=None if not fast else datetime.now(UTC))
    except KeyboardInterrupt:
        _say(f"{sid}: generator interrupted")
        return
    unit = "ticks" if st.source.kind == "kafka" else "files"
    _say(f"{sid}: {summary.files} {unit}, {summary.rows} rows ({summary.garbage} malformed) in {summary.elapsed:.1f}s")


def _spawn_generator(sid: str, argv: list[str]) -> None:
    from streamops import processes

    log_path = state_dir() / "logs" / f"gen-{sid}.log"
    args = [a for a in argv[1:] if a != "--background"]
    proc = processes.spawn_detached([sys.executable, "-m", "streamops.cli", *args], log_path=log_path,
                                    pid_file=state_dir() / "run" / f"gen-{sid}.pid")
    _say(f"{sid}: generator running in the background (pid {proc.pid}, log {log_path})")


def _stop_generators(sid: str | None = None) -> list[str]:
    """SIGTERM the background generator of `sid` (None: every one); each finishes its tick and exits."""
    from streamops import processes

    run_dir = state_dir() / "run"
    stopped = []
    for pid_file in sorted(run_dir.glob(f"gen-{sid or '*'}.pid")) if run_dir.exists() else []:
        pid = processes.read_pid(pid_file)
        if pid is not None and processes.is_alive(pid) and processes.send(pid, signal.SIGTERM):
            name = pid_file.stem.removeprefix("gen-")
            stopped.append(name)
            _say(f"generator {name} stopped")
        pid_file.unlink()
    return stopped


# -- status ------------------------------------------------------------------------------------
def status_table(wide: bool = False) -> Table:
    from streamops.status_view import status_table as view
    from streamops.store import observe

    return view(observe.rows("stage_status"), None if wide else console.width)


class WatchState:
    """What `status --watch` keeps between refreshes: the last table, and since when the
    database has not answered (None while it does)."""

    def __init__(self) -> None:
        self.last: Table | None = None
        self.down_since: datetime | None = None


def watch_frame(state: WatchState, wide: bool) -> RenderableType:
    """One refresh of `status --watch`: the table, or, while the database does not answer, the
    last table and a line saying since when. Never raises for the database: the loop outlives
    an outage (a stalled server too: the read has a deadline)."""
    from streamops.store import observe

    try:
        table = observe.within(lambda: status_table(wide))
    except observe.NOT_ANSWERING as e:
        state.down_since = state.down_since or datetime.now()
        line = Text(f"database not answering since {state.down_since:%H:%M:%S}: {observe.reason(e)}", style="bold red")
        return Group(state.last, line) if state.last is not None else line
    state.last, state.down_since = table, None
    return table


@app.command()
def status(watch: bool = typer.Option(False, "--watch", "-w", help="refresh until Ctrl-C (not a terminal: a "
                                                                     "timestamped table every max(interval, 5) s)"),
           interval: float = typer.Option(2.0, help="seconds between refreshes with --watch"),
           wide: bool = typer.Option(False, "--wide", help="every column, even if the terminal is too narrow")) -> None:
    """A table per stage: run state, cores/partitions, p95 latency, rows/s in and out, backlog,
    heartbeat age, pool, plan, failures and quarantined lines (last 24 h). On a narrow terminal
    the least important columns are left out (the caption says which); --wide keeps them all."""
    from streamops.store import observe

    try:
        if not watch:  # a database that does not answer: one line and exit 1 (_Commands)
            console.print(observe.within(lambda: status_table(wide)), crop=not wide)  # --wide: no cell cut
            console.print(Text(_last_report_line()), soft_wrap=wide)
            return
        state = WatchState()
        if not console.is_terminal:  # piped (`make demo | tee`): Live would print nothing; a table per refresh
            while True:
                console.print(f"-- {datetime.now(UTC):%Y-%m-%d %H:%M:%S} UTC", highlight=False)
                console.print(watch_frame(state, wide))
                console.file.flush()
                time.sleep(max(interval, 5.0))
        with Live(watch_frame(state, wide), console=console, refresh_per_second=4) as live:
            while True:
                time.sleep(interval)
                live.update(watch_frame(state, wide))
    except KeyboardInterrupt:
        pass


def _last_report_line() -> str:
    """Where the last report is: `reports/D/index.html (day D, generated …)`."""
    from streamops.paths import REPO_ROOT
    from streamops.report.nightly import last_report
    from streamops.store import observe

    r = observe.within(lambda: last_report(observe.engine()))
    if r is None:
        return "last report: none yet (`streamops report`, or the streamops_nightly_report DAG, writes one)"
    path = Path(r["path"])
    shown = path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path
    scope = f", app {r['app']}" if r["app"] else ""
    return f"last report: {shown} (day {r['day']}{scope}, generated {r['created_at']:%Y-%m-%d %H:%M %Z})"


@app.command()
def report(day: str | None = typer.Option(None, "--date", metavar="YYYY-MM-DD|today|yesterday",
                                             help="the day to report (UTC, the database's days); default: "
                                                  "yesterday, or today when yesterday has no data"),
           app_name: str | None = typer.Option(None, "--app", metavar="APP", help="one app; default: every app"),
           out: Path | None = typer.Option(None, "--out", metavar="DIR",
                                              help="reports root; default: reports/ "
                                                   "(or STREAMOPS_REPORTS_DIR)")) -> None:
    """Write the day's report: DIR/D/index.html (summary per app, SLO met, availability, downtime,
    charts of response time against R_max and cores, data quality) and a CSV per reporting view,
    and record it in the `reports` table."""
    from datetime import date, datetime, timedelta

    from streamops.report import nightly
    from streamops.store import db

    today = datetime.now(UTC).date()
    words = {"today": today, "yesterday": today - timedelta(days=1)}
    try:
        d = words.get(day.lower()) or date.fromisoformat(day) if day else None
    except ValueError:
        _fail(f"--date must be YYYY-MM-DD, today or yesterday, got {day!r}", code=2)
    t0 = time.monotonic()
    try:
        if d is None:  # a first demo has no yesterday: an empty report would say nothing
            d = words["yesterday"]
            if not nightly.day_has_metrics(d):
                d = today
                _say(f"yesterday ({words['yesterday']}) has no metrics: reporting today so far "
                     f"(--date yesterday forces it)")
        index = nightly.build_report(d, app=app_name, out_dir=out)
    except (db.DatabaseUnavailable, ValueError) as e:
        _fail(str(e))
    _say(f"report for {d} written in {time.monotonic() - t0:.1f} s: {index}")


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
        _fail(str(e))
    console.print(t)
    for path in files.checkpoints + files.logs if dry_run else []:
        console.print(f"  {path}")


@app.command()
def down(db_too: bool = typer.Option(False, "--db", help="also stop the embedded PostgreSQL")) -> None:
    """Stop Airflow and the supervisor, cancel every pending reconfiguration (with the reason),
    stop every running stage and background generator, then the embedded Spark cluster and the
    embedded Kafka broker."""
    from streamops import processes
    from streamops.execute import pending, replicas, stages
    from streamops.orchestrate import airflow_home
    from streamops.store import db, embedded

    # Airflow first: its scheduler would otherwise let the watchdog restart what we stop.
    stopped = airflow_home.down(airflow_home.site())
    if stopped:
        _say(f"Airflow stopped: {', '.join(stopped)}")
    run_dir = state_dir() / "run"
    # The supervisor next: it would restart the stages stopped below.
    sup_pid = processes.read_pid(run_dir / "supervisor.pid")
    if sup_pid is not None and processes.is_alive(sup_pid):
        processes.stop(sup_pid, grace_s=30)
        _say(f"supervisor {sup_pid} stopped (its spares with it)")
    (run_dir / "supervisor.pid").unlink(missing_ok=True)  # stopped on purpose: not to be restarted
    _stop_generators()
    try:
        # Nobody is left to run a pending change: cancelled, so that the next start does not run it unasked.
        pending.cancel_all("cancelled: the platform went down (streamops down) before it started; nothing was "
                           "changed; request it again", progress=_say)
        reg = _load_registry()
        live = [r.stage_id for r in db.rows("stage_status") if r.status in ("starting", "running", "stopping")]
        for sid in live:
            with contextlib.suppress(stages.StageNotRunning):
                replicas.stop_with_replicas(sid, reg, progress=_say)
    except db.DatabaseUnavailable:
        pass
    from streamops import spark_cluster

    if spark_cluster.down():  # after the stages: their drivers stop their executors first
        _say("embedded Spark cluster stopped")
    from streamops import kafka_broker

    if kafka_broker.down():  # after the stages: none reads or writes it any more
        _say("embedded Kafka broker stopped")
    if db_too:
        _say("embedded PostgreSQL stopped" if embedded.down() else "embedded PostgreSQL was not running")


if __name__ == "__main__":
    app()
