"""`streamops replan | reconfigure`: one control cycle, and a reconfiguration through the same
front door and with the same words as the streamops_reconfigure DAG (orchestrate/tasks)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer
from rich.table import Table

from streamops import registry
from streamops.cli.common import console, fail, load_registry, say
from streamops.orchestrate.tasks import ACTIONS, RESUME_PENDING
from streamops.plan.mechanisms import RULES as MECHANISM_RULES

if TYPE_CHECKING:
    from streamops.execute.reconfigure import Outcome

app = typer.Typer()


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
        fail(str(e))
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
    stage: str | None = typer.Argument(None, metavar="[STAGE]",
                                       help="app.stage to change now (with resume_pending: none is every stage)"),
    action: str = typer.Option("scale_out", help=f"{' | '.join(ACTIONS)}, as the streamops_reconfigure DAG spells "
                                                 "them: upgrade puts the registry's job and code in the running "
                                                 f"stage; {RESUME_PENDING} realizes what re-plan granted and "
                                                 "finishes or rolls back what a dead executor left running "
                                                 "(scale-out is read as scale_out)"),
    reconfiguration: int | None = typer.Option(None, min=1, help=f"with {RESUME_PENDING}: the one reconfiguration "
                                                                 "to realize (re-plan's grant)"),
    cores: int | None = typer.Option(None, help="target cores (within the stage's min/max)"),
    partitions: int | None = typer.Option(None, help="target state partitions (offline repartition)"),
    pool: str | None = typer.Option(None, help="target pool (migration)"),
    mechanism: str = typer.Option("auto", help="auto (the cost rule, as for a policy's grant: the smallest outage the "
                                               f"resources allow) | {' | '.join(MECHANISM_RULES)} "
                                               "(docs/reconfiguration.md)"),
    pending: bool = typer.Option(False, "--pending", hidden=True, help=f"the older spelling of {RESUME_PENDING}"),
    resume: bool = typer.Option(False, "--resume", hidden=True, help=f"the older spelling of {RESUME_PENDING}"),
    wait: bool = typer.Option(True, "--wait/--no-wait",
                              help="realize it now and show each phase (default), or only record it as pending "
                                   f"for `--action {RESUME_PENDING}` within 10 min, or a scale-in or migration for "
                                   "its app's next maintenance window; later it is cancelled as stale"),
) -> None:
    """Realize a reconfiguration, as the streamops_reconfigure DAG does: persisted as pending
    first, then stop at a batch boundary, copy the checkpoint, repartition offline, restart; roll
    back if the new run fails."""
    from streamops.execute.reconfigure import ReconfigurationBusy
    from streamops.orchestrate.tasks import realize_action
    from streamops.plan.change import InvalidChange

    resuming = pending or resume or action.strip().replace("-", "_") == RESUME_PENDING
    if stage is None and not resuming:
        fail(f"name a STAGE, or use --action {RESUME_PENDING}", 2)
    reg = load_registry()
    try:
        outcomes = realize_action(stage, RESUME_PENDING if resuming else action, reg=reg, progress=say, cores=cores,
                                  partitions=partitions, pool=pool, mechanism=mechanism,
                                  reconfiguration=reconfiguration, wait=wait)
    except InvalidChange as e:  # refused before anything was recorded or stopped
        fail(str(e), 2)
    except (ReconfigurationBusy, ValueError, LookupError, registry.RegistryError) as e:
        fail(str(e))
    if not wait and not resuming:
        return  # recorded only
    _print_outcomes(outcomes)
    if any(o.status == "failed" for o in outcomes):
        raise typer.Exit(1)


def _print_outcomes(outcomes: list[Outcome]) -> None:
    t = Table(title="reconfigurations", header_style="bold")
    for col in ("id", "stage", "status", "output gap s", "took s", "detail"):
        t.add_column(col)
    for o in outcomes:
        color = {"done": "green", "rolled_back": "yellow"}.get(o.status, "red")
        t.add_row(str(o.reconfiguration_id), o.stage_id, f"[{color}]{o.status}[/]",
                  "–" if o.downtime_ms is None else f"{o.downtime_ms / 1000:.1f}", f"{o.seconds:.1f}", o.detail)
    console.print(t)
