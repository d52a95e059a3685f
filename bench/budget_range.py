"""The range the error budget moves mpc's price in (issue 46 item 2, plan/budget.py): per range
or fixed price, on the suite's families and seeds, the share of seconds within R_max against the
apps' slo_target, the core-hours, flip-flops and changes per stage per day.

    .venv/bin/python bench/budget_range.py                                # training seeds 1 2 3
    .venv/bin/python bench/budget_range.py --seeds 101 102 103 --ranges 0.5-2 --prices 320
    .venv/bin/python bench/budget_range.py --ranges 0.5-2 --prices --set pool_kind=standalone   # one model change

About 8 s per simulation on the 2-core machine; 2 processes. Writes bench/results/budget_range.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]
from bench.harness import console, table, write_result  # noqa: E402
from streamops.sim import POLICY_CONFIGS, PolicyConfig, SimConfig, run_simulation  # noqa: E402
from streamops.sim.suite import FAMILIES, TRAIN_FAMILIES, TRAIN_SEEDS  # noqa: E402

MPC = POLICY_CONFIGS["mpc"]


def _one(job: tuple[str, str, int, dict[str, Any]]) -> dict[str, Any]:
    variant, family, seed, overrides = job
    from streamops.plan import budget  # each worker sets the range it simulates

    if variant.startswith("fixed "):
        pc = PolicyConfig(variant, "mpc", {**MPC.operator_options, "slo_price": float(variant[6:])}, MPC.app_options)
    else:
        lo, hi = (float(x) for x in variant.split("-"))
        budget.MIN_FACTOR, budget.MAX_FACTOR = lo, hi
        pc = MPC
    s = run_simulation(pc, f"suite:{family}:{seed}", seed=seed, plot=False, **overrides)
    return {"variant": variant, "family": family, "seed": seed, "sla_compliance": s["sla_compliance"],
            "core_hours": s["core_hours"], "flip_flops": s["flip_flops"],
            "changes_per_stage_day": s["changes_per_stage_day"]}


def _setting(kv: str, ap: argparse.ArgumentParser) -> tuple[str, Any]:
    key, eq, value = kv.partition("=")
    if not eq or not key:
        ap.error(f"--set {kv!r}: expected KEY=VALUE")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranges", nargs="+", default=["0.0625-16", "0.25-4", "0.5-4", "0.5-2", "1-2"],
                    help="price ranges, as factors of the base price: LOW-HIGH")
    ap.add_argument("--prices", nargs="*", type=float, default=[320.0, 640.0], help="fixed prices beside them")
    ap.add_argument("--families", nargs="+", choices=list(FAMILIES), default=list(TRAIN_FAMILIES))
    ap.add_argument("--seeds", nargs="+", type=int, default=list(TRAIN_SEEDS))
    ap.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                    help="SimConfig, OperatorOptions or AppOptions fields for every run (a JSON value or a string), "
                         "e.g. pool_kind=standalone control_interval_s=30")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args(argv)
    overrides = dict(_setting(kv, ap) for kv in args.set)
    variants = [*args.ranges, *(f"fixed {p:g}" for p in args.prices)]
    jobs = [(v, f, s, overrides) for v in variants for f in args.families for s in args.seeds]
    with console.status(f"{len(jobs)} simulations …"), ProcessPoolExecutor(args.jobs) as ex:
        runs = list(ex.map(_one, jobs))
    target = SimConfig().slo_target
    rows = []
    for v in variants:
        per = {f: [r for r in runs if r["variant"] == v and r["family"] == f] for f in args.families}
        within = {f: statistics.fmean(r["sla_compliance"] for r in rs) for f, rs in per.items()}
        rows.append([v, f"{sum(w >= target for w in within.values())}/{len(per)}",
                     f"{statistics.fmean(r['core_hours'] for r in runs if r['variant'] == v):.1f}",
                     str(sum(r["flip_flops"] for r in runs if r["variant"] == v)),
                     f"{max(r['changes_per_stage_day'] for r in runs if r['variant'] == v):.1f}",
                     " ".join(f"{f[:8]}:{w:.2%}" for f, w in within.items())])
    console.print(table(f"mpc's price range, seeds {args.seeds} (target: {target:.0%} of seconds within R_max)",
                        ("range / price", "families meeting it", "mean core-h", "flip-flops", "most changes/stage/day",
                         "within R_max per family"), rows, left=("range / price", "within R_max per family")))
    write_result("budget_range.json", {"runs": runs, "target": target, "overrides": overrides}, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
