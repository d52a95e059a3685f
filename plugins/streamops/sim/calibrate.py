"""The simulator checked against reality (docs/policies.md §11.4): fit the model to a real run of
one stage and replay that run in it.

    run = RunData(**store.runs.stage_run("cal.wc", since=..., until=...))   # or RunData.load(path)
    res = calibrate_and_replay(run, out_dir=Path("cal-out"))  # calibration.json, calibration.png

`fit(run)` derives, from what the database recorded: the processing rate per core and the fixed
cost of a batch (a least-squares fit of batch duration = overhead + rows / (cores × rate) over the
batches, each run's first one — its warm-up — left out), the base latency (what a backlog-free
batch's p95 latency adds to its duration: the input's own delay and the wait for the trigger),
the rows a batch takes at most, the state size, and each mechanism's restart cost (the output gap
and its phases) from the reconfigurations rows. `replay` runs the simulator on the run's own input
(rows arrived = rows taken + backlog measured) with its reconfigurations and failures at the same
times and cores (SimConfig.scripted: no policy decides), and measures the simulated run as the
report measures the real one (sim/rundata.py): response per 1-second window of a batch, backlog
when a batch ends, availability = 1 − output gaps / observed seconds. Each replayed outage lasts
a predicted restart cost, never its own measured gap (`restart_cost`: the stage's other changes,
else this run's stop + repartition + initial start), so availability is a prediction; the
replay with the own gaps is kept as `availability_accounting` (the two sides count alike).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, overload

import numpy as np

from streamops.sim import rundata
from streamops.sim.calibration_chart import plot_calibration
from streamops.sim.model import ScriptedChange, SimConfig, StageSpec
from streamops.sim.replay_measures import catch_up, simulated_backlog, simulated_windows
from streamops.sim.restart_cost import restart_cost
from streamops.sim.rundata import RunData
from streamops.sim.traces import SimTrace

MECHANISM_FIELDS = {"pause_resume": "pause_resume_median_s", "prestaged": "prestaged_median_s",
                    "active_backup": "active_backup_median_s"}
PHASES = (("stop_s", "stop_requested_at", "stopped_at"), ("restart_s", "stopped_at", "restarted_at"),
          ("first_batch_s", "restarted_at", "first_batch_done_at"),
          ("catch_up_s", "first_batch_done_at", "caught_up_at"))


@overload
def _median(xs: Sequence[float | None], default: float) -> float: ...
@overload
def _median(xs: Sequence[float | None], default: None = None) -> float | None: ...


def _median(xs: Sequence[float | None], default: float | None = None) -> float | None:
    finite = [x for x in xs if x is not None and math.isfinite(x)]
    return float(np.median(finite)) if finite else default


def _warm_up(run: RunData) -> set[int]:
    """Indexes of each run's first batch in the range (a new deployment's: JVM and state warm-up)."""
    out, prev = set(), None
    for i, m in enumerate(run.metrics):
        if prev is not None and m.get("deployment_id") != prev:
            out.add(i)
        prev = m.get("deployment_id")
    return out


def _backlogged(run: RunData) -> set[int]:
    """Indexes of the batches that found more files waiting than they may take (the previous
    batch of the same run ended with ≥ maxFilesPerTrigger files pending): they took a full batch."""
    cap = int(run.stage.get("max_files_per_trigger") or 0) or 2
    ms = run.metrics
    return {k for k in range(1, len(ms)) if ms[k].get("deployment_id") == ms[k - 1].get("deployment_id")
            and (ms[k - 1].get("backlog_files") or 0) >= cap}


def _disturbed(run: RunData) -> list[tuple[float, float]]:
    """From a reconfiguration's request (a failure's last commit) until it caught up (else +60 s)."""
    spans = []
    for r in run.reconfigs:
        a = run.sec(r["requested_at"])
        b = run.sec(r.get("caught_up_at") or r.get("finished_at")) or a + 60.0
        spans.append((a, max(a, b)))
    for a, b, _ in rundata.outage_gaps(run):
        spans.append((a, b + 30.0))
    return spans


# ---------------------------------------------------------------------- the fit
def fit(run: RunData) -> dict[str, Any]:
    """The calibrated parameters of the stage and of its reconfigurations (see the module doc)."""
    warm = _warm_up(run)
    ok = [m for i, m in enumerate(run.metrics) if i not in warm and (m["input_rows"] or 0) > 0
          and m["batch_duration_ms"]]
    if len(ok) < 3:
        raise ValueError(f"{run.stage_id}: too few batches to calibrate on ({len(ok)})")
    x = np.array([m["input_rows"] / max(1, m["cores"] or 1) for m in ok], dtype=float)
    y = np.array([m["batch_duration_ms"] / 1000.0 for m in ok], dtype=float)
    overhead, per_row = np.nan, np.nan
    if np.ptp(x) > 0:
        (overhead, per_row), *_ = np.linalg.lstsq(np.vstack([np.ones_like(x), x]).T, y, rcond=None)
    if np.ptp(x) > 0 and not (per_row > 0 and overhead <= float(np.median(y))):
        # durations hardly grow with the batch size (fixed cost above the median batch, slope ≤ 0):
        # the fixed cost is the fastest batches', the rows what the larger half take beyond it
        overhead = float(np.percentile(y, 5))
        big = x >= np.median(x)
        per_row = float(np.median(np.maximum(y[big] - overhead, 0.0) / np.maximum(x[big], 1.0)))
    if not (per_row > 0) or not (0.0 <= overhead <= float(np.median(y))):
        # no spread in batch sizes (or a fit that makes no sense): the overhead is what the
        # smallest batches take beyond nothing, the rest is per row
        overhead = float(np.percentile(y, 5)) * 0.5
        per_row = float(np.median((y - overhead) / np.maximum(x, 1.0)))
    rate_per_core = 1.0 / per_row
    busy = sum((m.get("add_batch_ms") or m["batch_duration_ms"]) / 1000.0 * (m["cores"] or 1) for m in ok)
    disturbed, full = _disturbed(run), _backlogged(run)
    steady = [m for i, m in enumerate(run.metrics) if i not in warm and i not in full and m["input_rows"]
              and m.get("latency_p95_ms") is not None and not any(a <= run.sec(m["ts"]) <= b for a, b in disturbed)]
    steady = steady or [m for m in ok if m.get("latency_p95_ms") is not None]
    base_ms = _median([m["latency_p95_ms"] - m["batch_duration_ms"] for m in steady], 0.0)
    max_rows = _batch_cap(run, warm | (set(range(len(run.metrics))) - full), overhead, rate_per_core)
    state = _median([m.get("state_bytes") for m in run.metrics if m.get("state_bytes") is not None], 0.0)
    restarts = []
    for r in run.reconfigs:
        row = {"id": r["id"], "action": r["action"], "mechanism": r.get("mechanism"), "status": r["status"],
               "from_cores": r.get("from_cores"), "to_cores": r.get("target_cores"),
               "output_gap_s": None if r.get("downtime_ms") is None else r["downtime_ms"] / 1000.0}
        for name, a, b in PHASES:
            row[name] = (r[b] - r[a]).total_seconds() if r.get(a) and r.get(b) else None
        restarts.append(row)
    by_mech: dict[str, Any] = {}
    for mech in sorted({r["mechanism"] for r in restarts if r["mechanism"]}):
        rows = [r for r in restarts if r["mechanism"] == mech]
        by_mech[mech] = {k: _median([r[k] for r in rows]) for k in ("output_gap_s",) + tuple(p[0] for p in PHASES)}
        by_mech[mech]["n"] = len(rows)
    return {
        "rate_per_core": round(float(rate_per_core), 2),
        "batch_overhead_ms": round(float(overhead) * 1000.0, 1),
        "base_latency_ms": round(base_ms, 1),
        "trigger_interval_s": run.trigger_ms / 1000.0,
        "max_batch_rows": max_rows,
        "state_bytes": state,
        "rows_per_busy_core_s": round(sum(m["input_rows"] for m in ok) / busy, 2) if busy else None,
        "batches_fitted": len(ok), "batches_steady": len(steady),
        "steady_windows": [[int(math.floor(run.sec(m["ts"]))), m["latency_p95_ms"]] for m in steady],
        "restart_costs": by_mech, "reconfigurations": restarts,
    }


def _batch_cap(run: RunData, skip: set[int], overhead: float, rate_per_core: float) -> float:
    """The rows a batch takes at most (maxFilesPerTrigger × rows per file), as the model needs it:
    such that a backlogged stage drains as fast as the run's full batches did (rows over the time
    from their start to the next batch's). 0 (unlimited) when fewer than 3 batches were full."""
    rows = secs = 0.0
    cores, n = [], []
    ms = run.metrics
    for k in range(1, len(ms) - 1):
        m, nxt = ms[k], ms[k + 1]
        if k in skip or nxt.get("deployment_id") != m.get("deployment_id") or not m["input_rows"]:
            continue
        rows += m["input_rows"]
        secs += (nxt["ts"] - m["ts"]).total_seconds()
        cores.append(m["cores"] or 1)
        n.append(m["input_rows"])
    if len(n) < 3 or secs <= 0:
        return 0.0
    x, cap, trigger = rows / secs, float(np.median(cores)) * rate_per_core, run.trigger_ms / 1000.0
    # batches of n rows, one every max(trigger, overhead + n / cap) seconds, take x rows a second
    if overhead + x * trigger / cap <= trigger:
        return round(float(x * trigger), 1)  # shorter than the trigger interval: one batch per trigger
    return round(float(x * overhead / (1.0 - x / cap)), 1) if x < cap else float(np.mean(n))


def _calibrated_config(run: RunData, cal: dict[str, Any]) -> SimConfig:
    """The one-stage SimConfig with the fitted stage, no noise and no downtime spread: it starts on
    the run's first cores and may reach any it ever had."""
    first_cores = int(run.metrics[0]["cores"] or run.stage.get("cores") or 1)
    seen = [int(m["cores"]) for m in run.metrics if m.get("cores")] + \
        [int(r["target_cores"]) for r in run.reconfigs if r.get("target_cores")]
    spec = StageSpec(run.stage_id, rate_per_core=cal["rate_per_core"], cores=first_cores,
                     min_cores=1, max_cores=max([first_cores, int(run.stage.get("max_cores") or 1)] + seen),
                     state_bytes=cal["state_bytes"], base_latency_ms=cal["base_latency_ms"],
                     state_partitions=int(run.stage.get("state_partitions") or 1),
                     trigger_interval_s=cal["trigger_interval_s"], batch_overhead_ms=cal["batch_overhead_ms"],
                     max_batch_rows=cal["max_batch_rows"])
    return SimConfig(app=run.stage_id.partition(".")[0] or "calibration", stages=(spec,), arrival_noise=0.0,
                     capacity_noise=0.0, downtime_sigma=0.0, plot=False)


def _outage_script(run: RunData, cal: dict[str, Any], cfg: SimConfig, state_s: float,
                   own_gaps: bool) -> list[dict[str, Any]]:
    """Each reconfiguration's and failure's outage at its measured start, lasting what
    `restart_cost` predicts (`own_gaps`: its own gap), sorted by time."""
    script: list[dict[str, Any]] = []
    gaps = {g[2]: g for g in rundata.outage_gaps(run)}

    def outage(t_s: float, a: float, down: float, to: int, mech: str, action: str, source: tuple[str, str],
               own: float) -> None:
        start = max(0.0, a)  # an outage that began before the range: its rest
        script.append({"t_s": max(0.0, t_s), "stage": run.stage_id, "to_cores": to, "mechanism": mech,
                       "action": action, "down_start_s": start, "downtime_s": round(max(0.0, a + down - start), 3),
                       "downtime_source": source[0], "downtime_detail": source[1], "own_gap_s": round(own, 3)})

    def cost(kind: str, change: dict[str, Any], mech: str, own: float) -> tuple[float, tuple[str, str]]:
        if own_gaps:
            return own, ("own gap", "its own measured output gap")
        default = getattr(cfg, MECHANISM_FIELDS.get(mech) or ("restart_s" if kind == "failure" else ""), None)
        c = restart_cost(run, cal, kind, change, state_s, float(default if default is not None else own))
        return c["downtime_s"], (c["source"], c["detail"])

    cores = cfg.stages[0].cores
    for r in run.reconfigs:
        mech, gap = r.get("mechanism") or "pause_resume", gaps.get(f"reconfiguration {r['id']}")
        done = r["status"] == "done" and r.get("target_cores")
        to = int(r["target_cores"] if done else (r.get("from_cores") or cores))
        g0, g1 = (gap[0], gap[1]) if gap is not None else (run.sec(r["requested_at"]),) * 2
        own = g1 - g0
        down, source = cost("reconfiguration", r, mech, own) if own > 0 else (own, ("none", "no outage"))
        if source[0] == "prior" and mech not in MECHANISM_FIELDS:  # no history, no model: as measured
            source = ("own gap", f"no other {mech} change of the stage, no model for it")
        outage(min(g0, run.sec(r.get("stop_requested_at") or r["requested_at"])), g0, down, to, mech,
               r["action"], source, own)
        cores = to
    for f in run.failures:
        a, b, _ = gaps[f"failure {f['id']}"]
        down, source = cost("failure", f, "recovery", b - a)
        outage(a, a, down, cores, "recovery", "restart", source, b - a)
    script.sort(key=lambda c: c["t_s"])
    return script


def _add_live_changes(run: RunData, script: list[dict[str, Any]], first_cores: int) -> None:
    """Add to `script` the changes of cores the batches show that no outage explains (live ones)."""
    for m in run.metrics:
        t, c = run.sec(m["ts"]), int(m.get("cores") or 0)
        if not c or any(x["t_s"] - 1 <= t <= x["down_start_s"] + max(x["downtime_s"], x["own_gap_s"]) + 1
                        for x in script):
            continue
        want = next((x["to_cores"] for x in reversed(script) if x["t_s"] <= t), first_cores)
        if c != want:
            script.append({"t_s": max(0.0, t), "stage": run.stage_id, "to_cores": c, "mechanism": "observed",
                           "action": "scale_out" if c > want else "scale_in", "down_start_s": max(0.0, t),
                           "downtime_s": 0.0, "downtime_source": "none", "downtime_detail": "a live change",
                           "own_gap_s": 0.0})
            script.sort(key=lambda x: x["t_s"])


def _replayed_restart_costs(script: list[dict[str, Any]], state_s: float) -> dict[str, Any]:
    """The replayed outages as the per-mechanism restart cost too (less the state's part), for
    run_simulation: SimConfig field → value."""
    over: dict[str, Any] = {}
    for mech, fld in MECHANISM_FIELDS.items():
        downs = [x["downtime_s"] for x in script if x["mechanism"] == mech and x["downtime_source"] != "none"]
        if downs:
            over[fld] = round(max(0.0, float(np.median(downs)) - (state_s if mech == "pause_resume" else 0.0)), 3)
    return over


def model_of(run: RunData, cal: dict[str, Any], own_gaps: bool = False) -> tuple[SimConfig, list[dict[str, Any]]]:
    """The calibrated SimConfig for replaying `run`, and its scripted changes as dicts (ScriptedChange's
    fields, `downtime_source`, `downtime_detail`, `own_gap_s`): each reconfiguration's and failure's
    outage at its measured start, lasting what `restart_cost` predicts (`own_gaps`: its own gap, the
    accounting check), then any change of cores the batches show that no outage explains (a live one)."""
    cfg = _calibrated_config(run, cal)
    state_s = cal["state_bytes"] / 1e6 * cfg.state_s_per_mb  # pause-resume's offline state cost
    script = _outage_script(run, cal, cfg, state_s, own_gaps)
    _add_live_changes(run, script, cfg.stages[0].cores)
    cfg = replace(cfg, **_replayed_restart_costs(script, state_s))
    keys = ScriptedChange.__dataclass_fields__
    return replace(cfg, scripted=tuple(ScriptedChange(**{k: v for k, v in c.items() if k in keys})
                                       for c in script)), script


def trace_of(run: RunData, smooth_s: int = 5) -> SimTrace:
    """The run's input: cumulative rows arrived (taken + backlog) at each batch end, linear in
    between, at the last batches' rate after the last one; per second, a centred moving mean over
    `smooth_s` seconds (the backlog is counted in whole files: ±1 file per batch)."""
    ts, cum = rundata.arrivals_cumulative(run)
    tail = max(1.0, min(30.0, ts[-1] - ts[0]))
    k = int(np.searchsorted(ts, ts[-1] - tail))
    rate_end = (cum[-1] - cum[k]) / max(1e-9, ts[-1] - ts[k])
    n = run.duration_s + 2
    grid = np.arange(n + 1, dtype=float)
    raw = np.where(grid <= ts[-1], np.interp(grid, ts, cum), cum[-1] + rate_end * (grid - ts[-1]))
    per_s = np.diff(raw)
    if smooth_s > 1:
        kern = np.ones(smooth_s)
        per_s = np.convolve(per_s, kern, "same") / np.convolve(np.ones_like(per_s), kern, "same")
    acc = np.concatenate([[0.0], np.cumsum(per_s)])

    def integral(t: float) -> float:
        return float(np.interp(t, grid, acc)) if t <= n else float(acc[-1] + rate_end * (t - n))

    return SimTrace(name=f"replay:{run.stage_id}", rate_fn=lambda t: integral(t + 0.5) - integral(t - 0.5),
                    integral_fn=lambda a, b: integral(b) - integral(a), default_duration_s=run.duration_s,
                    description=f"stage_metrics of {run.stage_id}: rows taken + backlog, {len(run.metrics)} batches")


# ---------------------------------------------------------------------- the replay
def _err(measured: float | None, simulated: float | None) -> float | None:
    if measured is None or simulated is None or measured == 0:
        return None
    return round((simulated - measured) / abs(measured), 4)


def _row(measured: float | None, simulated: float | None, nd: int = 1) -> dict[str, Any]:
    def r(v: float | None) -> float | None:
        return None if v is None else round(float(v), nd)

    return {"measured": r(measured), "simulated": r(simulated), "error": _err(measured, simulated)}


def _simulate(run: RunData, cal: dict[str, Any], seed: int,
              own_gaps: bool = False) -> tuple[Any, SimConfig, list[dict[str, Any]]]:
    from streamops.sim.engine import Simulation
    from streamops.sim.policies import resolve_policy

    cfg, script = model_of(run, cal, own_gaps)
    pc = resolve_policy("recommended")  # not consulted: the scripted changes replace the managers
    sim = Simulation(cfg, pc.operator, pc.op_opts(), pc.app_opts(), trace_of(run), run.duration_s, seed)
    sim.run()
    return sim, cfg, script


def fit_base_latency(run: RunData, cal: dict[str, Any], seed: int = 1) -> dict[str, Any]:
    """The base latency the model adds to a batch's duration and its rows' wait in the queue (the
    input's own delay and the wait for the trigger): the median, over the steady batches, of the
    measured p95 latency less what the model gives without it at the same second."""
    sim, cfg, _ = _simulate(run, {**cal, "base_latency_ms": 0.0}, seed)
    got = simulated_windows(sim, cfg.stages[0])
    res = [p95 - got[w] for w, p95 in cal["steady_windows"] if w in got]
    res = res or [p95 - v for (_, p95), v in zip(cal["steady_windows"], got.values(), strict=False)]
    return {**cal, "base_latency_direct_ms": cal["base_latency_ms"],
            "base_latency_ms": round(max(0.0, _median(res, cal["base_latency_ms"])), 1)}


def _pct(v: list[float], q: float) -> float | None:
    return float(np.percentile(v, q)) if v else None  # linear: percentile_cont


def _mean(v: list[float]) -> float | None:
    return float(np.mean(v)) if v else None


def _comparison(run: RunData, cal: dict[str, Any], sim: Any, own: Any, cfg: SimConfig, own_cfg: SimConfig,
                m_resp: dict[Any, float], s_resp: dict[Any, float], m_bl: list[float],
                s_bl: list[float]) -> dict[str, Any]:
    """Measured against simulated: response, availability, backlog, catch-up, rows; the `_accounting`
    rows from the replay `own` whose outages last their own measured gaps."""
    mv, sv = list(m_resp.values()), list(s_resp.values())
    observed = (run.t_to - run.t_from).total_seconds()
    r_max = float(run.stage.get("r_max_ms") or cfg.r_max_ms)  # the app's bound (10_sla.sql: share_within_rmax)
    m_avail, m_down = rundata.availability(run)
    s_down = float(sim.down.sum())
    a_resp = list(simulated_windows(own, own_cfg.stages[0]).values())
    a_bl = [v for _, v in simulated_backlog(own, own_cfg.stages[0])]
    common = sorted(set(m_resp) & set(s_resp))
    rel = [abs(s_resp[w] - m_resp[w]) / m_resp[w] for w in common if m_resp[w] > 0]
    return {
        "response_p95_ms": _row(_pct(mv, 95), _pct(sv, 95)),
        "response_p95_ms_accounting": _row(_pct(mv, 95), _pct(a_resp, 95)),
        "response_mean_ms": _row(_mean(mv), _mean(sv)),
        "response_p50_ms": _row(_pct(mv, 50), _pct(sv, 50)),
        "availability": _row(m_avail, 1.0 - s_down / observed, 5),
        "availability_accounting": _row(m_avail, 1.0 - float(own.down.sum()) / observed, 5),
        "share_within_rmax": _row(sum(v <= r_max for v in mv) / observed, sum(v <= r_max for v in sv) / observed, 4),
        "downtime_s": _row(m_down, s_down, 2),
        "backlog_mean_rows": _row(_mean(m_bl), _mean(s_bl)),
        "backlog_max_rows": _row(max(m_bl) if m_bl else None, max(s_bl) if s_bl else None),
        "backlog_mean_rows_accounting": _row(_mean(m_bl), _mean(a_bl)),
        "backlog_max_rows_accounting": _row(max(m_bl) if m_bl else None, max(a_bl) if a_bl else None),
        "catch_up_s": _row(_median([r["catch_up_s"] for r in cal["reconfigurations"]]),
                           _median([c for c in catch_up(sim) if c is not None]), 2),
        "rows_in": _row(float(sum(m["input_rows"] for m in run.metrics)), float(sim.stages[0].processed.sum()), 0),
        "windows_measured": _row(len(mv), len(sv), 0),
        "response_series_mape": {"measured": None, "simulated": round(float(np.mean(rel)), 4) if rel else None,
                                 "error": None},
    }


def _replayed_model(sim: Any, cfg: SimConfig, script: list[dict[str, Any]]) -> dict[str, Any]:
    """What the replay assumed: the scripted changes, the restart costs and where they came from,
    the stage and the overrides, and the reconfigurations as simulated."""
    sources = sorted({c["downtime_source"] for c in script if c["downtime_source"] != "none"})
    return {"scripted": script, "restart_cost_source": ",".join(sources) or None,
            "restart_costs_replayed": [
                {k: (round(v, 2) if k == "t_s" else v) for k, v in c.items() if k not in ("stage", "down_start_s")}
                for c in script if c["downtime_source"] != "none"],
            "stage_spec": {k: v for k, v in asdict(cfg.stages[0]).items() if k not in ("faults", "redundancy")},
            "sim_overrides": {k: getattr(cfg, k) for k in ("arrival_noise", "capacity_noise", "downtime_sigma",
                                                           *MECHANISM_FIELDS.values())},
            "simulated_reconfigurations": [rc.as_dict() for rc in sim.reconfigs]}


def replay(run: RunData, cal: dict[str, Any], seed: int = 1) -> dict[str, Any]:
    """Simulate the run with the calibrated model; the comparison and the per-second series."""
    sim, cfg, script = _simulate(run, cal, seed)
    # the accounting check: each outage its own measured gap (circular: both sides count alike)
    own, own_cfg, _ = _simulate(run, cal, seed, own_gaps=True)
    spec, st = cfg.stages[0], sim.stages[0]
    m_resp, s_resp = rundata.response_windows(run), simulated_windows(sim, spec)
    samples = rundata.backlog_samples(run)
    s_at = simulated_backlog(sim, spec)  # at the simulated batches' ends
    comparison = _comparison(run, cal, sim, own, cfg, own_cfg, m_resp, s_resp, [v for _, v in samples],
                             [v for _, v in s_at])
    series = {
        "measured_response": [[w, round(v, 1)] for w, v in m_resp.items()],
        "simulated_response": [[w, round(v, 1)] for w, v in s_resp.items()],
        "measured_backlog": [[round(t, 2), v] for t, v in samples],
        "simulated_backlog_at_batches": [[round(t, 2), round(v, 1)] for t, v in s_at],
        "simulated_backlog": [round(float(v), 1) for v in st.backlog],
        "input_rows": [round(float(v), 1) for v in st.arrivals],
        "cores": [int(c) for c in st.cores],
    }
    return {"comparison": comparison, "series": series, **_replayed_model(sim, cfg, script)}


def calibrate_and_replay(run: RunData, out_dir: Path | None = None, seed: int = 1) -> dict[str, Any]:
    """fit + replay; with out_dir, writes calibration.json and calibration.png there."""
    cal = fit_base_latency(run, fit(run), seed)
    res = {"stage_id": run.stage_id, "from": run.t_from.isoformat(), "to": run.t_to.isoformat(),
           "duration_s": run.duration_s, "batches": len(run.metrics), "calibrated": cal, **replay(run, cal, seed)}
    if out_dir is not None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        res["calibration_json"] = str(out / "calibration.json")
        res["calibration_png"] = str(plot_calibration(res, out / "calibration.png"))
        (out / "calibration.json").write_text(json.dumps(res, indent=1, default=str))
    return res
