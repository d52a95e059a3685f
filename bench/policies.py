"""Every named control configuration on the shared traces, with fixed seeds, in the simulator.

    .venv/bin/python bench/policies.py                # all configs × diurnal ramp steps spikes × seeds 1 2 3
    .venv/bin/python bench/policies.py --traces diurnal --seeds 1 2 3 4 5 --jobs 2

Writes bench/results/policies.json (a list of run summaries), bench/results/policies_table.md
(the mean-over-seeds table pasted into docs/policies.md) and, per run,
bench/results/<trace>/<policy>/seed<k>/summary.json (+ response.png for the first seed).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from rich.console import Console

sys.path[:0] = [str(Path(__file__).resolve().parents[1])]
from bench.harness import table, write_result  # noqa: E402
from streamops.sim import POLICY_CONFIGS, run_simulation  # noqa: E402

ROOT = Path(__file__).resolve().parent
TRACES = ["diurnal", "ramp", "steps", "spikes"]
SEEDS = [1, 2, 3]
BASELINE, OURS = "edf_b075", "threshold3_tuned"


def _one(job: tuple[str, str, int, str, bool]) -> dict:
    policy, trace, seed, out, png = job
    out_dir = Path(out) / trace / policy / f"seed{seed}"
    return run_simulation(policy, trace, seed=seed, out_dir=out_dir, plot=png)


def aggregate(runs: list[dict]) -> dict[tuple[str, str], dict]:
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in runs:
        groups.setdefault((r["trace"], r["policy"]), []).append(r)
    agg = {}
    for key, rs in groups.items():
        mean = lambda k, rs=rs: statistics.fmean(r[k] for r in rs)  # noqa: E731
        agg[key] = {
            "seeds": len(rs),
            "availability": mean("availability"),
            "downtime_s": mean("downtime_s"),
            "seconds_above_rmax": mean("seconds_above_rmax"),
            "violated_windows": mean("violated_windows"),
            "above_after_reconfig": mean("seconds_above_rmax_reconfig"),
            "scale_out": statistics.fmean(r["reconfigurations"]["scale_out"] for r in rs),
            "scale_in": statistics.fmean(r["reconfigurations"]["scale_in"] for r in rs),
            "core_hours": mean("core_hours"),
            # None when the trace has no step change (diurnal, ramp)
            "convergence_max": max((r["convergence_decisions_max"] for r in rs if r["convergence_decisions"]),
                                   default=None),
        }
    return agg


def _conv(a: dict) -> str:
    return "–" if a["convergence_max"] is None else str(a["convergence_max"])


def verdict(agg: dict, trace: str = "diurnal") -> tuple[bool, str]:
    b, o = agg.get((trace, BASELINE)), agg.get((trace, OURS))
    if not b or not o:
        return False, "baseline or recommended missing"
    checks = {
        "fewer seconds above R_max": o["seconds_above_rmax"] < b["seconds_above_rmax"],
        "no more downtime": o["downtime_s"] <= b["downtime_s"],
        "no more core-hours": o["core_hours"] <= b["core_hours"],
    }
    ok = all(checks.values())
    text = ", ".join(f"{k}: {'yes' if v else 'NO'}" for k, v in checks.items())
    return ok, f"{OURS} vs {BASELINE} on {trace}: {text}"


def markdown(agg: dict, traces: list[str], policies: list[str]) -> str:
    lines = ["| trace | config | availability | downtime s | s > R_max | of which ≤ 60 s after a restart "
             "| violated windows | scale-outs | scale-ins | core-hours | max decisions to converge |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for t in traces:
        for p in policies:
            a = agg.get((t, p))
            if a:
                lines.append(f"| {t} | {p} | {a['availability']:.4%} | {a['downtime_s']:.1f} | "
                             f"{a['seconds_above_rmax']:.1f} | {a['above_after_reconfig']:.1f} | "
                             f"{a['violated_windows']:.1f} | {a['scale_out']:.1f} | {a['scale_in']:.1f} | "
                             f"{a['core_hours']:.2f} | {_conv(a)} |")
    return "\n".join(lines) + "\n"


def update_docs(table_md: str, doc: Path = ROOT.parent / "docs" / "policies.md") -> None:
    text = doc.read_text()
    begin, end = "<!-- bench:begin -->\n", "<!-- bench:end -->"
    i, j = text.index(begin) + len(begin), text.index(end)
    doc.write_text(text[:i] + table_md + text[j:])


COLS = ("config", "availability", "downtime s", "s > R_max", "violated win.", "scale-outs", "scale-ins", "core-hours",
        "conv. max")


def _row(p: str, a: dict) -> list[str]:
    return [p, f"{a['availability']:.4%}", f"{a['downtime_s']:.1f}", f"{a['seconds_above_rmax']:.1f}",
            f"{a['violated_windows']:.1f}", f"{a['scale_out']:.1f}", f"{a['scale_in']:.1f}", f"{a['core_hours']:.2f}",
            _conv(a)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--traces", nargs="+", default=TRACES)
    ap.add_argument("--policies", nargs="+", default=list(POLICY_CONFIGS))
    ap.add_argument("--seeds", nargs="+", type=int, default=SEEDS)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", type=Path, default=ROOT / "results")
    ap.add_argument("--update-docs", action="store_true",
                    help="replace the measured table in docs/policies.md (between the bench:begin/end markers)")
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    jobs = [(p, t, s, str(args.out), s == args.seeds[0])
            for t in args.traces for p in args.policies for s in args.seeds]
    if args.jobs > 1:
        with ProcessPoolExecutor(args.jobs) as ex:
            runs = list(ex.map(_one, jobs))
    else:
        runs = [_one(j) for j in jobs]
    wall = time.perf_counter() - t0

    write_result(args.out / "policies.json", runs, args, indent=1)
    agg = aggregate(runs)
    table_md = markdown(agg, args.traces, args.policies)
    (args.out / "policies_table.md").write_text(table_md)
    if args.update_docs:
        update_docs(table_md)

    console = Console(width=130)
    for t in args.traces:
        shown = [p for p in args.policies if agg.get((t, p))]
        console.print(table(f"{t}: mean over seeds {args.seeds}", COLS, [_row(p, agg[(t, p)]) for p in shown],
                            left=("config",),
                            styles=["bold green" if p == OURS else ("bold" if p == BASELINE else None) for p in shown]))
    if "diurnal" in args.traces:
        ok, text = verdict(agg)
        console.print(("[green]" if ok else "[red]") + text)
    console.print(f"{len(runs)} runs in {wall:.1f} s wall → {args.out / 'policies.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
