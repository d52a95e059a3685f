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
import json
import math
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Iterable

from rich.console import Console
from rich.table import Table

from streamops.sim import POLICY_CONFIGS, PolicyConfig, run_simulation
from streamops.sim.suite import (FAMILIES, HELD_OUT, TEST_SEEDS, TRAIN_FAMILIES, TRAIN_SEEDS, MissingTraceFile,
                                 suite_trace)

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
CANDIDATES: dict[str, PolicyConfig] = {**POLICY_CONFIGS, **{n: PolicyConfig(n, op, oo, ao) for n, op, oo, ao in GRID}}

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
           "core_hours")


def _one(job: tuple[str, PolicyConfig, str, int, str]) -> dict[str, Any]:
    label, pc, family, seed, split = job
    t0 = time.perf_counter()
    s = run_simulation(pc, f"suite:{family}:{seed}", seed=seed, plot=False)
    days = s["duration_s"] / 7200.0
    return {"policy": label, "config": pc.name, "family": family, "seed": seed, "split": split,
            "trace": s["trace"], "duration_s": s["duration_s"], "availability": s["availability"],
            "downtime_s": s["downtime_s"], "seconds_above_rmax": s["seconds_above_rmax"],
            "violated_windows": s["violated_windows"], "reconfigurations_total": s["reconfigurations_total"],
            "reconfigurations": s["reconfigurations"],
            "reconfigs_per_day": round(s["reconfigurations_total"] / days, 3),
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
        a: dict[str, Any] = {m: statistics.fmean(r[m] for r in rs) for m in METRICS}
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
                per[f] = {**{m: round(a[m], 6) for m in METRICS}, "convergence_max": a["convergence_max"],
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
    for i, r in zip(order, done):
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
                     f"{a['reconfigs_per_day']:.1f}", f"{a['core_hours']:.2f}", _conv(a["convergence_max"]),
                     _goals_text(goals_met(a, base)) if base else "?"])
    return rows


COLS = ("config", "availability", "s > R_max", "violated win.", "reconfigs/day", "core-hours", "conv. max", "goals")


def markdown(agg: dict, families: list[str], policies: list[str], head: list[str]) -> str:
    lines = head + [""]
    for f in families:
        lines += [f"**{f}**: {FAMILIES[f]}", "", "| " + " | ".join(COLS) + " |",
                  "|---|" + "---:|" * (len(COLS) - 2) + "---|"]
        lines += ["| " + " | ".join(r) + " |" for r in family_rows(agg, f, policies)] + [""]
    return "\n".join(lines)


def update_docs(table_md: str, doc: Path = ROOT.parent / "docs" / "policies.md") -> None:
    text = doc.read_text()
    begin, end = "<!-- suite:begin -->\n", "<!-- suite:end -->"
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
    train_fams = [f for f in (args.families or (QUICK_FAMILIES if args.quick else TRAIN_FAMILIES)) if f not in HELD_OUT]
    report_fams = train_fams + [f for f in HELD_OUT if f not in train_fams]
    skipped = {}
    for f in list(report_fams):
        try:
            suite_trace(f, train_seeds[0])
        except MissingTraceFile as e:
            skipped[f] = str(e)
            console.print(f"[yellow]note: family {f} skipped: {e}")
    train_fams = [f for f in train_fams if f not in skipped]
    report_fams = [f for f in report_fams if f not in skipped]

    t0 = time.perf_counter()
    train_jobs = [(n, pc, f, s, "train") for n, pc in CANDIDATES.items() for f in train_fams for s in train_seeds]
    console.print(f"training: {len(CANDIDATES)} candidates × {len(train_fams)} families × seeds {list(train_seeds)} "
                  f"= {len(train_jobs)} runs")
    train = _run(train_jobs, args.jobs)
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

    t1 = time.perf_counter()
    tuned_pc = CANDIDATES[tuned["choice"]]
    test_jobs = [(n, pc, f, s, "test") for n, pc in POLICY_CONFIGS.items() for f in report_fams for s in test_seeds]
    if tuned["choice"] not in POLICY_CONFIGS:
        test_jobs += [("tuned", tuned_pc, f, s, "test") for f in report_fams for s in test_seeds]
    test = _run(test_jobs, args.jobs)
    if tuned["choice"] in POLICY_CONFIGS:  # the same config: the same runs, under the label `tuned`
        test += [{**r, "policy": "tuned"} for r in test if r["policy"] == tuned["choice"]]
    t_test = time.perf_counter() - t1
    wall = time.perf_counter() - t0

    policies = [*POLICY_CONFIGS, "tuned"]
    agg = aggregate(test)
    test_scores = {s["name"]: s for s in score(test, policies)}
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
    head += ["", f"{len(train)} training + {len(test_jobs)} test runs, {wall:.0f} s wall with --jobs {args.jobs}."]
    table_md = markdown(agg, report_fams, policies, head)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = "suite_quick" if args.quick else "suite"
    result = {"train_seeds": list(train_seeds), "test_seeds": list(test_seeds), "train_families": train_fams,
              "report_families": report_fams, "skipped": skipped, "families": FAMILIES, "rule": RULE,
              "goals": {k: d for k, (_, d) in GOALS.items()},
              "tuned": {"choice": tuned["choice"], "config": tuned_pc.as_dict(), "training": tuned["scores"]},
              "named_choice": {"choice": named["choice"], "training": named["scores"]},
              "training_ranking": [{k: v for k, v in s.items() if k != "per_family"} for s in tuned["ranking"]],
              "test_scores": test_scores, "wall_s": round(wall, 1), "train_wall_s": round(t_train, 1),
              "test_wall_s": round(t_test, 1), "jobs": args.jobs,
              "candidates": {n: pc.as_dict() for n, pc in CANDIDATES.items()}, "runs": {"train": train, "test": test}}
    (args.out / f"{stem}.json").write_text(json.dumps(result, indent=1, default=str))
    (args.out / f"{stem}_table.md").write_text(table_md)
    if args.update_docs:
        update_docs(table_md)

    for f in report_fams:
        table = Table(title=f"{f} (test seeds {list(test_seeds)}){' [held out]' if f in HELD_OUT else ''}: "
                            f"{FAMILIES[f]}")
        for col in COLS:
            table.add_column(col, justify="left" if col in ("config", "goals") else "right")
        for row in family_rows(agg, f, policies):
            table.add_row(*row, style="bold green" if row[0] == "tuned" else ("bold" if row[0] == BASELINE else None))
        console.print(table)
    summary = Table(title="test: families meeting all goals (A R C V D)")
    for col in ("config", "families", "mean loss"):
        summary.add_column(col, justify="left" if col == "config" else "right")
    for p in policies:
        if p in test_scores:
            summary.add_row(p, f"{test_scores[p]['families_met']}/{test_scores[p]['families']}",
                            f"{test_scores[p]['mean_loss']:.3f}")
    console.print(summary)
    console.print(f"tuned = {tuned['choice']}, named choice = {named['choice']} (both from training only). "
                  f"{len(train)} training runs in {t_train:.0f} s, {len(test_jobs)} test runs in {t_test:.0f} s: "
                  f"{wall:.0f} s wall (--jobs {args.jobs}) → {args.out / (stem + '.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
