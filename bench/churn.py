"""Flip-flops and changes per stage per day of the named configurations on the trace suite (issue 46, item 3).

    .venv/bin/python bench/churn.py --seeds 1 2 3 --jobs 1                  # training seeds: to choose a default
    .venv/bin/python bench/churn.py --seeds 101 102 103 --guard off         # test seeds, the guard turned off
    .venv/bin/python bench/churn.py --set scale_down_delay_s=1800 --json out.json

A flip-flop is plan.stability's: a change reversing the stage's previous one within 900 s. `--guard off`
sets scale_down_delay_s = reversal_interval_s = 0 and drain_backlog_s = 1e12: the control before the guard.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]
from bench.harness import write_result  # noqa: E402
from streamops.sim import POLICY_CONFIGS, run_simulation  # noqa: E402
from streamops.sim.suite import FAMILIES, MissingTraceFile, suite_trace  # noqa: E402

OFF = {"scale_down_delay_s": 0.0, "reversal_interval_s": 0.0, "drain_backlog_s": 1e12}


def _one(job: tuple[str, str, int, dict[str, Any]]) -> dict[str, Any]:
    name, family, seed, over = job
    pc = POLICY_CONFIGS[name].with_overrides(**over) if over else POLICY_CONFIGS[name]
    s = run_simulation(pc, f"suite:{family}:{seed}", seed=seed, plot=False)
    return {"config": name, "family": family, "seed": seed, "flip_flops": s["flip_flops"],
            "changes_per_stage_day": s["changes_per_stage_day"], "seconds_above_rmax": s["seconds_above_rmax"],
            "core_hours": s["core_hours"], "availability": s["availability"]}


def _value(v: str) -> Any:
    try:
        return float(v)
    except ValueError:
        return v


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[101, 102, 103])
    ap.add_argument("--families", nargs="+", choices=list(FAMILIES), default=list(FAMILIES))
    ap.add_argument("--configs", nargs="+", choices=list(POLICY_CONFIGS), default=list(POLICY_CONFIGS))
    ap.add_argument("--guard", choices=("on", "off"), default="on")
    ap.add_argument("--set", nargs="*", default=[], help="option=value overrides (OperatorOptions / AppOptions)")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    over: dict[str, Any] = dict(OFF) if args.guard == "off" else {}
    over.update({k: _value(v) for k, v in (kv.split("=", 1) for kv in args.set)})
    fams = []
    for f in args.families:
        try:
            suite_trace(f, args.seeds[0])
            fams.append(f)
        except MissingTraceFile as e:
            print(f"note: {f} skipped: {e}", file=sys.stderr)
    jobs = [(c, f, s, over) for c in args.configs for f in fams for s in args.seeds]
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs) as ex:
            runs = list(ex.map(_one, jobs))
    else:
        runs = [_one(j) for j in jobs]
    print(f"seeds {args.seeds}, overrides {over or 'none'}: flip-flops (sum over seeds) / changes per stage per day "
          "(mean over seeds)")
    print("| config | " + " | ".join(fams) + " | all: flip-flops | all: changes/stage/day | s > R_max | core-h |")
    print("|---|" + "---:|" * (len(fams) + 4))
    for c in args.configs:
        rs = [r for r in runs if r["config"] == c]
        cells = []
        for f in fams:
            fr = [r for r in rs if r["family"] == f]
            cells.append(f"{sum(r['flip_flops'] for r in fr)} / "
                         f"{statistics.fmean(r['changes_per_stage_day'] for r in fr):.2f}")
        print(f"| {c} | " + " | ".join(cells) + f" | {sum(r['flip_flops'] for r in rs)} | "
              f"{statistics.fmean(r['changes_per_stage_day'] for r in rs):.2f} | "
              f"{statistics.fmean(r['seconds_above_rmax'] for r in rs):.0f} | "
              f"{statistics.fmean(r['core_hours'] for r in rs):.1f} |")
    if args.json:
        write_result(args.json, {"seeds": args.seeds, "overrides": over, "runs": runs}, args, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
