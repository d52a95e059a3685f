"""`streamops deploy | start | stop | prestage | release | fault`: a stage's life, over
execute/stages, execute/replicas, execute/staging and execute/faults."""

from __future__ import annotations

import typer

from streamops import registry
from streamops.cli.common import console, fail, load_registry, say
from streamops.cli.job import print_report, run_check
from streamops.plan.mechanisms import RULES as MECHANISM_RULES

app = typer.Typer()


@app.command()
def deploy(app_name: str = typer.Argument(..., metavar="APP", help="app name from apps.yaml"),
           start: bool = typer.Option(False, "--start", help="also start every stage that is not running"),
           check: bool = typer.Option(True, "--check/--no-check", help="run `job check` on each stage first "
                                                                      "and refuse a job that fails it"),
           upgrade: str = typer.Option("auto", help="how a running stage whose job or code changed is upgraded: "
                                                    "auto (active_backup when its pool has room beside it) | "
                                                    f"{' | '.join(MECHANISM_RULES)} (one that cannot upgrade "
                                                    "refuses) | none (leave it running)")
           ) -> None:
    """Validate apps.yaml, check each stage's job (`streamops job check`), sync APP's pools, app
    and stage rows into PostgreSQL, and upgrade each running stage whose job or code changed (a
    reconfiguration, rolled back by the quality gate if the new version fails)."""
    from streamops.execute import stages

    reg = load_registry()
    if app_name not in reg.apps:
        fail(f"no app {app_name!r} in the registry; known apps: {', '.join(reg.apps)}", 2)
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
            fail(f"{app_name}.{name}: the job fails its check; nothing was deployed", 2)
        say(f"{app_name}.{name}: job {report['job']} checked ("
             f"{'stateful: ' + ', '.join(report['state_operators']) if report['stateful'] else 'stateless'})")
    try:
        synced = stages.sync_registry(reg, [app_name])
    except registry.RegistryError as e:
        fail(str(e), 2)
    say(f"registry synced: app {app_name} with stages {', '.join(synced)}")
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
        outcomes = upgrade_changed(reg, stage_ids, mechanism, progress=say)
    except (reconfigure.ReconfigurationBusy, ValueError) as e:
        fail(f"upgrade not made: {e}")
    if any(o.status != "done" for o in outcomes):
        raise typer.Exit(1)


def _start(ref: str, reg, cores, partitions, wait_s) -> None:
    from streamops.execute import stages

    try:
        with console.status(f"starting {ref} …"):
            res = stages.start_stage(ref, reg, cores=cores, state_partitions=partitions, wait_s=wait_s, progress=say)
    except (stages.AdmissionRefused, registry.RegistryError, RuntimeError, TimeoutError) as e:
        fail(str(e))
    if res.already_running:
        say(f"{res.stage_id} is already running (deployment {res.deployment_id}, pid {res.pid})")


@app.command()
def start(stage: str = typer.Argument(..., metavar="STAGE", help="app.stage (or a unique stage name)"),
          cores: int | None = typer.Option(None, help="start at these cores (default: what its input needs)"),
          partitions: int | None = typer.Option(None, help="override the state partitions (first run only)"),
          wait: float = typer.Option(180, help="seconds to wait for the driver to run; 0 = do not wait")) -> None:
    """Start a stage's driver (a detached local[cores] process), after checking the pool has room."""
    _start(stage, load_registry(), cores, partitions, wait)


@app.command()
def stop(stage: str = typer.Argument(..., metavar="STAGE", help="app.stage (or a unique stage name)"),
         deadline: float = typer.Option(60, help="seconds to wait for a graceful stop before SIGTERM")) -> None:
    """Stop a stage (its replicas first) at a batch boundary; SIGTERM after --deadline, then SIGKILL."""
    from streamops.execute import replicas, stages

    reg = load_registry()
    try:
        app_name, name, _ = reg.stage(stage)
        replicas.stop_with_replicas(registry.stage_id(app_name, name), reg, deadline_s=deadline, progress=say)
    except (stages.StageNotRunning, registry.RegistryError) as e:
        fail(str(e))


@app.command()
def prestage(stage: str = typer.Argument(..., metavar="STAGE", help="a running app.stage"),
             partitions: int | None = typer.Option(None, help="repartition the copy to this many state "
                                                                 "partitions")) -> None:
    """Copy the running stage's checkpoint (consistent as of its last committed batch) and
    repartition the copy, so that a later scale-out skips both."""
    from streamops.execute import staging

    try:
        with console.status(f"pre-staging {stage} …"):
            staged = staging.prestage(stage, partitions, load_registry(), progress=say)
    except (RuntimeError, ValueError, registry.RegistryError) as e:
        fail(str(e))
    say(f"staged copy {staged.path} (batch {staged.as_of_batch}, {staged.partitions} partitions)")


@app.command()
def release(stage: str = typer.Argument(..., metavar="STAGE", help="app.stage")) -> None:
    """Discard the stage's pre-staged checkpoint copy (the alarm cleared)."""
    from streamops.execute import staging

    try:
        found = staging.release(stage, load_registry())
    except registry.RegistryError as e:
        fail(str(e))
    say("staged copy discarded" if found else "nothing was pre-staged")


@app.command()
def fault(stage: str = typer.Argument(..., metavar="STAGE", help="app.stage (or a unique stage name)"),
          kind: str = typer.Option(..., help=" | ".join(registry.FAULT_KINDS)),
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
        app_name, name, _ = load_registry().stage(stage)
    except registry.RegistryError as e:
        fail(str(e))
    sid = registry.stage_id(app_name, name)
    try:
        if mtbf is None:
            s = faults.send(sid, kind, magnitude if kind in registry.TIMED_FAULTS else None, role=replica)
            say(f"{sid}: {kind} → {s.role or 'nobody'}: {s.outcome}")
            return
        spec = registry.Fault.model_validate({"kind": kind, "mtbf_s": mtbf, "magnitude_s": magnitude,
                                              "magnitude_sd_s": sd})  # an unknown kind: a ValueError
        sent = faults.run_schedule(sid, [spec], duration, seed=seed, progress=say)
        say(f"{sid}: {len(sent)} fault(s) injected in {duration:g}s")
    except (ValueError, LookupError) as e:
        fail(str(e))
