"""How `recommended` was found: candidate option VALUES (no code changes) on the diurnal trace,
mean over fixed seeds, each compared with EDF's setup (edf_b075) on the three criteria:
fewer seconds above R_max, no more downtime, no more core-hours.

    .venv/bin/python bench/search_recommended.py [--trace diurnal] [--seeds 1 2 3]

Writes bench/results/search_<trace>.json and prints the table (about 15 s on 2 cores).
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from rich.console import Console

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]
from bench.harness import table, write_result  # noqa: E402
from streamops.sim import POLICY_CONFIGS, PolicyConfig, run_simulation  # noqa: E402

ROOT = Path(__file__).resolve().parent
B = {"policy": "token_bucket", "generator": "edf_step", "beta": 0.75}

CANDIDATES: dict[str, PolicyConfig] = {
    "edf_b075": POLICY_CONFIGS["edf_b075"],
    "edf_b075_B2": PolicyConfig("edf_b075_B2", "edf", {}, {**B, "capacity": 2.0}),
    "edf_s_out0.8": PolicyConfig("edf_s_out0.8", "edf", {"s_out": 0.8}, B),
    "edf_proportional": PolicyConfig("edf_proportional", "edf", {}, {**B, "generator": "proportional"}),
    "ds2": POLICY_CONFIGS["ds2"],
    "ds2_tu0.8_m0.5": PolicyConfig("ds2_tu0.8_m0.5", "ds2", {"target_utilization": 0.8, "ds2_scale_in_margin": 0.5}, B),
    "ds2_tu0.6_m0.45": PolicyConfig("ds2_tu0.6_m0.45", "ds2",
                                    {"target_utilization": 0.6, "ds2_scale_in_margin": 0.45}, B),
    "ds2_B2": PolicyConfig("ds2_B2", "ds2", {}, {**B, "capacity": 2.0}),
    "threshold3": POLICY_CONFIGS["threshold3"],
    "t3_a55": PolicyConfig("t3_a55", "threshold3", {"alarming_threshold": 55.0}, B),
    "t3_tu0.6": PolicyConfig("t3_tu0.6", "threshold3", {"target_utilization": 0.6}, B),
    "t3_a55_tu0.6": PolicyConfig("t3_a55_tu0.6", "threshold3",
                                 {"alarming_threshold": 55.0, "target_utilization": 0.6}, B),
    "t3_a55_tu0.6_B2": PolicyConfig("t3_a55_tu0.6_B2", "threshold3",
                                    {"alarming_threshold": 55.0, "target_utilization": 0.6}, {**B, "capacity": 2.0}),
    "t3_a55_tu0.6_b0.5": PolicyConfig("t3_a55_tu0.6_b0.5", "threshold3",
                                      {"alarming_threshold": 55.0, "target_utilization": 0.6}, {**B, "beta": 0.5}),
    "t3_so75_a55": PolicyConfig("t3_so75_a55", "threshold3",
                                {"alarming_threshold": 55.0, "scale_out_threshold": 75.0}, B),
    "t3_so75_a55_tu0.6": PolicyConfig("t3_so75_a55_tu0.6", "threshold3",
                                      {"scale_out_threshold": 75.0, "alarming_threshold": 55.0,
                                       "target_utilization": 0.6}, B),
    "t3_so70_a55_tu0.6_B2": PolicyConfig("t3_so70_a55_tu0.6_B2", "threshold3",
                                         {"scale_out_threshold": 70.0, "alarming_threshold": 55.0,
                                          "target_utilization": 0.6}, {**B, "capacity": 2.0}),
    "t3_si20": PolicyConfig("t3_si20", "threshold3", {"scale_in_threshold": 20.0}, B),
    "recommended": POLICY_CONFIGS["threshold3_tuned"],  # so named until issue 29
}


def _one(job: tuple[str, str, int]) -> tuple[str, int, dict]:
    name, trace, seed = job
    return name, seed, run_simulation(CANDIDATES[name], trace, seed=seed, plot=False)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trace", default="diurnal")
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    jobs = [(n, args.trace, s) for n in CANDIDATES for s in args.seeds]
    with ProcessPoolExecutor(args.jobs) as ex:
        runs = list(ex.map(_one, jobs))
    agg: dict[str, dict] = {}
    k = len(args.seeds)
    for name, _seed, s in runs:
        a = agg.setdefault(name, {"above": 0.0, "down": 0.0, "ch": 0.0, "rec": 0.0})
        a["above"] += s["seconds_above_rmax"] / k
        a["down"] += s["downtime_s"] / k
        a["ch"] += s["core_hours"] / k
        a["rec"] += s["reconfigurations_total"] / k
    base = agg["edf_b075"]
    for name, a in agg.items():
        a["beats_edf_b075"] = a["above"] < base["above"] and a["down"] <= base["down"] and a["ch"] <= base["ch"]
        a["config"] = CANDIDATES[name].as_dict()
    out = write_result(ROOT / "results" / f"search_{args.trace}.json", agg, args, indent=1, stamp=False)
    ranked = sorted(agg.items(), key=lambda kv: kv[1]["above"])
    Console(width=120).print(table(
        f"{args.trace}, mean over seeds {args.seeds}: who beats edf_b075 on all three?",
        ("candidate", "s > R_max", "downtime s", "core-hours", "reconfigs", "beats"),
        [[name, f"{a['above']:.1f}", f"{a['down']:.1f}", f"{a['ch']:.2f}", f"{a['rec']:.1f}",
          "yes" if a["beats_edf_b075"] else ""] for name, a in ranked], left=("candidate",),
        styles=["bold green" if name == "recommended" else None for name, _ in ranked]))
    print(f"{len(runs)} runs in {time.perf_counter() - t0:.1f} s → {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
