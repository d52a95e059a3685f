"""The HA comparison of docs/ha.md in the simulator (`sim.ha_comparison`): one replica, two static
replicas and the redundancy manager on the same faults, means of seeds 1-3.

The setup of docs/ha.md: the wordcount stage at 130 rows/s (65 % busy, `sim.run.HA_TRACE`), a
restart of 8.3 s (the measured warm MTTR), driver kills at an MTBF of 90 s and slow batches of
~5 s at 30 s, 30 minutes; the variant with faults only in minutes 5-15 (`--fault-periods`).

    .venv/bin/python bench/ha_sim.py
    .venv/bin/python bench/ha_sim.py --fault-periods 300:900
    .venv/bin/python bench/ha_sim.py --param add_violation_rate=0      # the manager without the proactive rule
    .venv/bin/python bench/ha_sim.py --param add_violation_rate=0 --param hold_periods=0   # Algorithm 2 alone

Prints a markdown table (relative figures against one replica) and, with --json, the rows.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins"))
from streamops.sim.run import HA_TRACE, ha_comparison  # noqa: E402


def measure(seeds: list[int], trace: str = HA_TRACE, fault_periods: list[tuple[float, float]] | None = None,
            params: dict[str, Any] | None = None, **kw: Any) -> list[dict[str, Any]]:
    extra: dict[str, Any] = {"fault_periods": fault_periods} if fault_periods else {}
    return [r for seed in seeds
            for r in ha_comparison(trace, seed=seed, mtbf_s=kw.get("mtbf_s", 90.0),
                                   slow_mtbf_s=kw.get("slow_mtbf_s", 30.0), restart_s=kw.get("restart_s", 8.3),
                                   redundancy_params=params, **extra)]


def table(rows: list[dict[str, Any]]) -> str:
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault(r["setup"], []).append(r)
    base = by["1 replica"]
    vw0 = statistics.mean(r["violated_windows"] for r in base)
    ch0 = statistics.mean(r["core_hours"] for r in base)
    out = ["| setup | violated 1 s windows | core-hours | output gap per failure | per seed (windows) |",
           "|---|---|---|---|---|"]
    for name, rs in by.items():
        vw = statistics.mean(r["violated_windows"] for r in rs)
        ch = statistics.mean(r["core_hours"] for r in rs)
        gaps = [r["output_gap_s_per_failure"] for r in rs if r["output_gap_s_per_failure"] is not None]
        rel = "" if rs is base else f" ({vw / vw0 - 1:+.0%})"
        crel = "" if rs is base else f" ({ch / ch0 - 1:+.0%})"
        gap = f"{statistics.mean(gaps):.1f} s" if gaps else "-"
        seeds = ", ".join(str(r["violated_windows"]) for r in rs)
        windows = f"{vw:,.0f}".replace(",", " ")  # docs/ha.md writes 1 141
        out.append(f"| {name} | {windows}{rel} | {ch:.2f}{crel} | {gap} | {seeds} |")
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--trace", default=HA_TRACE)
    p.add_argument("--fault-periods", nargs="*", default=[], help="start:end seconds in which faults strike")
    p.add_argument("--param", action="append", default=[], help="a RedundancyOptions override, name=value")
    p.add_argument("--json", action="store_true", help="print the rows as JSON too")
    a = p.parse_args()
    periods = [(float(x.split(":")[0]), float(x.split(":")[1])) for x in a.fault_periods]
    params = {k: float(v) for k, v in (x.split("=", 1) for x in a.param)}
    rows = measure(a.seeds, a.trace, periods, params)
    print(table(rows))
    if a.json:
        print(json.dumps(rows, indent=1, default=str))


if __name__ == "__main__":
    main()
