"""Every reconfiguration mechanism × stateful workload, checked against the generator's ground truth.

Each test runs a real stage driver under continuous (realtime) load and reconfigures it
mid-stream; at the end the sink must equal the oracle computed from the generator's valid
records: no key lost, none double-counted.

* the matrix: each mechanism in `mechanisms.MECHANISMS` (picked up at import time, so new
  mechanisms are covered without editing this file) × {wordcount, taxi_top10}, each doing
  scale-out → scale-in → migration in one stage run;
* a seeded random sequence of 10 reconfigurations of one wordcount stage;
* crash safety: the executor is SIGKILLed mid-way and `mechanisms.resume` finishes the job.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest
from sqlalchemy import text

from streamops import generator, registry
from streamops.execute import mechanisms, stages
from streamops.paths import REPO_ROOT
from tests import oracles
from tests.test_e2e_stage import eventually

pytestmark = pytest.mark.e2e

MECHANISM_NAMES = sorted(mechanisms.MECHANISMS)
# workload → (generator kind, workload params)
WORKLOADS = {
    "wordcount": ("web", {}),
    "taxi_top10": ("taxi", {"window_min": 30, "slide_min": 5}),
}
RATE = 120  # rows/s, realtime
# The machine is shared with a Spark benchmark: generous, never timed assertions.
DEADLINES = mechanisms.Deadlines(stop_s=60, first_batch_s=180, caught_up_s=120)
PHASES = ["requested_at", "stop_requested_at", "stopped_at", "state_ready_at", "restarted_at",
          "first_batch_done_at", "caught_up_at", "finished_at"]


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def _registry_data(app: str, workload: str, params: dict, path: str) -> dict:
    stage = {"workload": workload, "source": {"kind": "files", "path": path, "max_files_per_trigger": 3},
             "cores": {"initial": 1, "max": 2}, "state_partitions": 2, "trigger_interval_ms": 1000, "pool": "p1",
             "policy": {"kind": "edf"}, "params": params}
    return {
        "pools": {"p1": {"cores": 2, "network_delay_ms": {"p2": 25}},
                  "p2": {"cores": 2, "network_delay_ms": {"p1": 25}}},
        "apps": {app: {"r_max_ms": 5000, "maintenance_window": {"cron": "0 3 * * *", "duration_min": 30},
                       "stages": {"s": stage}}},
    }


class Feeder:
    """The generator running continuously in the background (realtime), like production load."""

    def __init__(self, path: str, kind: str, seed: int, rate: int = RATE):
        self.out = registry.resolve_path(path)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=generator.generate, daemon=True, kwargs=dict(
            out_dir=self.out, kind=kind, trace=f"constant:rate={rate}", seed=seed, duration_s=600,
            stop_event=self.stop))

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(30)
        assert not self.thread.is_alive(), "the generator did not stop"


def _commits(engine, sid: str) -> int:
    with engine.connect() as conn:
        return conn.execute(text("SELECT count(*) FROM sink_commits WHERE stage_id = :s AND rows > 0"),
                            {"s": sid}).scalar_one()


def _row(engine, rid: int):
    with engine.connect() as conn:
        return conn.execute(text("SELECT * FROM reconfigurations WHERE id = :i"), {"i": rid}).one()


def _deployments(engine, sid: str):
    with engine.connect() as conn:
        return conn.execute(text("SELECT * FROM deployments WHERE stage_id = :s ORDER BY id"), {"s": sid}).all()


def _live(engine, sid: str) -> list:
    return [d for d in _deployments(engine, sid) if d.status in ("starting", "running", "stopping")]


def _open_reconfigurations(engine, sid: str) -> list:
    with engine.connect() as conn:
        return conn.execute(text("SELECT id, status FROM reconfigurations WHERE stage_id = :s "
                                 "AND status IN ('pending','running')"), {"s": sid}).all()


def _wait_new_commit(engine, sid: str, what: str) -> None:
    before = _commits(engine, sid)
    eventually(lambda: _commits(engine, sid) > before, 120, f"a new commit {what}")


def _reconfigure(engine, reg, ref: str, sid: str, mechanism: str, action: str, **target) -> int:
    """request + execute one reconfiguration; it must end done with the target deployed and running."""
    rid = mechanisms.request(ref, action, mechanism=mechanism, reg=reg, requested_by="test-matrix", **target)
    outcome = mechanisms.execute(rid, reg=reg, deadlines=DEADLINES)
    what = f"{action} {target} with {mechanism} (reconfiguration {rid})"
    assert outcome.status == "done", f"{what}: {outcome.status}: {outcome.detail}"
    row = _row(engine, rid)
    assert row.status == "done" and row.mechanism == mechanism, (what, row.status, row.mechanism)
    live = _live(engine, sid)
    assert len(live) == 1 and live[0].status == "running", f"{what}: exactly one running deployment, got {live}"
    dep = live[0]
    if "cores" in target:
        assert dep.cores == target["cores"], what
    if "partitions" in target:
        assert dep.state_partitions == target["partitions"], what
    if "pool" in target:
        assert dep.pool == target["pool"], what
    _wait_new_commit(engine, sid, f"after {what}")
    return rid


def _assert_rows_well_formed(engine, rids: list[int]) -> None:
    for rid in rids:
        row = _row(engine, rid)
        stamps = [getattr(row, p) for p in PHASES]
        missing = [p for p, s in zip(PHASES, stamps) if s is None]
        assert not missing, f"reconfiguration {rid} ({row.action}, {row.mechanism}): phases not stamped: {missing}"
        assert stamps == sorted(stamps), \
            f"reconfiguration {rid}: phases out of order: {list(zip(PHASES, stamps))}"
        assert row.downtime_ms is not None and row.downtime_ms > 0, \
            f"reconfiguration {rid}: downtime measured from the commit gap, got {row.downtime_ms}"


def _settle_and_compare(engine, feeder: Feeder, sid: str, workload: str, params: dict) -> None:
    feeder.__exit__()
    want = oracles.expected(workload, generator.read_valid_records(feeder.out), params)
    assert want, "the generator wrote records"

    def diff():
        got = oracles.actual(engine, sid, workload)
        return got == want

    try:
        eventually(diff, 180, "the sink to equal the ground truth")
    except AssertionError:
        got = oracles.actual(engine, sid, workload)
        lost = {k: v for k, v in want.items() if got.get(k) != v and got.get(k, 0) < v}
        extra = {k: (got[k], want.get(k)) for k in got if got[k] != want.get(k) and got[k] > want.get(k, 0)}
        raise AssertionError(f"sink != ground truth: {len(lost)} keys short (e.g. {list(lost.items())[:5]}), "
                             f"{len(extra)} keys over-counted (e.g. {list(extra.items())[:5]})") from None
    time.sleep(3)  # a doubled batch arriving late would push counts above the truth
    assert oracles.actual(engine, sid, workload) == want, "the sink drifted from the ground truth after matching it"


def _stop_quietly(ref: str, reg) -> None:
    try:
        stages.stop_stage(ref, reg, deadline_s=30, kill_after_s=10, requested_by="test teardown")
    except stages.StageNotRunning:
        pass


# --------------------------------------------------------------------------------------------
# 1. the correctness oracle matrix
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("workload", list(WORKLOADS))
@pytest.mark.parametrize("mechanism", MECHANISM_NAMES)
def test_scale_out_scale_in_migrate_matches_the_oracle(clean_db, mechanism, workload):
    kind, params = WORKLOADS[workload]
    app = f"mx_{mechanism}_{workload}"
    ref, sid = f"{app}.s", f"{app}.s"
    reg = registry.parse(_registry_data(app, workload, params, f"{app}/in"))
    rids: list[int] = []
    try:
        with Feeder(f"{app}/in", kind, seed=31 + len(app)) as feeder:
            first = stages.start_stage(ref, reg, wait_s=180)
            eventually(lambda: _commits(clean_db, sid) >= 2, 180, "two committed batches")
            assert (_live(clean_db, sid)[0].cores, _live(clean_db, sid)[0].pool) == (1, "p1")

            rids.append(_reconfigure(clean_db, reg, ref, sid, mechanism, "scale_out", cores=2, partitions=4))
            rids.append(_reconfigure(clean_db, reg, ref, sid, mechanism, "scale_in", cores=1, partitions=2))
            rids.append(_reconfigure(clean_db, reg, ref, sid, mechanism, "migrate", pool="p2"))
            _settle_and_compare(clean_db, feeder, sid, workload, params)

        _assert_rows_well_formed(clean_db, rids)
        assert not _open_reconfigurations(clean_db, sid)
        live = _live(clean_db, sid)
        assert len(live) == 1, live
        final = live[0]
        assert final.status == "running" and final.id != first.deployment_id
        assert (final.pool, final.cores, final.state_partitions) == ("p2", 1, 2), \
            f"the final run is in p2 with 1 core and 2 partitions, got {final.pool}, {final.cores}, {final.state_partitions}"
    finally:
        _stop_quietly(ref, reg)


# --------------------------------------------------------------------------------------------
# 2. a seeded random walk of reconfigurations
# --------------------------------------------------------------------------------------------

RANDOM_SEED = 20240611
RANDOM_ACTIONS = 10


def _random_plan(seed: int, n: int) -> list[tuple[str, dict]]:
    """n reconfigurations from (1 core, 2 partitions, p1), each changing something."""
    rng = random.Random(seed)
    cores, partitions, pool = 1, 2, "p1"
    plan = []
    while len(plan) < n:
        action = rng.choice(["scale_out", "scale_in", "migrate"])
        new_partitions = rng.choice([2, 3, 4])
        if action == "scale_out":
            new_cores, new_pool = rng.choice([c for c in (1, 2) if c >= cores]), pool
        elif action == "scale_in":
            new_cores, new_pool = rng.choice([c for c in (1, 2) if c <= cores]), pool
        else:
            new_cores, new_pool = rng.randint(1, 2), rng.choice(["p1", "p2"])
            if new_pool == pool:
                continue  # a migration to the pool it is in
        if (new_cores, new_partitions, new_pool) == (cores, partitions, pool):
            continue  # no-op
        target = {"cores": new_cores, "partitions": new_partitions}
        if action == "migrate":
            target["pool"] = new_pool
        plan.append((action, target))
        cores, partitions, pool = new_cores, new_partitions, new_pool
    return plan


def test_ten_random_reconfigurations_in_a_row_match_the_oracle(clean_db):
    plan = _random_plan(RANDOM_SEED, RANDOM_ACTIONS)
    app = "rnd"
    ref, sid = f"{app}.s", f"{app}.s"
    reg = registry.parse(_registry_data(app, "wordcount", {}, f"{app}/in"))
    rids: list[int] = []
    try:
        with Feeder(f"{app}/in", "web", seed=41) as feeder:
            stages.start_stage(ref, reg, wait_s=180)
            eventually(lambda: _commits(clean_db, sid) >= 2, 180, "two committed batches")
            for i, (action, target) in enumerate(plan):
                # Every mechanism in turn: the transitions between mechanisms are covered too.
                mechanism = MECHANISM_NAMES[i % len(MECHANISM_NAMES)]
                try:
                    rids.append(_reconfigure(clean_db, reg, ref, sid, mechanism, action, **target))
                except AssertionError as e:
                    raise AssertionError(f"step {i} of seed {RANDOM_SEED} plan {plan}: {e}") from None
            _settle_and_compare(clean_db, feeder, sid, "wordcount", {})

        _assert_rows_well_formed(clean_db, rids)
        last_action, last = plan[-1]
        final = _live(clean_db, sid)
        assert len(final) == 1 and (final[0].cores, final[0].state_partitions) == (last["cores"], last["partitions"])
    finally:
        _stop_quietly(ref, reg)


# --------------------------------------------------------------------------------------------
# 3. crash safety: the executor dies mid-way, resume() finishes the job
# --------------------------------------------------------------------------------------------

_EXECUTOR = """
import json, sys
from streamops import registry
from streamops.execute import mechanisms
reg = registry.parse(json.loads(sys.argv[1]))
d = json.loads(sys.argv[3])
out = mechanisms.execute(int(sys.argv[2]), reg=reg, deadlines=mechanisms.Deadlines(**d))
print("outcome", out, flush=True)
"""


def _pid_alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _resume_with_retry(reg, timeout_s: float = 60) -> list:
    """resume() raises ReconfigurationBusy while the dead executor's session still holds the lock."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return mechanisms.resume(reg)
        except mechanisms.ReconfigurationBusy:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)


def test_executor_killed_mid_reconfiguration_is_finished_by_resume(clean_db):
    app = "crash"
    ref, sid = f"{app}.s", f"{app}.s"
    data = _registry_data(app, "wordcount", {}, f"{app}/in")
    reg = registry.parse(data)
    executor = None
    try:
        with Feeder(f"{app}/in", "web", seed=51) as feeder:
            first = stages.start_stage(ref, reg, wait_s=180)
            eventually(lambda: _commits(clean_db, sid) >= 2, 180, "two committed batches")
            rid = mechanisms.request(ref, "scale_out", cores=2, partitions=4, reg=reg, requested_by="test-crash")

            env = dict(os.environ)  # STREAMOPS_DATABASE_URL and STREAMOPS_HOME as conftest set them
            assert env.get("STREAMOPS_DATABASE_URL") and env.get("STREAMOPS_HOME")
            executor = subprocess.Popen(
                [sys.executable, "-c", _EXECUTOR, json.dumps(data), str(rid),
                 json.dumps({"stop_s": 60, "first_batch_s": 180, "caught_up_s": 120})],
                env=env, cwd=str(REPO_ROOT), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

            def stopped():
                if executor.poll() is not None:
                    out = executor.stdout.read().decode(errors="replace")
                    raise AssertionError(f"the executor exited before it could be killed mid-way: {out[-2000:]}")
                return _row(clean_db, rid).stopped_at is not None

            eventually(stopped, 180, "the old run to be stopped by the executor", interval=0.1)
            executor.send_signal(signal.SIGKILL)
            executor.wait(30)
            executor.stdout.close()
            killed_at = _row(clean_db, rid)
            assert killed_at.status == "running", "the dead executor left its row running"

            outcomes = _resume_with_retry(reg)
            mine = [o for o in outcomes if o.reconfiguration_id == rid]
            assert len(mine) == 1, f"resume handled reconfiguration {rid} once: {outcomes}"
            assert mine[0].status in ("done", "rolled_back"), mine[0]
            row = _row(clean_db, rid)
            assert row.status == mine[0].status, (row.status, mine[0])
            assert not _open_reconfigurations(clean_db, sid), "nothing left pending or running"

            eventually(lambda: [d.status for d in _live(clean_db, sid)] == ["running"], 180,
                       "exactly one running deployment after resume")
            live = _live(clean_db, sid)[0]
            if row.status == "done":
                assert (live.cores, live.state_partitions) == (2, 4)
            else:
                assert (live.cores, live.state_partitions, live.pool) == (1, 2, "p1"), "back to the old config"
                assert live.id != first.deployment_id
            # No split brain: every other run of the stage, including the one the dead executor
            # launched, is gone.
            for d in _deployments(clean_db, sid):
                if d.id != live.id and d.pid is not None:
                    assert not _pid_alive(d.pid), f"deployment {d.id} ({d.status}) still has a live driver pid {d.pid}"
            _wait_new_commit(clean_db, sid, "after resume")
            _settle_and_compare(clean_db, feeder, sid, "wordcount", {})
    finally:
        if executor is not None and executor.poll() is None:
            executor.kill()
            executor.wait(10)
        _stop_quietly(ref, reg)
