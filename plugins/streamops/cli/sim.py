"""`streamops sim`: the production plan code against a model of the stages (sim/), its
clairvoyant bound (--bound) and its calibration against a real run (--calibrate)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from streamops.cli.common import console, fail, say

app = typer.Typer()
TRACE_HELP = ("diurnal, ramp, steps, spikes, a generator spec, a CSV file with columns t_s,rate (or a stage_metrics "
              "export), or suite:<family>:<seed>, a trace of the suite: <family> is diurnal_noise, flash_crowd, "
              "outage, step_drift, weekly_growth, pareto_bursts, real_export or issue15_day (held out); seeds 1-3 "
              "are the training split, 101-103 the test split (`streamops bench suite` tunes on the first and "
              "reports on the second)")


@app.command()
def sim(policy: str = typer.Option("recommended", help="a named configuration (sim/policies.py; `streamops bench "
                                                         "policies` compares them) or an Operator Manager policy "
                                                         "(plan/operator.py) with the recommended Application "
                                                         "Manager; an unknown name lists them all"),
        trace: str = typer.Option("diurnal", help=TRACE_HELP),
        seed: int = typer.Option(1, help="seed of every random draw: same seed, same result"),
        duration: float | None = typer.Option(None, help="seconds to simulate (default: the trace's own)"),
        out: Path = typer.Option(Path("sim-out"), help="writes DIR/summary.json and DIR/response.png"),
        faults: str | None = typer.Option(None, help="fault injector on every stage, e.g. "
                                                         "'driver_kill:mtbf_s=120;slow_batch:mtbf_s=60,magnitude_s=3'"),
        replicas: int | None = typer.Option(None, min=1, max=4, help="static replicas of every stage"),
        redundancy: bool = typer.Option(False, "--redundancy", help="the redundancy manager sets the replicas"),
        restart_s: float | None = typer.Option(None, help="seconds a killed driver takes to come back "
                                                              "(default 10)"),
        pool_kind: str = typer.Option("local", help="local (every change restarts the driver) or standalone "
                                                    "(1-core executors: changes live, scale-ins without a window)"),
        slo_price: float | None = typer.Option(None, min=0, help="a fixed price of one second above R_max in "
                                                                     "core-seconds, for --policy mpc (default: "
                                                                     "none, the price follows the error budget)"),
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
    config = _policy_config(policy)
    overrides: dict[str, Any] = {**({} if config == policy else {"operator": policy}),
                                 **({} if restart_s is None else {"restart_s": restart_s}), "pool_kind": pool_kind,
                                 **({} if slo_price is None else {"slo_price": slo_price})}
    with console.status(f"simulating {policy} on {trace} …"):
        from streamops.sim import run_simulation

        try:
            summary = run_simulation(config, trace, seed=seed, out_dir=out, duration_s=duration, faults=faults,
                                     replicas=replicas, redundancy=redundancy or None, **overrides)
        except (ValueError, FileNotFoundError) as e:
            fail(str(e), 2)
    _print_summary(summary, seed)
    say(f"wrote {out / 'summary.json'} and {out / 'response.png'}")
    if bound:
        _sim_bound(summary, config, trace, duration, out, pool_kind)


def _policy_config(policy: str) -> str:
    """The named configuration to simulate: `policy` itself, or for an Operator Manager policy the
    recommended one (its operator replaced). Exit 2 for a name neither registry knows."""
    from streamops.plan.operator import POLICIES as OPERATOR_POLICIES
    from streamops.sim import POLICY_CONFIGS

    if policy in POLICY_CONFIGS:
        return policy
    if policy not in OPERATOR_POLICIES:
        fail(f"unknown policy {policy!r}; named configurations: {', '.join(POLICY_CONFIGS)}; Operator Manager "
             f"policies: {', '.join(OPERATOR_POLICIES)}", 2)
    return "recommended"


def _print_summary(summary: dict[str, Any], seed: int) -> None:
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


def _sim_bound(summary: dict, policy: str, trace: str, duration: float | None, out: Path, pool_kind: str) -> None:
    """`sim --bound`: the trace's clairvoyant frontier, the policy's run on it, its regret."""
    import csv

    from streamops.sim import SimConfig, load_trace, resolve_policy
    from streamops.sim.bound import frontier, model_from_sim, regret, window_open_mask
    from streamops.sim.frontier_chart import Panel, plot_frontiers
    from streamops.sim.model import sized_start

    tr = load_trace(trace)
    T = int(duration if duration is not None else tr.default_duration_s)
    pc = resolve_policy(policy)
    # the bound starts where the policy's run started (sim.model.sized_start)
    cfg = sized_start(SimConfig(pool_kind=pool_kind), tr.rows(0), pc.op_opts())
    model = model_from_sim(cfg, pc.app_opts())  # the policy's own bucket
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
    say(f"wrote {out / 'frontier.csv'} and {out / 'frontier.png'}")


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
            fail(f"--{name}: not an ISO 8601 time: {v!r}", 2)
        return d if d.tzinfo else d.replace(tzinfo=UTC)

    if since and minutes:
        fail("give --since or --minutes, not both", 2)
    try:
        run = RunData(**stage_run(stage_id, since=when(since, "since"), until=when(until, "until"), minutes=minutes))
        with console.status(f"calibrating on {stage_id}: {len(run.metrics)} batches, {run.duration_s} s …"):
            res = calibrate_and_replay(run, out_dir=out, seed=seed)
    except DatabaseUnavailable as e:
        fail(str(e))
    except ValueError as e:
        fail(str(e), 2)
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
        say(f"wrote {write_trace(run, export_trace)} ({len(run.metrics)} batches)")
    say(f"wrote {res['calibration_json']} and {res['calibration_png']}")
