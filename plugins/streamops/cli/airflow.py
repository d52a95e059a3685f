"""`streamops airflow up | logins | down | status | trigger`: the Airflow that runs the DAGs."""

from __future__ import annotations

import typer

from streamops.cli.common import console, fail, say

app = typer.Typer(help="The Airflow that runs the DAGs: metadata in the embedded PostgreSQL.", no_args_is_help=True)


@app.command("up")
def airflow_up(wait: float = typer.Option(300, help="seconds to wait for Airflow to be healthy")) -> None:
    """Create and migrate Airflow's metadata database (first time), then start the api-server,
    scheduler, dag-processor and triggerer in the background. Prints the UI address and logins."""
    from streamops.orchestrate import airflow_home

    s = airflow_home.site()
    try:
        with console.status("migrating Airflow's metadata database …"):
            took = airflow_home.init(s)
        say(f"Airflow metadata database {s.database!r} ready in {took:.0f}s")
        with console.status("starting Airflow …"):
            took = airflow_home.up(s, wait_s=wait, progress=say)
    except (RuntimeError, TimeoutError) as e:
        fail(str(e))
    say(f"Airflow healthy {took:.0f}s after start")
    _print_logins(s)


def _print_logins(s) -> None:
    from streamops.orchestrate import airflow_home

    pw = airflow_home.passwords(s)
    console.print(f"Airflow UI: [bold]{s.base_url}[/]   logins (also in {airflow_home.passwords_file(s)}, mode 0600):")
    for user, role in airflow_home.USERS.items():
        console.print(f"  {user:<7} / {pw[user]}   ({role})")
    console.print(f"Airflow CLI by hand: [dim]source {s.home / 'env.sh'}[/]")


@app.command("logins")
def airflow_logins() -> None:
    """Print the UI address and the generated logins."""
    from streamops.orchestrate import airflow_home

    _print_logins(airflow_home.site())


@app.command("down")
def airflow_down() -> None:
    """Stop the Airflow processes (SIGTERM, then SIGKILL after 30 s)."""
    from streamops.orchestrate import airflow_home

    stopped = airflow_home.down(airflow_home.site())
    say(f"Airflow stopped: {', '.join(stopped)}" if stopped else "Airflow was not running")


@app.command("status")
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


@app.command("trigger")
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
            say(f"{dag_id}: run {run['dag_run_id']} {run['state']}")
            why = None
            if wait:
                run = api.wait(dag_id, run["dag_run_id"], progress=say)
                if run["state"] != "success":  # the reason is in the failed task's log: say it here
                    why = api.failure(dag_id, run["dag_run_id"])
    except (AirflowAPIError, json.JSONDecodeError, TimeoutError) as e:
        fail(str(e))
    except Exception as e:  # httpx connection errors: Airflow is not up
        fail(f"cannot reach Airflow at {s.base_url}: {e} (start it with `streamops airflow up`)")
    if wait and run["state"] != "success":
        fail(f"{dag_id}: run {run['dag_run_id']} {run['state']}" + (f": {why}" if why else ""))
