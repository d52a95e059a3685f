"""High availability end to end: the supervisor's failover and replica sets, on real drivers.

The oracle is the ground truth of one failure-free run (demo/oracles.py): whatever is killed, the
final sink must equal it row for row, never more (a doubled batch) and never less.
"""

from __future__ import annotations

import os
import shutil
import signal
import time

import pytest
from sqlalchemy import text

from demo import oracles
from demo.stages import demo_job
from streamops import generator, registry
from streamops.execute import replicas, stages, supervisor
from tests.integration.test_e2e_stage import eventually
from tests.integration.test_reconfigure import Feeder

pytestmark = [pytest.mark.e2e, pytest.mark.db]


def _registry(workload: str = "wordcount", replicas_: int = 1, path: str = "ha/in", **extra) -> registry.Registry:
    stage = {**demo_job(workload, {"kind": "files", "path": path, "max_files_per_trigger": 2}),
             "cores": {"initial": 1, "max": 2}, "state_partitions": 2, "trigger_interval_ms": 1000, "pool": "p",
             "replicas": replicas_, **extra}
    return registry.parse({
        "pools": {"p": {"cores": 2}, "q": {"cores": 2}},
        "apps": {"ha": {"r_max_ms": 5000, "maintenance_window": {"cron": "0 3 * * *", "duration_min": 30},
                        "stages": {"s": stage}}},
    })


def _run(engine, dep_id: int):
    with engine.connect() as conn:
        return conn.execute(text("SELECT * FROM deployments WHERE id = :i"), {"i": dep_id}).one()


def _commits_by(engine, dep_id: int) -> int:
    with engine.connect() as conn:
        return conn.execute(text("SELECT count(*) FROM sink_commits WHERE deployment_id = :d AND rows > 0"),
                            {"d": dep_id}).scalar_one()


def _failures(engine, sid: str) -> list:
    with engine.connect() as conn:
        return conn.execute(text("SELECT * FROM failures WHERE stage_id = :s ORDER BY id"), {"s": sid}).all()


def _kill(pid: int) -> None:
    os.killpg(pid, signal.SIGKILL)  # the driver and its JVM, as a lost machine


@pytest.fixture(autouse=True)
def _fresh_checkpoints():
    """Every test's stage is `ha.s`: its checkpoints (and its replicas') start empty."""
    for ckpt in registry.resolve_path("checkpoints").glob("ha.s*"):
        shutil.rmtree(ckpt)


@pytest.fixture
def supervised():
    """A supervisor in this process, polling every 0.5 s; stopped after the test."""
    running = []

    def start(reg, warm_spares: bool = True):
        # a spare waits for batches within R_max, here at most 60 s: the tests kill mid-stream
        sup, stop, thread = supervisor.start_in_thread(reg, supervisor.SupervisorOptions(
            wait_s=90, warm_spares=warm_spares, spare_at_most_after_s=60.0))
        running.append((stop, thread))
        return sup

    yield start
    for stop, thread in running:
        stop.set()
        thread.join(120)


def test_the_supervisor_hands_a_killed_driver_to_a_warm_spare_and_nothing_is_lost(clean_db, supervised):
    reg = _registry()
    # A realtime feed that runs on through the crash: the spare is built only once the run has been
    # running for a while, and the crash must land mid-stream.
    with Feeder("ha/in", seed=3) as feeder:
        first = stages.start_stage("ha.s", reg)
        sup = supervised(reg)
        eventually(lambda: _commits_by(clean_db, first.deployment_id) >= 3, 120, "three committed batches")
        spare_pid = eventually(lambda: sup.spare_ready("ha.s"), 180, "a warm spare driver")
        _kill(first.pid)

        f = eventually(lambda: [x for x in _failures(clean_db, "ha.s") if x.status == "recovered"], 150,
                       "the supervisor to recover the stage")[0]
        assert f.kind == "dead_pid" and f.detected_by == "supervisor" and f.cause == "real", f
        print(f"MTTR {f.mttr_ms / 1000:.1f}s, output gap {f.downtime_ms / 1000:.1f}s (a single run)")
        assert f.deployment_id == first.deployment_id and f.recovery_deployment_id != first.deployment_id
        assert _run(clean_db, f.recovery_deployment_id).pid == spare_pid, "the restart went to the warm spare"
        assert f.mttr_ms is not None and f.mttr_ms > 0 and f.downtime_ms >= f.mttr_ms * 0.5, f
        # Detection is one poll, not a schedule: the failure row is written within seconds of the kill.
        assert (f.detected_at - f.failed_at).total_seconds() < 5, (f.detected_at, f.failed_at)
        eventually(lambda: [r for r in sup.recoveries if r.status == "recovered"], 30, "the supervisor's own account")
        eventually(lambda: _commits_by(clean_db, f.recovery_deployment_id) >= 3, 120,
                   "the stream going on after the crash")
    want = oracles.expected("wordcount", generator.read_valid_records(feeder.out))
    eventually(lambda: oracles.actual(clean_db, "ha.s", "wordcount") == want, 180, "the sink to equal the ground truth")
    assert _run(clean_db, first.deployment_id).status == "failed"
    stages.stop_stage("ha.s", reg, deadline_s=30)


def _replicated(clean_db, supervised, workload: str, kind: str, seconds: int, seed: int):
    """A 2-replica stage on its input, both replicas committing, under a supervisor: (reg, want)."""
    reg = _registry(workload, replicas_=2, path=f"ha/{workload}")
    inputs = registry.resolve_path(f"ha/{workload}")
    generator.generate(inputs, kind, "constant:rate=150", seed=seed, duration_s=seconds, realtime=False)
    want = oracles.expected(workload, generator.read_valid_records(inputs))
    stages.start_stage("ha.s", reg)
    assert replicas.reconcile(reg, wait_s=120).started == ["ha.s replica-1"]
    live = replicas.live_roles("ha.s")
    assert live["replica-1"].pool == "q", "a replica goes to another pool when one has room"
    assert live["replica-1"].checkpoint != live["primary"].checkpoint
    supervised(reg, warm_spares=False)  # cold restarts: the replica alone must carry the output
    eventually(lambda: all(_commits_by(clean_db, d.id) >= 2 for d in live.values()), 120, "both replicas committing")
    return reg, want


def _all_closed(engine) -> list:
    # A restart on a drained source is judged healthy after half its wait (it has nothing to commit).
    return eventually(lambda: (r := _failures(engine, "ha.s")) and all(x.status != "recovering" for x in r) and r,
                      120, "every failure closed")


@pytest.mark.slow  # 100 s: the replicas' failure-free output is the HA matrix's too (make test-reconfig); make test-all
def test_replicas_keep_the_output_going_and_equal_to_one_failure_free_run(clean_db, supervised):
    reg, want = _replicated(clean_db, supervised, "wordcount", "web", 30, 11)
    live = replicas.live_roles("ha.s")
    primary, backup = live["primary"], live["replica-1"]

    # The primary dies: the replica keeps committing while the supervisor restarts it.
    before = _commits_by(clean_db, backup.id)
    _kill(primary.pid)
    eventually(lambda: _commits_by(clean_db, backup.id) >= before + 2, 30, "the replica to keep committing")
    eventually(lambda: oracles.actual(clean_db, "ha.s", "wordcount") == want, 240, "the sink to equal the ground truth")
    eventually(lambda: set(replicas.live_roles("ha.s")) == {"primary", "replica-1"}, 120, "both replicas back")
    (f,) = _all_closed(clean_db)
    assert (f.role, f.status, f.detected_by) == ("primary", "recovered", "supervisor"), f
    print(f"primary killed: MTTR {f.mttr_ms / 1000:.1f}s, stage output gap {f.downtime_ms / 1000:.1f}s")
    # The stage's output gap ends with the replica's next commit, not with the restart.
    assert f.downtime_ms < f.mttr_ms, f
    assert oracles.actual(clean_db, "ha.s", "wordcount") == want
    # A stop under the running supervisor: its replica reconcile must not start a replica again
    # between the replicas' stop and the primary's (one used to run on alone afterwards).
    replicas.stop_with_replicas("ha.s", reg, deadline_s=30)
    time.sleep(supervisor.SupervisorOptions().housekeeping_s + 2)
    assert replicas.live_roles("ha.s") == {}, "nothing of the stage runs after its stop"


@pytest.mark.reconfig_matrix
@pytest.mark.parametrize("workload,kind", [("wordcount", "web"), ("taxi_top10", "taxi")])
def test_both_replicas_killed_one_after_the_other_still_give_the_failure_free_output(clean_db, supervised,
                                                                                      workload, kind):
    reg, want = _replicated(clean_db, supervised, workload, kind, 40, 13)
    live = replicas.live_roles("ha.s")
    _kill(live["replica-1"].pid)
    eventually(lambda: any(x.role == "replica-1" for x in _failures(clean_db, "ha.s")), 30, "the replica's failure")
    _kill(live["primary"].pid)  # while the replica is still being restarted
    eventually(lambda: oracles.actual(clean_db, "ha.s", workload) == want, 300, "the sink to equal the ground truth")
    eventually(lambda: set(replicas.live_roles("ha.s")) == {"primary", "replica-1"}, 120, "both replicas back")
    rows = _all_closed(clean_db)
    assert sorted((x.role, x.status) for x in rows) == [("primary", "recovered"), ("replica-1", "recovered")], rows
    assert oracles.actual(clean_db, "ha.s", workload) == want
    replicas.stop_with_replicas("ha.s", reg, deadline_s=30)


def _metrics(engine, dep_id: int, p95_ms: float, seconds: int = 10) -> None:
    """Batches of the last `seconds`, one per second, each with this p95 response time."""
    with engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO stage_metrics (ts, stage_id, deployment_id, run_id, batch_id, input_rows, batch_duration_ms, "
            "latency_p95_ms) SELECT now() - make_interval(secs => s), 'ha.s', :d, 'r' || :p, s, 10, 100, :p "
            "FROM generate_series(1, :n) s"), {"d": dep_id, "p": p95_ms, "n": seconds})


def test_the_redundancy_manager_asks_the_application_manager_for_replicas_and_gives_them_back(clean_db):
    from streamops import control

    reg = _registry(redundancy={"max_replicas": 2, "period_s": 1})
    stages.sync_registry(reg)
    with clean_db.begin() as conn:  # a running primary (this process stands in for its driver)
        dep = conn.execute(text(
            "INSERT INTO deployments (stage_id, pool, cores, state_partitions, config, launcher, checkpoint, status, "
            "pid, running_at) VALUES ('ha.s', 'p', 1, 2, '{}', 'local', '/nowhere', 'running', :pid, now()) "
            "RETURNING id"), {"pid": os.getpid()}).scalar_one()

    def replicas_wanted() -> int:
        with clean_db.connect() as conn:
            return conn.execute(text("SELECT replicas FROM stages WHERE stage_id = 'ha.s'")).scalar_one()

    def decisions(action: str) -> list:
        with clean_db.connect() as conn:
            return conn.execute(text("SELECT * FROM decisions WHERE action = :a ORDER BY id"), {"a": action}).all()

    _metrics(clean_db, dep, 9000)  # far above the 5 s bound: redundancy up
    control.replan("ha", operators=True)
    (grant,) = decisions("add_replica")
    assert grant.outcome == "granted" and "token spent" in grant.reason, grant
    assert replicas_wanted() == 2
    with clean_db.connect() as conn:
        r = conn.execute(text("SELECT r FROM redundancy_states WHERE stage_id = 'ha.s'")).scalar_one()
    assert 0 < r <= 1

    with clean_db.begin() as conn:
        conn.execute(text("DELETE FROM stage_metrics"))
    time.sleep(1.1)  # the manager's period
    _metrics(clean_db, dep, 500)  # far below: over-performing, give it back step by step
    # (after the start-up hold: no decrease for the new replica's start, 10 s without a measured
    # recovery, plus one period; the stage keeps reporting its batches meanwhile)
    for _ in range(25):
        if replicas_wanted() == 1:
            break
        time.sleep(1.1)
        _metrics(clean_db, dep, 500, seconds=1)
        control.replan("ha", operators=True)
    assert replicas_wanted() == 1
    (back,) = decisions("remove_replica")
    assert back.outcome == "granted" and "no token" in back.reason, back


def test_recent_failures_bring_a_replica_before_the_tail_grows_and_it_goes_back_after_the_hold(clean_db):
    """The proactive rule in production (plan.redundancy.Outlook from `redundancy_inputs.sql`): two
    failures of the primary in the last minute, each a 12 s output gap, ask for a replica while the
    tail is still far below the bound; once they are old it goes back, not before the hold ends."""
    from streamops import control

    stages.sync_registry(_registry(redundancy={"max_replicas": 2, "period_s": 1}))
    with clean_db.begin() as conn:
        dep = conn.execute(text(
            "INSERT INTO deployments (stage_id, pool, cores, state_partitions, config, launcher, checkpoint, status, "
            "pid, running_at) VALUES ('ha.s', 'p', 1, 2, '{}', 'local', '/nowhere', 'running', :pid, now()) "
            "RETURNING id"), {"pid": os.getpid()}).scalar_one()
        conn.execute(text(
            "INSERT INTO failures (stage_id, app, deployment_id, kind, detail, failed_at, status, recovered_at, "
            "mttr_ms, downtime_ms) SELECT 'ha.s', 'ha', :d, 'dead_pid', 'test', now() - make_interval(secs => s), "
            "'recovered', now() - make_interval(secs => s - 2), 2000, 12000 FROM unnest(ARRAY[30, 60]) s"),
            {"d": dep})
    _metrics(clean_db, dep, 500)  # a tenth of the 5 s bound: Algorithm 2 alone would hold at r = 0

    def state():
        with clean_db.connect() as conn:
            return conn.execute(text(
                "SELECT s.replicas, r.r, r.proactive, r.hold_until, r.updated_at AS now FROM stages s "
                "JOIN redundancy_states r USING (stage_id) WHERE s.stage_id = 'ha.s'")).one()

    control.replan("ha", operators=True)
    added = state()
    assert added.replicas == 2 and added.proactive and added.r >= 1.0, added
    # the hold: the measured start-up (2 s, the failures' time to recovery) plus one period
    assert (added.hold_until - added.now).total_seconds() == pytest.approx(3.0), added
    with clean_db.connect() as conn:
        (grant,) = conn.execute(text("SELECT outcome FROM decisions WHERE action = 'add_replica'")).all()
        (asked,) = conn.execute(text("SELECT reason FROM requests WHERE action = 'add_replica'")).all()
    assert grant.outcome == "granted" and "proactive: λ̂·v" in asked.reason, asked

    with clean_db.begin() as conn:  # the faults are an hour old now: the rate falls to 0
        conn.execute(text("UPDATE failures SET failed_at = failed_at - interval '1 hour'"))
    for _ in range(10):
        time.sleep(1.1)
        _metrics(clean_db, dep, 500, seconds=1)
        control.replan("ha", operators=True)
        now = state()
        if now.replicas == 1:
            break
    assert now.replicas == 1 and not now.proactive, now
    assert now.now >= added.hold_until, "given back before the new replica's start-up hold ended"


@pytest.mark.reconfig_matrix
def test_each_injected_fault_is_recorded_survived_and_told_apart_from_real_failures(clean_db, supervised):
    from streamops.execute import faults

    reg = _registry()
    inputs = registry.resolve_path("ha/in")
    generator.generate(inputs, "web", "constant:rate=150", seed=5, duration_s=60, realtime=False)
    want = oracles.expected("wordcount", generator.read_valid_records(inputs))
    first = stages.start_stage("ha.s", reg)
    supervised(reg)
    eventually(lambda: _commits_by(clean_db, first.deployment_id) >= 2, 120, "first commits")

    assert faults.send("ha.s", "slow_batch", 2.0).outcome.startswith("the next batch pauses")
    assert faults.send("ha.s", "db_outage", 3.0).outcome.startswith("database unreachable")
    assert faults.send("ha.s", "executor_kill").outcome.startswith("executor_kill: not possible")
    assert faults.send("ha.s", "heartbeat_cut", 25.0).outcome.startswith("no heartbeat")
    hung = eventually(lambda: [x for x in _failures(clean_db, "ha.s") if x.status == "recovered"], 120,
                      "the hung driver's recovery")[0]
    assert (hung.kind, hung.cause, hung.deployment_id) == ("stale_heartbeat", "injected", first.deployment_id), hung
    second = replicas.live_roles("ha.s")["primary"]
    eventually(lambda: _commits_by(clean_db, second.id) >= 1, 120, "the new run's commits")
    faults.send("ha.s", "driver_kill", wait_s=2)
    killed = eventually(lambda: [x for x in _failures(clean_db, "ha.s")
                                 if x.deployment_id == second.id and x.status == "recovered"], 120, "the recovery")[0]
    assert (killed.kind, killed.cause) == ("dead_pid", "injected") and killed.fault_id is not None, killed

    eventually(lambda: oracles.actual(clean_db, "ha.s", "wordcount") == want, 240, "the sink to equal the ground truth")
    with clean_db.connect() as conn:
        kinds = [r.kind for r in conn.execute(text("SELECT kind FROM injected_faults ORDER BY id"))]
    assert kinds == ["slow_batch", "db_outage", "heartbeat_cut", "driver_kill"], kinds
    stages.stop_stage("ha.s", reg, deadline_s=30)
