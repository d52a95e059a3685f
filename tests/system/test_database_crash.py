"""PostgreSQL crashing under a running stage (issue 44, "Done when"): the backends serving the
stage's driver are SIGKILLed ten times. A backend killed so makes the postmaster end every other
backend and run crash recovery (the unlogged `sink_staging` comes back empty): the fault a server
crash is, without stopping the server. Nothing acknowledged may be lost and the sink must equal
the ground truth. On a private cluster (tests/system/test_chaos.py's `private_database`): the
session's database, which other tests use, never restarts.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import time
from pathlib import Path

import psutil
import pytest
from sqlalchemy import text

from demo import oracles
from demo.stages import demo_job
from streamops import checkpoint_layout, generator, registry
from streamops.execute import stages, supervisor
from streamops.store import db
from tests.integration.test_e2e_stage import eventually
from tests.integration.test_reconfigure import Feeder
from tests.system.test_chaos import private_database  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.db, pytest.mark.chaos, pytest.mark.slow]

SID = "dbcrash.s"
KILLS = 10


def _registry() -> registry.Registry:
    stage = {**demo_job("wordcount", {"kind": "files", "path": "dbcrash/in", "max_files_per_trigger": 2}),
             "cores": {"initial": 1, "max": 2}, "state_partitions": 2, "trigger_interval_ms": 1000, "pool": "p"}
    return registry.parse({
        "pools": {"p": {"cores": 2}},
        "apps": {"dbcrash": {"r_max_ms": 5000, "maintenance_window": {"cron": "0 3 * * *", "duration_min": 30},
                             "stages": {"s": stage}}},
    })


def _q(sql: str, **params):
    with db.engine().connect() as conn:
        return conn.execute(text(sql), params).all()


def _try_q(sql: str, **params):
    """None while the server is restarting."""
    try:
        return _q(sql, **params)
    except Exception:  # noqa: BLE001 (any error: the server is not back yet)
        return None


def _live_run():
    rows = _try_q("SELECT id, pid FROM deployments WHERE stage_id = :s AND status IN ('starting', 'running') "
                  "ORDER BY id DESC LIMIT 1", s=SID)
    return rows[0] if rows else None


def _driver_backends(driver_pid: int) -> list[int]:
    """The server pids of the sessions the driver's process tree opened (db.connect_args names
    each session `streamops <program> pid=<client pid>`)."""
    try:
        tree = {driver_pid} | {p.pid for p in psutil.Process(driver_pid).children(recursive=True)}
    except psutil.NoSuchProcess:
        return []
    rows = _try_q("SELECT pid, application_name FROM pg_stat_activity WHERE application_name LIKE 'streamops %'") or []
    return [r.pid for r in rows if (m := re.search(r"pid=(\d+)", r.application_name)) and int(m.group(1)) in tree]


def _last_commit():
    rows = _try_q("SELECT max(committed_at) AS last FROM sink_commits WHERE stage_id = :s", s=SID)
    return rows[0].last if rows else None


def test_ten_backend_crashes_under_a_running_stage_lose_nothing_acknowledged(private_database):  # noqa: F811
    for ckpt in registry.resolve_path("checkpoints").glob(SID + "*"):
        shutil.rmtree(ckpt)
    reg = _registry()
    figures = []
    with Feeder("dbcrash/in", seed=44, rate=100) as feeder:
        stages.start_stage(SID, reg)
        sup, stop, thread = supervisor.start_in_thread(reg, supervisor.SupervisorOptions(wait_s=120,
                                                                                         warm_spares=False))
        try:
            eventually(lambda: (_q("SELECT count(*) AS n FROM sink_commits WHERE stage_id = :s AND rows > 0",
                                   s=SID)[0].n >= 3), 180, "three commits")
            for i in range(KILLS):
                run = eventually(_live_run, 120, "a live run")
                backends = eventually(lambda run=run: _driver_backends(run.pid), 30, "the driver's sessions")
                before = _last_commit()
                t0 = time.monotonic()
                for pid in backends:  # root: the postgres user's processes are ours to signal
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                time.sleep(0.5)  # the postmaster notices and starts its reset
                eventually(lambda: _try_q("SELECT 1"), 60, "the server back")
                db_back = time.monotonic() - t0
                eventually(lambda before=before: (c := _last_commit()) is not None and c > before, 180,
                           "a commit after the crash")
                commit_back = time.monotonic() - t0
                after = _live_run()
                figures.append((i + 1, len(backends), db_back, commit_back, after is not None and after.id != run.id))
                print(f"crash {i + 1}: {len(backends)} backend(s) killed; server back {db_back:.1f}s, next commit "
                      f"{commit_back:.1f}s, {'stage restarted' if figures[-1][4] else 'rode through'}")
                time.sleep(3)  # a few batches between crashes
        finally:
            feeder.__exit__()
            want = oracles.expected("wordcount", generator.read_valid_records(feeder.out))
            try:
                eventually(lambda: oracles.actual(db.engine(), SID, "wordcount") == want, 300,
                           "the sink to equal the ground truth")
            finally:
                stop.set()
                thread.join(60)
    # Every batch Spark recorded done (commits/N: its foreachBatch returned, so the apply's
    # transaction was acknowledged) has its commit row: nothing acknowledged was lost.
    ckpts = {r.checkpoint for r in _q("SELECT DISTINCT checkpoint FROM deployments WHERE stage_id = :s", s=SID)}
    done = {b for c in ckpts for b in checkpoint_layout._batch_ids(Path(c) / "commits")}
    logged = {r.batch_id for r in _q("SELECT batch_id FROM sink_commits WHERE stage_id = :s", s=SID)}
    assert done and done <= logged, f"acknowledged batches without a commit row: {sorted(done - logged)[:20]}"
    # each kill was a server crash: the postmaster ended every backend and ran recovery
    resets = Path(private_database.logfile).read_text(errors="replace").count("all server processes terminated")
    assert resets >= KILLS, f"{resets} crash recoveries in the server's log"
    runs = _q("SELECT id, status, stop_reason FROM deployments WHERE stage_id = :s ORDER BY id", s=SID)
    fails = _q("SELECT kind, status, detail FROM failures WHERE stage_id = :s ORDER BY id", s=SID)
    print(f"{KILLS} crashes ({resets} crash recoveries logged): {len(runs)} run(s), "
          f"failures {[(f.kind, f.status) for f in fails]}, "
          f"{len(done)} batches acknowledged, all with commit rows; sink = oracle ({len(want)} words)")
    back, commit = sorted(f[2] for f in figures), sorted(f[3] for f in figures)
    print(f"median server back {back[KILLS // 2]:.1f}s, median next commit {commit[KILLS // 2]:.1f}s")
    stages.stop_stage(SID, reg, deadline_s=30)
