"""`streamops`: the command line of the platform, one module per command group, each over the
functions the DAGs call (orchestrate/, execute/). The console script is `streamops.cli:app`."""

from __future__ import annotations

import logging

import typer

from streamops.cli import (
    airflow,
    bench,
    db,
    gen,
    housekeeping,
    job,
    kafka,
    reconfigure,
    sim,
    spark,
    stages,
    status,
    supervise,
)
from streamops.cli.common import Commands
from streamops.cli.status import WatchState, status_table, watch_frame

app = typer.Typer(help="Operations platform for streaming Spark applications.", no_args_is_help=True,
                  context_settings={"help_option_names": ["-h", "--help"]}, cls=Commands)
# The top-level commands, in the order of the help: stages, high availability, control, simulation, data.
for commands in (stages.app, supervise.app, reconfigure.app, sim.app, bench.app, gen.app, status.app,
                 housekeeping.app):
    app.add_typer(commands)
app.add_typer(db.app, name="db")
app.add_typer(airflow.app, name="airflow")
app.add_typer(spark.app, name="spark")
app.add_typer(kafka.app, name="kafka")
app.add_typer(job.app, name="job")


@app.callback()
def _main(verbose: bool = typer.Option(False, "--verbose", "-v", help="log at INFO level")) -> None:
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")


__all__ = ["WatchState", "app", "status_table", "watch_frame"]
