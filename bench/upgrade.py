"""The output gap of upgrading a team's stateful job (issue 43): the session-window job of
tests/fixtures/jobs/sessions_team, fed as its test feeds it, upgraded RUNS times in a row by
`deploy`'s path (an `upgrade` reconfiguration; `--mechanism`, active_backup by default, or `auto`,
deploy's default: the cost rule, or pause_resume),
alternating between two versions of its code (the same state and output, different code).

Per upgrade: the mechanism, the output gap (`reconfigurations.downtime_ms`: the longest wait
between commits around the change), its duration, and the 1-minute load. At the end the sessions
in the sink equal the oracle of tests/integration/test_own_jobs.py. Scratch database
`streamops_bench_upgrade` and a temporary STREAMOPS_HOME, removed at the end.

    .venv/bin/python bench/upgrade.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "plugins"), str(REPO)]

from bench.harness import scratch_run, write_result  # noqa: E402
from streamops import quality, registry  # noqa: E402
from streamops.execute import reconfigure, stages  # noqa: E402
from streamops.store import db  # noqa: E402
from streamops.waiting import wait_until  # noqa: E402
from tests.integration import test_own_jobs as own  # noqa: E402

SCRATCH_DB = "streamops_bench_upgrade"
SID = "own.sessions"


def _registry(code: Path) -> registry.Registry:
    base = own._registry().model_dump(mode="json", by_alias=True)
    stage = base["apps"]["own"]["stages"]["sessions"]
    stage.update(code=[str(code)])
    stage["source"]["max_files_per_trigger"] = 20  # one core keeps up with the feeder (at 3 it fell behind)
    stage["sink"].pop("table")
    return registry.parse({"pools": base["pools"], "apps": {"own": {**base["apps"]["own"],
                                                                     "stages": {"sessions": stage}}}})


def _commits() -> int:
    return db.value("bench/commits_with_rows") or 0  # the scratch database holds this stage only


def run(runs: int, say, mechanism: str = "active_backup") -> dict:
    code = Path(os.environ["STREAMOPS_HOME"]) / "sessions_team"
    shutil.copytree(REPO / "tests" / "fixtures" / "jobs" / "sessions_team", code)
    v1 = (code / "sessions" / "job.py").read_text()
    versions = [v1.replace('"clicks", "last_click")', '"clicks", "last_click")  # v2'), v1]
    reg = _registry(code)
    samples = []
    with own.ClickFeeder("own/sessions", seed=11) as feeder:
        stages.start_stage(SID, reg, wait_s=300)
        wait_until(lambda: _commits() >= 3, 300, interval_s=1.0)
        for i in range(runs):
            (code / "sessions" / "job.py").write_text(versions[i % 2])
            load = os.getloadavg()[0]
            rid = reconfigure.request(SID, "upgrade", mechanism=mechanism, reg=reg, requested_by="bench")
            o = reconfigure.execute(rid, gate=quality.gate_new_run, reg=reg)
            row = db.row("bench/reconfiguration", i=rid)
            samples.append({"run": i + 1, "status": str(o.status), "mechanism": row.mechanism,
                            "output_gap_s": None if o.downtime_ms is None else round(o.downtime_ms / 1000, 2),
                            "took_s": round(o.seconds, 1), "loadavg_1m": round(load, 2)})
            say(f"upgrade {i + 1}: {samples[-1]}")
            before = _commits()
            wait_until(lambda b=before: _commits() >= b + 2, 300, interval_s=1.0)  # settled before the next
        feeder.stop.set()
        feeder.thread.join(10)
        last = max(datetime.fromisoformat(r["ts"]) for r in own._valid(feeder.lines))
        feeder.write([json.dumps({"user": own.FLUSH_USER, "url": "https://shop.example",
                                  "ts": (last + timedelta(hours=1)).isoformat()}).encode()])
    want = own._sessions([r for r in own._valid(feeder.lines) if r["user"] != own.FLUSH_USER])
    equal = bool(wait_until(lambda: own._sink_sessions(db.engine(), SID) == want, 300, interval_s=2.0))
    stages.stop_stage(SID, reg, deadline_s=30, requested_by="bench")
    gaps = [s["output_gap_s"] for s in samples if s["output_gap_s"] is not None]
    return {"runs": samples, "sessions": len(want), "sink_equals_oracle": equal,
            "output_gap_s": {"median": statistics.median(gaps), "min": min(gaps), "max": max(gaps)} if gaps else None,
            "took_s_median": statistics.median(s["took_s"] for s in samples)}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--mechanism", default="active_backup",
                   help="active_backup (the issue's measure), pause_resume, or auto (deploy's default: the cost rule)")
    args = p.parse_args(argv)
    say = lambda m: print(f"{time.strftime('%H:%M:%S')} {m}", flush=True)  # noqa: E731
    with scratch_run(SCRATCH_DB, "streamops-bench-upgrade-"):
        result = run(args.runs, say, args.mechanism)
    write_result("upgrade.json", result, args)
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=2))
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
