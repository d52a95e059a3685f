"""The trace suite bench (issue 15): tune on training seeds only, report on test seeds only.

    .venv/bin/python bench/suite.py                 # all families, tune on seeds 1 2 3, report on 101 102 103
    .venv/bin/python bench/suite.py --quick         # 3 families, one training and one test seed
    .venv/bin/python bench/suite.py --update-docs   # also replace the suite:begin/end block of docs/policies.md

1. TRAINING: every candidate (CANDIDATES: the named configurations plus GRID) on every training
   family (sim/suite.py TRAIN_FAMILIES) × TRAIN_SEEDS.
2. CHOICE, from the training runs alone (`select`): the candidate that meets all GOALS on the
   most families, then the lowest mean normalized loss. The same rule restricted to the named
   configurations (sim.POLICY_CONFIGS) says which of them training alone would have chosen.
   Both are printed (and written) before any test run starts.
3. TEST: every named configuration plus `tuned` on every family (held-out `issue15_day`
   included) × TEST_SEEDS; one table per family.

Writes bench/results/suite.json (every run, the choice and its training scores) and
bench/results/suite_table.md (--quick: suite_quick.json / suite_quick_table.md).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

from rich.console import Console
from rich.table import Table

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]
from bench.harness import table, write_result  # noqa: E402
from streamops.plan.budget import BASE_PRICE  # noqa: E402
from streamops.plan.options import AppOptions, OperatorOptions  # noqa: E402
from streamops.sim import POLICY_CONFIGS, PolicyConfig, SimConfig, run_simulation  # noqa: E402
from streamops.sim.bound import (  # noqa: E402
    Frontier,
    frontier,
    model_from_sim,
    reactive_floor,
    regret,
    window_open_mask,
)
from streamops.sim.frontier_chart import Panel, plot_frontiers  # noqa: E402
from streamops.sim.model import sized_start  # noqa: E402
from streamops.sim.suite import (  # noqa: E402
    FAMILIES,
    HELD_OUT,
    TEST_SEEDS,
    TRAIN_FAMILIES,
    TRAIN_SEEDS,
    MissingTraceFile,
    suite_trace,
)

ROOT = Path(__file__).resolve().parent
BASELINE = "edf_b075"
B = {"policy": "token_bucket", "generator": "edf_step", "beta": 0.75}
REC, REC_APP = POLICY_CONFIGS["recommended"].operator_options, POLICY_CONFIGS["recommended"].app_options
PRED = POLICY_CONFIGS["predictive"].operator_options

# Candidate option VALUES: (name, operator, operator_options, app_options). Plain data: add a row
# to try more (options of plan/options.py: scale-in sizing, a core-holding cost, forecast …).
GRID: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = [
    ("edf_b075_B2", "edf", {}, {**B, "capacity": 2.0}),
    ("edf_s_out0.8", "edf", {"s_out": 0.8}, B),
    ("edf_proportional", "edf", {}, {**B, "generator": "proportional"}),
    ("ds2_tu0.8_m0.5", "ds2", {"target_utilization": 0.8, "ds2_scale_in_margin": 0.5}, B),
    ("ds2_tu0.6_m0.45", "ds2", {"target_utilization": 0.6, "ds2_scale_in_margin": 0.45}, B),
    ("ds2_B2", "ds2", {}, {**B, "capacity": 2.0}),
    ("t3_a55", "threshold3", {"alarming_threshold": 55.0}, B),
    ("t3_tu0.6", "threshold3", {"target_utilization": 0.6}, B),
    ("t3_a55_tu0.6", "threshold3", {"alarming_threshold": 55.0, "target_utilization": 0.6}, B),
    ("t3_a55_tu0.6_B2", "threshold3", {"alarming_threshold": 55.0, "target_utilization": 0.6}, {**B, "capacity": 2.0}),
    ("t3_a55_tu0.6_b0.5", "threshold3", {"alarming_threshold": 55.0, "target_utilization": 0.6}, {**B, "beta": 0.5}),
    ("t3_so75_a55", "threshold3", {"alarming_threshold": 55.0, "scale_out_threshold": 75.0}, B),
    ("t3_so75_a55_tu0.6", "threshold3",
     {"scale_out_threshold": 75.0, "alarming_threshold": 55.0, "target_utilization": 0.6}, B),
    ("t3_so70_a55_tu0.6_B2", "threshold3",
     {"scale_out_threshold": 70.0, "alarming_threshold": 55.0, "target_utilization": 0.6}, {**B, "capacity": 2.0}),
    ("t3_si20", "threshold3", {"scale_in_threshold": 20.0}, B),
    # issue 15: give cores back (scale_in_to, core_hour_cost), grant stages together (B = 3), forecast
    ("rec_ds2in", "threshold3", {**REC, "scale_in_to": "ds2"}, REC_APP),
    ("rec_B3", "threshold3", REC, {**REC_APP, "capacity": 3.0}),
    ("edf_ds2in", "edf", {"scale_in_to": "ds2"}, B),
    ("pred_ds2in", "threshold3", {**PRED, "scale_in_to": "ds2"}, REC_APP),
    ("pred_ds2in_B3", "threshold3", {**PRED, "scale_in_to": "ds2"}, {**REC_APP, "capacity": 3.0}),
    ("pred_ds2in_chc0.02", "threshold3", {**PRED, "scale_in_to": "ds2"}, {**REC_APP, "core_hour_cost": 0.02}),
    ("pred_ds2in_B3_chc0.02", "threshold3", {**PRED, "scale_in_to": "ds2"},
     {**REC_APP, "capacity": 3.0, "core_hour_cost": 0.02}),
    ("pred_h300_ds2in", "threshold3", {**PRED, "scale_in_to": "ds2", "forecast_horizon_s": 300.0}, REC_APP),
    ("pred_tu0.7_ds2in", "threshold3", {**PRED, "scale_in_to": "ds2", "target_utilization": 0.7}, REC_APP),
]
# issue 29: the receding-horizon controller at other prices (its default price is one of these runs).
MPC = POLICY_CONFIGS["mpc"]
MPC_PRICES = (10.0, 20.0, 40.0, 80.0, 160.0, 320.0, 640.0)
GRID += [(f"mpc_p{p:g}", "mpc", {**MPC.operator_options, "slo_price": p}, MPC.app_options) for p in MPC_PRICES]
CANDIDATES: dict[str, PolicyConfig] = {**POLICY_CONFIGS, **{n: PolicyConfig(n, op, oo, ao) for n, op, oo, ao in GRID}}


def price_of(pc: PolicyConfig) -> float:
    """The price a configuration's regret is priced at: mpc's fixed `slo_price`, else the error
    budget's base price (the budget moves it around that, plan/budget.py)."""
    p = pc.op_opts().slo_price
    return BASE_PRICE if p is None else p


# every price a configuration is scored at: each mpc candidate's own
PRICES = tuple(sorted({price_of(pc) for pc in CANDIDATES.values() if pc.operator == "mpc"}))
SLO_TARGET = SimConfig().slo_target  # every suite app's: the share of seconds within R_max
DIURNAL = ("diurnal_noise", "flash_crowd", "outage", "weekly_growth", "issue15_day")

# Per family, means over its seeds, against edf_b075 on the same seeds (convergence: max over seeds).
GOALS: dict[str, tuple[str, str]] = {
    "A": ("availability", "availability ≥ 99.5 %"),
    "R": ("seconds_above_rmax", f"seconds above R_max ≤ 0.5 × {BASELINE}'s"),
    "C": ("core_hours", f"core-hours ≤ 1.0 × {BASELINE}'s"),
    "V": ("convergence_max", "≤ 2 decisions (Application Manager cycles that granted) to converge after a step"),
    "D": ("reconfigs_per_day", "≤ 12 reconfigurations per app per compressed day"),
}
LOSS_FLOOR_S = 10.0
RULE = ("among candidates with runs on every training family: most families meeting all five goals (A R C V D), "
        "then the most goals met over all families, then the lowest mean normalized loss; loss per family = mean of "
        f"s > R_max / max({BASELINE}'s, "
        f"{LOSS_FLOOR_S:g} s), downtime / max({BASELINE}'s, {LOSS_FLOOR_S:g} s) and core-hours / {BASELINE}'s; "
        "ties by name. Only runs with a training seed are read.")
QUICK_FAMILIES = ("flash_crowd", "outage", "step_drift")
METRICS = ("availability", "downtime_s", "seconds_above_rmax", "violated_windows", "reconfigs_per_day",
           "core_hours", "flip_flops", "changes_per_stage_day", "sla_compliance")
CHURN = ("flip_flops", "changes_per_stage_day")  # plan.stability.churn, per run


def _mean(rs: list[dict], m: str) -> float | None:
    """The mean of a figure over runs; runs from before issue 46 carry no churn figures (counted as
    none) and no sla_compliance (then None)."""
    if m in CHURN:
        return statistics.fmean(r.get(m, 0.0) for r in rs)
    vals = [r.get(m) for r in rs]
    return None if any(v is None for v in vals) else statistics.fmean(float(v) for v in vals if v is not None)


def _one(job: tuple[str, PolicyConfig, str, int, str]) -> dict[str, Any]:
    label, pc, family, seed, split = job
    t0 = time.perf_counter()
    s = run_simulation(pc, f"suite:{family}:{seed}", seed=seed, plot=False)
    days = s["duration_s"] / 7200.0
    return {"policy": label, "config": pc.name, "family": family, "seed": seed, "split": split,
            "trace": s["trace"], "duration_s": s["duration_s"], "availability": s["availability"],
            "downtime_s": s["downtime_s"], "seconds_above_rmax": s["seconds_above_rmax"],
            "violated_windows": s["violated_windows"], "sla_compliance": s["sla_compliance"],
            "reconfigurations_total": s["reconfigurations_total"],
            "reconfigurations": s["reconfigurations"],
            "reconfigs_per_day": round(s["reconfigurations_total"] / days, 3),
            "flip_flops": s["flip_flops"], "changes_per_stage_day": s["changes_per_stage_day"],
            "core_hours": s["core_hours"], "convergence_decisions": s["convergence_decisions"],
            "convergence_decisions_max": s["convergence_decisions_max"], "response_p95_ms": s["response_p95_ms"],
            "run_s": round(time.perf_counter() - t0, 2)}


def aggregate(runs: Iterable[dict]) -> dict[tuple[str, str], dict[str, Any]]:
    """(family, policy) → means over seeds; convergence_max is None when the family has no step."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in runs:
        groups.setdefault((r["family"], r["policy"]), []).append(r)
    agg = {}
    for key, rs in groups.items():
        a: dict[str, Any] = {m: _mean(rs, m) for m in METRICS}
        a["seeds"] = sorted(r["seed"] for r in rs)
        a["convergence_max"] = max((r["convergence_decisions_max"] for r in rs if r["convergence_decisions"]),
                                   default=None)
        agg[key] = a
    return agg


def goals_met(a: dict[str, Any], base: dict[str, Any]) -> dict[str, bool]:
    return {"A": a["availability"] >= 0.995,
            "R": a["seconds_above_rmax"] <= 0.5 * base["seconds_above_rmax"],
            "C": a["core_hours"] <= 1.0 * base["core_hours"],
            "V": a["convergence_max"] is None or a["convergence_max"] <= 2,
            "D": a["reconfigs_per_day"] <= 12.0}


def loss(a: dict[str, Any], base: dict[str, Any]) -> float:
    return (a["seconds_above_rmax"] / max(base["seconds_above_rmax"], LOSS_FLOOR_S)
            + a["downtime_s"] / max(base["downtime_s"], LOSS_FLOOR_S)
            + a["core_hours"] / max(base["core_hours"], 1e-9)) / 3.0


def score(runs: Iterable[dict], names: Iterable[str] | None = None,
          baseline: str = BASELINE) -> list[dict[str, Any]]:
    """Per policy: families meeting all goals, mean loss and per-family figures, best first."""
    agg = aggregate(runs)
    families = sorted({f for f, p in agg if p == baseline})
    policies = sorted({p for _, p in agg} if names is None else set(names) & {p for _, p in agg})
    out = []
    for p in policies:
        per = {}
        for f in families:
            a = agg.get((f, p))
            if a is not None:
                g = goals_met(a, agg[(f, baseline)])
                figures = {m: None if a[m] is None else round(a[m], 6) for m in METRICS}
                per[f] = {**figures, "convergence_max": a["convergence_max"],
                          "goals": g, "all_goals": all(g.values()), "loss": round(loss(a, agg[(f, baseline)]), 4)}
        complete = len(per) == len(families) and bool(families)
        out.append({"name": p, "complete": complete, "families_met": sum(v["all_goals"] for v in per.values()),
                    "goals_met": sum(sum(v["goals"].values()) for v in per.values()),
                    "families": len(families), "mean_loss": round(statistics.fmean(v["loss"] for v in per.values()), 4)
                    if complete else math.inf, "per_family": per})
    out.sort(key=lambda s: (not s["complete"], -s["families_met"], -s["goals_met"], s["mean_loss"], s["name"]))
    return out


def select(runs: Iterable[dict], names: Iterable[str] | None = None, seeds: Iterable[int] = TRAIN_SEEDS,
           baseline: str = BASELINE) -> dict[str, Any]:
    """The choice by RULE from the runs whose seed is in `seeds` (the training seeds): any other
    run, test runs included, is dropped first, so it cannot move the pick."""
    seeds = set(seeds)
    ranking = score([r for r in runs if r["seed"] in seeds], names, baseline)
    if not ranking or not ranking[0]["complete"]:
        raise ValueError(f"no candidate has training runs on every family (is {baseline} among the runs?)")
    return {"choice": ranking[0]["name"], "scores": ranking[0], "ranking": ranking, "seeds": sorted(seeds)}


MIN_AVAILABILITY = 0.995  # goal A
REGRET_RULE = ("priced regret of a run at price P (core-seconds per second above R_max) = the share of its cost, "
               "core-seconds + P x seconds above R_max, that the clairvoyant frontier saves at the same price. mpc's "
               "default price: the lowest price at which mpc keeps a mean training availability >= "
               f"{MIN_AVAILABILITY:.1%} "
               "(goal A; regret alone cannot price a second above R_max: at every price the cheapest point is on "
               "some frontier), else the price with the highest availability. The regret choice: among candidates "
               f"with a mean training availability >= {MIN_AVAILABILITY:.1%} (else the most available one), the lowest "
               "mean priced regret at that price. Means are over the training families of the means over their "
               "seeds; ties by name. Only runs with a training seed are read.")


def _bound(job: tuple[str, int]) -> dict[str, Any]:
    """The clairvoyant frontier of one suite trace, with the loosest bucket of any configuration
    here (accept_all: one change per stage per interval), so that it bounds them all."""
    family, seed = job
    t0 = time.perf_counter()
    tr = suite_trace(family, seed)
    T = int(tr.default_duration_s)
    # the bound starts where the default options' managers start (sim.model.sized_start)
    cfg = sized_start(SimConfig(), tr.rows(0), OperatorOptions())
    model = replace(model_from_sim(cfg, AppOptions()), tokens=len(cfg.stages))
    rates, open_mask = [tr.rows(t) for t in range(T)], window_open_mask(cfg, T, model.window_s)
    f, floor = frontier(rates, model, open_mask), reactive_floor(rates, model, open_mask)
    return {"family": family, "seed": seed, "duration_s": T, "points": f.rows(), "floor_points": floor.rows(),
            "run_s": round(time.perf_counter() - t0, 2)}


def with_regret(runs: Iterable[dict], bounds: Iterable[dict], prices: Iterable[float] = ()) -> list[dict]:
    """Each run with its regret against its trace's frontier (sim.bound.regret) and, per price in
    `prices`, the frontier's least cost there (`bound_cost`, core-seconds + price x seconds above)."""
    bounds = list(bounds)
    fr = {(b["family"], b["seed"]): Frontier.from_rows(b["points"], b["duration_s"]) for b in bounds}
    floors = {(b["family"], b["seed"]): Frontier.from_rows(b["floor_points"], b["duration_s"]) for b in bounds
              if "floor_points" in b}
    prices = sorted(set(prices))
    out = []
    for r in runs:
        key = (r["family"], r["seed"])
        f = fr.get(key)
        if f is None:
            out.append(r)
            continue
        least = {f"{p:g}": min(q.core_hours * 3600 + p * q.seconds_above for q in f.points) for p in prices}
        against_floor = {} if key not in floors else {
            f"floor_{k}": v for k, v in regret(floors[key], r["core_hours"], r["seconds_above_rmax"]).items()}
        out.append({**r, **regret(f, r["core_hours"], r["seconds_above_rmax"]), **against_floor,
                    "bound_cost": least})
    return out


def _by_policy_family(runs: Iterable[dict], field: str, names: Iterable[str] | None
                      ) -> tuple[dict[tuple[str, str], list[dict]], list[str], list[str]]:
    """The runs that have `field`, by (policy, family); the families; the policies (within `names`)."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in runs:
        if field in r:
            groups.setdefault((r["policy"], r["family"]), []).append(r)
    families = sorted({f for _, f in groups})
    policies = sorted({p for p, _ in groups} if names is None else set(names) & {p for p, _ in groups})
    return groups, families, policies


def priced_regret(r: dict, price: float) -> float:
    """The share of the run's cost at `price` that the frontier saves (below 0: beyond the bound)."""
    cost = r["core_hours"] * 3600 + price * r["seconds_above_rmax"]
    return 1.0 - r["bound_cost"][f"{price:g}"] / cost if cost > 0 else 0.0


def priced_scores(runs: Iterable[dict], price_of: Any, names: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """Per configuration: the mean over families (of the means over seeds) of its priced regret at
    price_of(name), and its mean availability, best first."""
    groups, families, policies = _by_policy_family(runs, "bound_cost", names)
    out = []
    for p in policies:
        price = float(price_of(p))
        per = {f: statistics.fmean(priced_regret(r, price) for r in groups[(p, f)]) for f in families
               if (p, f) in groups}
        avail = statistics.fmean(r["availability"] for f in per for r in groups[(p, f)]) if per else 0.0
        complete = len(per) == len(families) and bool(families)
        out.append({"name": p, "price": price, "complete": complete, "availability": round(avail, 6),
                    "priced_regret": round(statistics.fmean(per.values()), 4) if complete else math.inf,
                    "per_family": {f: round(v, 4) for f, v in per.items()}})
    out.sort(key=lambda s: (not s["complete"], s["priced_regret"], s["name"]))
    return out


def choose(train: list[dict], candidates: dict[str, PolicyConfig],
           seeds: Iterable[int] = TRAIN_SEEDS) -> tuple[dict[str, Any], dict[str, Any]]:
    """By REGRET_RULE, from the training runs only: (mpc's price, the regret choice)."""
    seeds = set(seeds)
    runs = [r for r in train if r["seed"] in seeds]
    mpcs = [n for n, pc in candidates.items() if pc.operator == "mpc"]
    by_price = [s for s in priced_scores(runs, lambda n: price_of(candidates[n]), mpcs) if s["complete"]]
    if not by_price:
        raise ValueError("no mpc candidate has priced regrets on every training family (were the bounds computed?)")
    by_price.sort(key=lambda s: s["price"])
    kept = [s for s in by_price if s["availability"] >= MIN_AVAILABILITY]
    mpc = kept[0] if kept else max(by_price, key=lambda s: (s["availability"], -s["price"]))
    price = mpc["price"]
    ranking = [s for s in priced_scores(runs, lambda n: price, candidates) if s["complete"]]
    ok = ([s for s in ranking if s["availability"] >= MIN_AVAILABILITY]
          or [max(ranking, key=lambda s: s["availability"])])
    return ({"choice": mpc["name"], "price": price, "scores": mpc, "ranking": by_price},
            {"choice": ok[0]["name"], "price": price, "scores": ok[0], "ranking": ranking})


def _r(v: float | None) -> float:
    return 0.0 if v is None else max(0.0, float(v))  # beyond the bound on that axis: no regret


def _beyond(r: dict, prefix: str = "") -> bool:
    """The run is better than the bound on an axis: the model and the simulator disagree there
    (against the reactive floor, `floor_`, it may be luck)."""
    return any(r[prefix + k] is None or r[prefix + k] < 0 for k in ("core_regret", "violation_regret"))


def regret_scores(runs: Iterable[dict], names: Iterable[str] | None = None, prefix: str = "") -> list[dict[str, Any]]:
    """Per configuration: mean core and violation regret per family (means over seeds) and over
    the families, and the score (their mean), best first; against the clairvoyant frontier, or
    with prefix `floor_` against the reactive floor."""
    groups, families, policies = _by_policy_family(runs, prefix + "core_regret", names)
    out = []
    for p in policies:
        per = {}
        for f in families:
            rs = groups.get((p, f))
            if rs:
                def mean(k: str, rs: list[dict] = rs) -> float:
                    return statistics.fmean(_r(r[prefix + k]) for r in rs)

                core, viol = mean("core_regret"), mean("violation_regret")
                per[f] = {"core_regret": round(core, 4), "violation_regret": round(viol, 4),
                          "score": round((core + viol) / 2, 4), "beyond_bound": sum(_beyond(r, prefix) for r in rs),
                          "extra_core_hours": round(mean("extra_core_hours"), 3),
                          "extra_seconds_above": round(mean("extra_seconds_above"), 1)}
        complete = len(per) == len(families) and bool(families)
        means = {k: round(statistics.fmean(v[k] for v in per.values()), 4) if complete else math.inf
                 for k in ("core_regret", "violation_regret", "score")}
        out.append({"name": p, "complete": complete, **means, "per_family": per})
    out.sort(key=lambda s: (not s["complete"], s["score"], s["name"]))
    return out


def ahead_of_all(priced: dict[str, dict], name: str, others: Iterable[str]) -> list[str]:
    """The families on which `name`'s priced regret is below every one of `others`'."""
    mine = priced[name]["per_family"]
    rivals = [priced[o]["per_family"] for o in others if o != name and o in priced]
    return [f for f, v in mine.items() if all(v < r[f] for r in rivals if f in r)]


def pareto_charts(runs: list[dict], bounds: list[dict], families: list[str], names: list[str],
                  out_dir: Path) -> list[Path]:
    """Per family: one panel per test seed, its frontier and every configuration's run."""
    paths = []
    for fam in families:
        panels = []
        for b in sorted((b for b in bounds if b["family"] == fam), key=lambda b: b["seed"]):
            pts = {r["policy"]: (r["core_hours"], r["seconds_above_rmax"]) for r in runs
                   if r["family"] == fam and r["seed"] == b["seed"] and r["policy"] in names}
            panels.append(Panel(f"seed {b['seed']}", Frontier.from_rows(b["points"], b["duration_s"]), pts))
        if panels:
            paths.append(plot_frontiers(panels, out_dir / f"pareto_{fam}.png",
                                        f"{fam}: the clairvoyant frontier and each configuration (test seeds)"))
    return paths


def regret_markdown(axes: dict[str, dict], priced: dict[str, dict], price: float, names: list[str],
                    families: list[str], mpc_ahead: list[str], against: str = "") -> str:
    if against:  # the axes only: priced regret is against the clairvoyant frontier
        lines = [f"| config (against {against}) | core regret | violation regret | " + " | ".join(families) + " |",
                 "|---|---:|---:|" + "---:|" * len(families)]
        for n in names:
            a = axes.get(n)
            if a is None or not a["complete"]:
                continue
            cells = [f"{a['per_family'][f]['core_regret']:.0%} / {a['per_family'][f]['violation_regret']:.0%}"
                     if f in a["per_family"] else "" for f in families]
            lines.append(f"| {n} | {a['core_regret']:.1%} | {a['violation_regret']:.1%} | " + " | ".join(cells) + " |")
        return "\n".join(lines)
    lines = [f"| config | priced regret at {price:g} | core regret | violation regret | "
             + " | ".join(families) + " |", "|---|---:|---:|---:|" + "---:|" * len(families)]
    for n in names:
        a, p = axes.get(n), priced.get(n)
        if a is None or p is None:
            continue
        cells = [f"{p['per_family'][f]:.0%} ({a['per_family'][f]['core_regret']:.0%} / "
                 f"{a['per_family'][f]['violation_regret']:.0%})" if f in p["per_family"] else "" for f in families]
        lines.append(f"| {n} | {p['priced_regret']:.1%} | {a['core_regret']:.1%} | {a['violation_regret']:.1%} | "
                     + " | ".join(cells) + " |")
    lines += ["", f"Per family: the priced regret at {price:g} core-s per s (core regret / violation regret), "
              "means over the test seeds. `mpc` has a lower priced regret than every other named "
              f"configuration on {len(mpc_ahead)} of {len(families)} families"
              + (f" ({', '.join(mpc_ahead)})." if mpc_ahead else ".")]
    return "\n".join(lines)


def budget_check(agg: dict, families: list[str], policies: list[str], floor: dict[str, dict],
                 clairvoyant: dict[str, dict], name: str = "mpc") -> tuple[list[list[str]], list[str]]:
    """Issue 46's done-when for the budget-driven `name`, per family and in all: does it meet the
    apps' slo_target (share of seconds within R_max), with the fewest core-hours of those that do;
    its flip-flops and changes per stage per day; its regret against the reactive floor."""
    rows, met, cheapest, flips, diurnal_changes = [], 0, 0, 0.0, 0.0
    for f in families:
        a = agg.get((f, name))
        if a is None or a["sla_compliance"] is None:
            continue
        meeting = {p: agg[(f, p)]["core_hours"] for p in policies if (f, p) in agg
                   and (agg[(f, p)]["sla_compliance"] or 0.0) >= SLO_TARGET}
        ok = name in meeting
        least = min(meeting, key=lambda p: (meeting[p], p), default=None)
        met += ok
        cheapest += ok and meeting[name] <= meeting[least or name]
        flips += a["flip_flops"]
        if f in DIURNAL:
            diurnal_changes = max(diurnal_changes, a["changes_per_stage_day"])
        rows.append([f, f"{a['sla_compliance']:.2%}", "yes" if ok else "no",
                     "–" if least is None else f"{least} ({meeting[least]:.2f})", f"{a['core_hours']:.2f}",
                     f"{a['flip_flops']:.1f}", f"{a['changes_per_stage_day']:.2f}"])
    fl, cl = floor.get(name, {}), clairvoyant.get(name, {})
    summary = [
        f"`{name}` meets the slo_target ({SLO_TARGET:.0%} of seconds within R_max) on {met}/{len(rows)} families "
        f"(done when ≥ 7 of 8), with the fewest core-hours of the configurations that meet it on {cheapest} "
        "(≥ 6)",
        f"flip-flops, summed over the families' seed means: {flips:.1f} (done when 0); the most changes per stage per "
        f"compressed day on a diurnal family: {diurnal_changes:.2f} (≤ 3)",
        f"regret against the reactive floor: violation {fl.get('violation_regret', math.nan):.1%} (≤ 15 %), "
        f"core {fl.get('core_regret', math.nan):.1%} (≤ 20 %); against the clairvoyant frontier: violation "
        f"{cl.get('violation_regret', math.nan):.1%}, core {cl.get('core_regret', math.nan):.1%}"]
    return rows, summary


BUDGET_COLS = ("family", "within R_max", "meets slo_target", "fewest core-hours meeting it", "core-hours",
               "flip-flops", "changes/stage/day")


def _bounds(jobs: list[tuple[str, int]], n_jobs: int) -> list[dict]:
    if n_jobs > 1:
        with ProcessPoolExecutor(n_jobs) as ex:
            return list(ex.map(_bound, jobs))
    return [_bound(j) for j in jobs]


def _run(jobs: list[tuple], n_jobs: int) -> list[dict]:
    # longest first (the forecaster is slow, weekly_growth is long) so the pool ends together
    order = sorted(range(len(jobs)), key=lambda i: (not jobs[i][1].operator_options.get("forecast"),
                                                    jobs[i][2] != "weekly_growth"))
    ordered = [jobs[i] for i in order]
    if n_jobs > 1:
        with ProcessPoolExecutor(n_jobs) as ex:
            done = list(ex.map(_one, ordered))
    else:
        done = [_one(j) for j in ordered]
    out: list[dict] = [{}] * len(jobs)
    for i, r in zip(order, done, strict=True):
        out[i] = r
    return out


def _conv(v: Any) -> str:
    return "–" if v is None else str(v)


def _goals_text(g: dict[str, bool]) -> str:
    missed = [k for k, ok in g.items() if not ok]
    return "all 5" if not missed else f"{5 - len(missed)}/5, not {''.join(missed)}"


def family_rows(agg: dict, family: str, policies: list[str]) -> list[list[str]]:
    base = agg.get((family, BASELINE))
    rows = []
    for p in policies:
        a = agg.get((family, p))
        if a is None:
            continue
        rows.append([p, f"{a['availability']:.3%}", f"{a['seconds_above_rmax']:.1f}", f"{a['violated_windows']:.1f}",
                     f"{a['reconfigs_per_day']:.1f}", f"{a['flip_flops']:.1f}", f"{a['changes_per_stage_day']:.2f}",
                     f"{a['core_hours']:.2f}", _conv(a["convergence_max"]),
                     _goals_text(goals_met(a, base)) if base else "?"])
    return rows


COLS = ("config", "availability", "s > R_max", "violated win.", "reconfigs/day", "flip-flops", "changes/stage/day",
        "core-hours", "conv. max", "goals")


def markdown(agg: dict, families: list[str], policies: list[str], head: list[str]) -> str:
    lines = head + [""]
    for f in families:
        lines += [f"**{f}**: {FAMILIES[f]}", "", "| " + " | ".join(COLS) + " |",
                  "|---|" + "---:|" * (len(COLS) - 2) + "---|"]
        lines += ["| " + " | ".join(r) + " |" for r in family_rows(agg, f, policies)] + [""]
    return "\n".join(lines)


def _budget_markdown(rows: list[list[str]], summary: list[str], seeds: Iterable[int]) -> str:
    lines = [f"The budget-driven `mpc` (its price follows the app's error budget, plan/budget.py) on the test seeds "
             f"{list(seeds)}:", "", "| " + " | ".join(BUDGET_COLS) + " |", "|---|" + "---:|" * (len(BUDGET_COLS) - 1)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows] + [""] + [f"- {x}." for x in summary])


DOCS_IMG = ROOT.parent / "docs" / "img"


def update_docs(table_md: str, doc: Path = ROOT.parent / "docs" / "policies.md", marker: str = "suite") -> None:
    text = doc.read_text()
    begin, end = f"<!-- {marker}:begin -->\n", f"<!-- {marker}:end -->"
    i, j = text.index(begin) + len(begin), text.index(end)
    doc.write_text(text[:i] + table_md + "\n" + text[j:])


def _ranking_table(title: str, ranking: list[dict], marks: dict[str, str], top: int) -> Table:
    t = Table(title=title)
    for col in ("candidate", "families meeting all goals", "mean loss", "goals met per family"):
        t.add_column(col, justify="left" if col in ("candidate", "goals met per family") else "right")
    for s in ranking[:top]:
        per = " ".join(f"{f[:8]}:{sum(v['goals'].values())}" for f, v in s["per_family"].items())
        t.add_row(s["name"] + marks.get(s["name"], ""), f"{s['families_met']}/{s['families']}",
                  f"{s['mean_loss']:.3f}", per, style="bold green" if s["name"] in marks else None)
    return t


def _test_runs(labels: dict[str, str], families: list[str], seeds: Iterable[int], n_jobs: int,
               mpc: PolicyConfig) -> tuple[list[dict], list[tuple], dict[str, str]]:
    """Every named configuration (`mpc` at the price training chose), and each label's choice, on
    every family × test seed. A choice outside the named ones runs once, under its first label
    (`first`: choice → that label); other labels copy the runs of their choice."""
    seeds = list(seeds)
    named = {**POLICY_CONFIGS, "mpc": mpc}
    jobs = [(n, pc, f, s, "test") for n, pc in named.items() for f in families for s in seeds]
    first: dict[str, str] = {}
    for label, choice in labels.items():
        if choice not in POLICY_CONFIGS and choice not in first:
            first[choice] = label
            jobs += [(label, CANDIDATES[choice], f, s, "test") for f in families for s in seeds]
    test = _run(jobs, n_jobs)
    for label, choice in labels.items():
        if choice in POLICY_CONFIGS or first[choice] != label:
            test += [{**r, "policy": label} for r in test if r["policy"] == first.get(choice, choice)]
    return test, jobs, first


def _regret_table(title: str, ranking: list[dict], marks: dict[str, str], top: int) -> Table:
    t = Table(title=title)
    for col in ("candidate", "priced regret", "availability"):
        t.add_column(col, justify="left" if col == "candidate" else "right")
    for s in ranking[:top]:
        t.add_row(s["name"] + marks.get(s["name"], ""), f"{s['priced_regret']:.1%}", f"{s['availability']:.3%}",
                  style="bold green" if s["name"] in marks else None)
    return t


def _families(args: argparse.Namespace, first_seed: int, console: Console) -> tuple[list[str], list[str], dict]:
    """(training families, reported families, skipped ones: family → why): a family whose trace
    file is missing is skipped, said."""
    train_fams = [f for f in (args.families or (QUICK_FAMILIES if args.quick else TRAIN_FAMILIES)) if f not in HELD_OUT]
    report_fams = train_fams + [f for f in HELD_OUT if f not in train_fams]
    skipped = {}
    for f in list(report_fams):
        try:
            suite_trace(f, first_seed)
        except MissingTraceFile as e:
            skipped[f] = str(e)
            console.print(f"[yellow]note: family {f} skipped: {e}")
    return [f for f in train_fams if f not in skipped], [f for f in report_fams if f not in skipped], skipped


class Training(NamedTuple):
    """What the training seeds decided, before any test run exists. (Not a dataclass: the tests
    load this file without registering it as a module, which a dataclass needs.)"""
    runs: list[dict]
    tuned: dict
    named: dict
    price: dict
    best: dict
    bounds: list[dict]
    wall_s: float
    bounds_s: float


def _training(train_fams: list[str], train_seeds: list[int], n_jobs: int, console: Console) -> Training:
    t0 = time.perf_counter()
    train_jobs = [(n, pc, f, s, "train") for n, pc in CANDIDATES.items() for f in train_fams for s in train_seeds]
    console.print(f"training: {len(CANDIDATES)} candidates × {len(train_fams)} families × seeds {list(train_seeds)} "
                  f"= {len(train_jobs)} runs")
    train = _run(train_jobs, n_jobs)
    t_train = time.perf_counter() - t0
    # The choice, from the training runs only; fixed before any test run exists.
    tuned = select(train, CANDIDATES, train_seeds)
    named = select(train, POLICY_CONFIGS, train_seeds)
    console.print(_ranking_table(f"training (seeds {list(train_seeds)}): top 12 of {len(CANDIDATES)} by the rule",
                                 tuned["ranking"], {tuned["choice"]: "  ← tuned", named["choice"]: "  ← named choice"}
                                 if tuned["choice"] != named["choice"]
                                 else {tuned["choice"]: "  ← tuned = named choice"},
                                 12))
    console.print(f"[bold]tuned = {tuned['choice']}[/] "
                  f"({tuned['scores']['families_met']}/{tuned['scores']['families']} families meet all goals, "
                  f"mean loss {tuned['scores']['mean_loss']:.3f}); among the named configurations training alone "
                  f"chooses [bold]{named['choice']}[/] "
                  f"({named['scores']['families_met']}/{named['scores']['families']}, "
                  f"{named['scores']['mean_loss']:.3f}). Rule: {RULE}")

    # issue 29: regret against each training trace's clairvoyant frontier; still training runs only.
    tb = time.perf_counter()
    train_bounds = _bounds([(f, s) for f in train_fams for s in train_seeds], n_jobs)
    train = with_regret(train, train_bounds, PRICES)
    price, best = choose(train, CANDIDATES, train_seeds)
    t_bounds = time.perf_counter() - tb
    marks = {best["choice"]: "  ← regret choice", price["choice"]: "  ← mpc price"}
    console.print(_regret_table(f"training (seeds {list(train_seeds)}): top 12 of {len(CANDIDATES)} by priced regret "
                                f"at {price['price']:g}", best["ranking"], marks, 12))
    console.print(f"[bold]regret choice = {best['choice']}[/] ({best['scores']['priced_regret']:.3f}); "
                  f"mpc's price from training: [bold]{price['choice']}[/] = {price['price']:g} core-s per s "
                  f"({price['scores']['priced_regret']:.3f}). Rule: {REGRET_RULE} "
                  f"Bounds of {len(train_bounds)} traces in {t_bounds:.0f} s.")
    return Training(train, tuned, named, price, best, train_bounds, t_train, t_bounds)


def _head(tr: Training, train_fams: list[str], train_seeds: list[int], test_seeds: list[int],
          test_scores: dict[str, dict], policies: list[str], test_runs: int, wall: float, n_jobs: int) -> list[str]:
    """The lines above the families' tables in suite_table.md (and docs/policies.md)."""
    tuned, named = tr.tuned, tr.named
    head = [f"Tuned on seeds {list(train_seeds)} of {', '.join(train_fams)}; reported on seeds {list(test_seeds)}. "
            f"`tuned` = **{tuned['choice']}** ({tuned['scores']['families_met']}/{tuned['scores']['families']} "
            f"training families meet all goals, mean training loss {tuned['scores']['mean_loss']:.3f}); the named "
            f"configuration training alone chooses: **{named['choice']}**. "
            f"Goals per family, against {BASELINE} on the same seeds: "
            + "; ".join(f"{k} = {d}" for k, (_, d) in GOALS.items()) + ". Conv. max: \"–\" = the trace has no step.",
            "", "| config | test families meeting all goals | mean test loss |", "|---|---:|---:|"]
    head += [f"| {p} | {test_scores[p]['families_met']}/{test_scores[p]['families']} | "
             f"{test_scores[p]['mean_loss']:.3f} |"
             for p in policies if p in test_scores]
    return head + ["", f"{len(tr.runs)} training + {test_runs} test runs, {wall:.0f} s wall with --jobs {n_jobs}."]


def _print_test(console: Console, agg: dict, report_fams: list[str], test_seeds: list[int], policies: list[str],
                test_scores: dict[str, dict], regrets: dict[str, dict], priced: dict[str, dict], price: float) -> None:
    """The test seeds' tables: one per family, the goals met, the regret."""
    for f in report_fams:
        rows = family_rows(agg, f, policies)
        console.print(table(f"{f} (test seeds {list(test_seeds)}){' [held out]' if f in HELD_OUT else ''}: "
                            f"{FAMILIES[f]}", COLS, rows, left=("config", "goals"),
                            styles=["bold green" if r[0] == "tuned" else ("bold" if r[0] == BASELINE else None)
                                    for r in rows]))
    console.print(table("test: families meeting all goals (A R C V D)", ("config", "families", "mean loss"),
                        [[p, f"{test_scores[p]['families_met']}/{test_scores[p]['families']}",
                          f"{test_scores[p]['mean_loss']:.3f}"] for p in policies if p in test_scores],
                        left=("config",)))
    shown = [p for p in policies if p in regrets and p in priced]
    console.print(table(f"test: regret against the clairvoyant frontier (seeds {list(test_seeds)})",
                        ("config", f"priced regret at {price:g}", "core regret", "violation regret"),
                        [[p, f"{priced[p]['priced_regret']:.1%}", f"{regrets[p]['core_regret']:.1%}",
                          f"{regrets[p]['violation_regret']:.1%}"] for p in shown], left=("config",),
                        styles=["bold green" if p in ("mpc", "regret_choice") else None for p in shown]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1 training seed, 1 test seed, 3 families")
    ap.add_argument("--families", nargs="+", choices=list(FAMILIES), help="training families (default: all)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", type=Path, default=ROOT / "results")
    ap.add_argument("--update-docs", action="store_true",
                    help="replace the suite:begin/end block of docs/policies.md (not with --quick)")
    args = ap.parse_args(argv)
    if args.quick and args.update_docs:
        ap.error("--update-docs needs the full bench (without --quick)")
    console = Console(width=140)
    train_seeds = TRAIN_SEEDS[:1] if args.quick else TRAIN_SEEDS
    test_seeds = TEST_SEEDS[:1] if args.quick else TEST_SEEDS
    train_fams, report_fams, skipped = _families(args, train_seeds[0], console)

    t0 = time.perf_counter()
    tr = _training(train_fams, train_seeds, args.jobs, console)
    price, best = tr.price, tr.best
    t1 = time.perf_counter()
    labels = {"tuned": tr.tuned["choice"], "regret_choice": best["choice"]}
    # `mpc` runs as a user gets it: priced by its error budget, not at the price training chose
    test, test_jobs, first = _test_runs(labels, report_fams, test_seeds, args.jobs, POLICY_CONFIGS["mpc"])
    test_bounds = _bounds([(f, s) for f in report_fams for s in test_seeds], args.jobs)
    test = with_regret(test, test_bounds, PRICES)
    t_test = time.perf_counter() - t1
    wall = time.perf_counter() - t0

    policies = [*POLICY_CONFIGS, *labels]
    regrets = {s["name"]: s for s in regret_scores(test, policies)}
    floors = {s["name"]: s for s in regret_scores(test, policies, "floor_")}
    priced = {s["name"]: s for s in priced_scores(test, lambda n: price["price"], policies)}
    mpc_ahead = ahead_of_all(priced, "mpc", POLICY_CONFIGS)
    regret_md = (f"Regret on the test seeds {list(test_seeds)} against each trace's clairvoyant frontier (§14.1). "
                 f"`regret_choice` = **{best['choice']}**, chosen on the training seeds alone, and the regret priced "
                 f"at **{price['price']:g}** core-s per s ({price['choice']}), by the rule: {REGRET_RULE} `mpc` "
                 "itself prices a second above R_max by its error budget (plan/budget.py).\n\n"
                 + regret_markdown(regrets, priced, price["price"], policies, report_fams, mpc_ahead))
    agg = aggregate(test)
    check_rows, check_summary = budget_check(agg, report_fams, policies, floors, regrets)
    regret_md += ("\n\n" + _budget_markdown(check_rows, check_summary, test_seeds)
                  + "\n\n" + regret_markdown(floors, priced, price["price"], policies, report_fams, mpc_ahead,
                                              against="the reactive floor"))
    test_scores = {s["name"]: s for s in score(test, policies)}
    table_md = markdown(agg, report_fams, policies, _head(tr, train_fams, train_seeds, test_seeds, test_scores,
                                                          policies, len(test_jobs), wall, args.jobs))
    args.out.mkdir(parents=True, exist_ok=True)
    stem = "suite_quick" if args.quick else "suite"
    charts = pareto_charts(test, test_bounds, report_fams, list(POLICY_CONFIGS) + [
        label for label, choice in labels.items() if choice not in POLICY_CONFIGS and first[choice] == label],
        DOCS_IMG if args.update_docs else args.out)
    (args.out / f"{stem}_regret.md").write_text(regret_md)
    result = {"train_seeds": list(train_seeds), "test_seeds": list(test_seeds), "train_families": train_fams,
              "report_families": report_fams, "skipped": skipped, "families": FAMILIES, "rule": RULE,
              "goals": {k: d for k, (_, d) in GOALS.items()},
              "tuned": {"choice": tr.tuned["choice"], "config": CANDIDATES[tr.tuned["choice"]].as_dict(),
                        "training": tr.tuned["scores"]},
              "named_choice": {"choice": tr.named["choice"], "training": tr.named["scores"]},
              "training_ranking": [{k: v for k, v in s.items() if k != "per_family"} for s in tr.tuned["ranking"]],
              "test_scores": test_scores, "regret_rule": REGRET_RULE,
              "regret_choice": {"choice": best["choice"], "config": CANDIDATES[best["choice"]].as_dict(),
                                "training": best["scores"]},
              "mpc_price": {"choice": price["choice"], "price": price["price"],
                            "config": CANDIDATES[price["choice"]].as_dict(), "training": price["scores"]},
              "training_regret_ranking": [{k: v for k, v in s.items() if k != "per_family"} for s in best["ranking"]],
              "test_regrets": regrets, "test_floor_regrets": floors, "test_priced_regrets": priced,
              "mpc_ahead": mpc_ahead, "budget_check": {"rows": check_rows, "summary": check_summary},
              "charts": [str(c) for c in charts],
              "bounds": {"train": tr.bounds, "test": test_bounds}, "bounds_wall_s": round(tr.bounds_s, 1),
              "wall_s": round(wall, 1), "train_wall_s": round(tr.wall_s, 1),
              "test_wall_s": round(t_test, 1), "jobs": args.jobs,
              "candidates": {n: pc.as_dict() for n, pc in CANDIDATES.items()}, "runs": {"train": tr.runs, "test": test}}
    write_result(args.out / f"{stem}.json", result, args, indent=1)
    (args.out / f"{stem}_table.md").write_text(table_md)
    if args.update_docs:
        update_docs(table_md)
        update_docs(regret_md, marker="regret")

    _print_test(console, agg, report_fams, test_seeds, policies, test_scores, regrets, priced, price["price"])
    console.print(table(f"test: issue 46's done-when for the budget-driven mpc (seeds {list(test_seeds)})",
                        BUDGET_COLS, check_rows, left=("family", "fewest core-hours meeting it")))
    for line in check_summary:
        console.print(line)
    console.print(f"mpc ahead of every other named configuration on {len(mpc_ahead)}/{len(report_fams)} "
                  "families: "
                  f"{', '.join(mpc_ahead) or 'none'}; charts: {', '.join(str(c) for c in charts)}")
    console.print(f"tuned = {tr.tuned['choice']}, named choice = {tr.named['choice']} (both from training only). "
                  f"{len(tr.runs)} training runs in {tr.wall_s:.0f} s, {len(test_jobs)} test runs in {t_test:.0f} s: "
                  f"{wall:.0f} s wall (--jobs {args.jobs}) → {args.out / (stem + '.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
