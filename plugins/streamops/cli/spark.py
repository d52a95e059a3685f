"""`streamops spark up | worker | archive | down | status`: the embedded Spark standalone cluster
(docs/cluster.md) and the class archive of its JVMs."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import typer
from rich.table import Table

from streamops.cli.common import console, fail, say

app = typer.Typer(help="The embedded Spark standalone cluster that `embedded` pools run on.", no_args_is_help=True)


@app.command("up")
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
            c, reused = spark_cluster.up(workers, cores, memory, progress=say, host=host)
    except spark_cluster.SparkClusterError as e:
        fail(str(e))
    say(f"Spark cluster {'already running' if reused else f'started in {time.monotonic() - started:.1f}s'}: "
         f"{c.url}, UI {c.ui}")


@app.command("worker")
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
        fail(str(e))
    say(f"worker on {host} joining {master} with {cores} cores and {memory}")
    sys.stdout.flush()
    os.execve(argv[0], argv, env)  # the worker's JVM takes this process: a signal to it reaches the worker


@app.command("archive")
def spark_archive(rebuild: bool = typer.Option(False, "--rebuild", help="dump it again even if it exists"),
                  quiet: bool = typer.Option(False, "--quiet", "-q", help="print only errors")) -> None:
    """Build this venv's class archive of Spark's classes (once per venv and JDK, about 15 s):
    every driver and executor JVM then maps them instead of loading them from the jars.
    `make venv` runs it; STREAMOPS_JVM_ARCHIVE=off turns its use off."""
    from streamops import jvm_archive

    try:
        path = jvm_archive.build(force=rebuild, progress=(lambda _: None) if quiet else say)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as e:
        fail(f"class archive: {e}")
    if not quiet:
        say(f"class archive: {path}" if path else "no class archive (no JDK found)")


@app.command("down")
def spark_down() -> None:
    """Stop the embedded cluster's workers (and their executors), then its master."""
    from streamops import spark_cluster

    say("Spark cluster stopped" if spark_cluster.down() else "Spark cluster was not running")


@app.command("status")
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
        fail("the embedded Spark cluster is not running; run `streamops spark up`", 1)
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
