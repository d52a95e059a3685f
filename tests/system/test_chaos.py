"""Real faults against running stages (`make test-chaos` runs them all; the quick ones are in
`make test` too). Each compares the sink with the ground truth afterwards: nothing lost, nothing
doubled.

A test that stops PostgreSQL runs on a private embedded cluster of its own, so the session's
database (and everything else using it) never goes away.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text

from demo import oracles
from demo.stages import demo_job
from streamops import generator, registry
from streamops.execute import stages, supervisor
from streamops.generator.records import dumps
from streamops.store import db, embedded, failures, migrate
from tests.integration.test_e2e_stage import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.db, pytest.mark.chaos]


def _registry(path: str = "chaos/in") -> registry.Registry:
    stage = {**demo_job("wordcount", {"kind": "files", "path": path, "max_files_per_trigger": 2}),
             "cores": {"initial": 1, "max": 2}, "state_partitions": 2, "trigger_interval_ms": 1000, "pool": "p"}
    return registry.parse({
        "pools": {"p": {"cores": 2}},
        "apps": {"chaos": {"r_max_ms": 5000, "maintenance_window": {"cron": "0 3 * * *", "duration_min": 30},
                           "stages": {"s": stage}}},
    })


@pytest.fixture(autouse=True)
def _fresh_checkpoints():
    """Every test's stage is `chaos.s` on an input of its own: its checkpoints start empty."""
    for ckpt in registry.resolve_path("checkpoints").glob("chaos.s*"):
        shutil.rmtree(ckpt)


@pytest.fixture
def private_database(monkeypatch):
    """An embedded PostgreSQL of this test's own (its home a subdirectory of the session's), with
    the schema; this process and the drivers it starts use it. Stopped afterwards."""
    home = Path(os.environ["STREAMOPS_HOME"]) / f"private-{os.getpid()}-{time.monotonic_ns()}"
    home.mkdir(mode=0o755)
    monkeypatch.setenv("STREAMOPS_HOME", str(home))
    cluster, _ = embedded.up()
    monkeypatch.setenv("STREAMOPS_DATABASE_URL", cluster.url("streamops"))
    db.engine.cache_clear()
    migrate.apply(db.engine())
    try:
        yield cluster
    finally:
        from streamops.execute.launcher import terminate_all_drivers

        terminate_all_drivers()
        db.engine().dispose()
        db.engine.cache_clear()
        embedded.down()


def _count(sql: str, **params) -> int:
    with db.engine().connect() as conn:
        return conn.execute(text(sql), params).scalar_one()


@pytest.mark.slow
def test_a_30s_database_stop_restarts_no_stage_and_loses_nothing(private_database):
    """PostgreSQL stopped for 30 s under a running, supervised stage, then started again: the
    supervisor (15 s heartbeat limit) restarts nothing, the driver keeps its run, the sink
    equals the ground truth, and the outage is one `output_gap` failure (database_unavailable).
    Before, heartbeats queued behind the metrics writer's backoff and every driver was killed as
    hung when the database came back."""
    reg = _registry()
    inputs = registry.resolve_path("chaos/in")
    generator.generate(inputs, "web", "constant:rate=100", seed=11, duration_s=20, realtime=False)
    run = stages.start_stage("chaos.s", reg)
    sup, stop, thread = supervisor.start_in_thread(reg, supervisor.SupervisorOptions(wait_s=90, warm_spares=False))
    try:
        eventually(lambda: _count("SELECT count(*) FROM sink_commits WHERE rows > 0") >= 2, 120, "two commits")
        embedded.down()
        # input keeps arriving while the database is away
        generator.generate(inputs, "web", "constant:rate=100", seed=11, duration_s=40, realtime=False)
        time.sleep(30)
        embedded.up()
        back = time.monotonic()
        want = oracles.expected("wordcount", generator.read_valid_records(inputs))
        eventually(lambda: oracles.actual(db.engine(), "chaos.s", "wordcount") == want, 240,
                   "the sink to equal the ground truth")
        print(f"database stop 30 s: the sink caught up {time.monotonic() - back:.1f}s after the database was back")
        time.sleep(20)  # past the supervisor's 15 s limit after the restart: a late kill would show now
        assert _count("SELECT count(*) FROM deployments WHERE stage_id = 'chaos.s'") == 1, "a stage was restarted"
        # nothing restarted, but the outage is downtime: one output gap naming it (issue 48 item 5)
        assert _count("SELECT count(*) FROM failures WHERE stage_id = 'chaos.s' AND kind <> 'output_gap'") == 0
        assert _count("SELECT count(*) FROM failures WHERE stage_id = 'chaos.s' AND kind = 'output_gap' "
                      "AND status = 'recovered' AND detail LIKE 'cause=database_unavailable%'") == 1
        assert not sup.recoveries
        assert _count("SELECT count(*) FROM deployments WHERE id = :i AND status = 'running'", i=run.deployment_id) == 1
    finally:
        stop.set()
        thread.join(60)
    stages.stop_stage("chaos.s", reg, deadline_s=30)


def _lines(records: list[dict]) -> bytes:
    return b"".join(dumps(r).encode() + b"\n" for r in records)


def test_a_file_written_in_place_is_counted_whole_through_landing_or_reported(clean_db):
    """Producers that write in place: through `_landing/` (a pause shorter than the quiet period, a
    cut mid-line) every record is counted once; straight into the source, the part written after
    the read is reported (log, input_anomalies, status), as is a sub-directory. Never silent."""
    from streamops.cli import status_table

    reg = _registry("chaos/inplace")
    inputs = registry.resolve_path("chaos/inplace")
    now = datetime.now(UTC)
    records = generator.make_records("web", 6, rng=random.Random(7), start_seq=0, run="inplace",
                                     ts_from=now - timedelta(seconds=5), ts_to=now)
    run = stages.start_stage("chaos.s", reg)

    landing = inputs / "_landing"
    landing.mkdir(parents=True)
    whole = _lines(records)
    with open(landing / "slow-writer.json", "wb") as f:  # three lines and half a line, a pause, the rest
        cut = len(_lines(records[:3])) + 10
        f.write(whole[:cut])
        f.flush()
        time.sleep(1.0)
        f.write(whole[cut:])
    want = oracles.expected("wordcount", records)
    eventually(lambda: oracles.actual(clean_db, "chaos.s", "wordcount") == want, 120,
               "every record of the landed file, counted once")

    direct = inputs / "direct.json"  # straight into the source: read at its first size
    direct.write_bytes(_lines(records[:3]))
    eventually(lambda: _count("SELECT count(*) FROM sink_commits WHERE rows > 0") >= 2, 60, "the direct file read")
    time.sleep(2)
    with open(direct, "ab") as f:
        f.write(_lines(records[3:]))
    (inputs / "nested").mkdir()
    anomalies = eventually(lambda: {(Path(r.path).name, r.kind): r for r in clean_db.connect().execute(text(
        "SELECT path, kind, bytes_now, detail FROM input_anomalies WHERE stage_id = 'chaos.s'"))}
        if _count("SELECT count(*) FROM input_anomalies") >= 2 else None, 60, "the audit's two findings")
    assert set(anomalies) == {("direct.json", "changed_after_read"), ("nested", "subdirectory")}, anomalies
    assert anomalies[("direct.json", "changed_after_read")].bytes_now == len(_lines(records))
    caption = str(status_table(wide=True).caption)
    assert "changed after it was read" in caption and "sub-directory not read" in caption
    log = Path(run.log_path).read_text()
    assert "action=input-audit kind=changed_after_read" in log and "action=input-audit kind=subdirectory" in log
    stages.stop_stage("chaos.s", reg, deadline_s=30)


def test_a_launch_that_raises_is_a_recorded_failure_and_is_retried(clean_db, tmp_path):
    """A warm spare whose stdin is gone (a broken pipe at the hand-over): the run is recorded
    `failed` with the error at once, instead of staying `starting` with its cores reserved and
    nothing watching, and the watchdog's next pass launches it again."""
    import subprocess
    import sys

    from streamops.execute import launcher as launchers
    from streamops.execute import watchdog

    reg = _registry("chaos/launch")
    inputs = registry.resolve_path("chaos/launch")
    generator.generate(inputs, "web", "constant:rate=100", seed=5, duration_s=10, realtime=False)
    proc = subprocess.Popen([sys.executable, "-c", "import os, time; os.close(0); print('closed', flush=True); "
                             "time.sleep(120)"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdout.readline() == b"closed\n"  # alive, and nobody reads its stdin any more
    ready = tmp_path / "spare.ready"
    ready.touch()
    broken = launchers.Spare("chaos.s", 1, proc, str(tmp_path / "spare.log"), ready)
    try:
        with pytest.raises(stages.LaunchFailed, match="launch failed: BrokenPipeError"):
            stages.start_stage("chaos.s", reg, spare=broken)
    finally:
        proc.kill()
    with clean_db.connect() as conn:
        first = conn.execute(text("SELECT id, status, stop_reason FROM deployments WHERE stage_id = 'chaos.s'")).one()
    assert first.status == "failed" and first.stop_reason.startswith("launch failed: BrokenPipeError"), first

    report = watchdog.cycle(reg, stale_s=15, wait_s=120)
    assert [(r.kind, r.status) for r in report.recoveries] == [("launch_failed", "recovered")], report
    want = oracles.expected("wordcount", generator.read_valid_records(inputs))
    eventually(lambda: oracles.actual(clean_db, "chaos.s", "wordcount") == want, 120, "the sink to equal the truth")
    with clean_db.connect() as conn:
        f = conn.execute(text("SELECT kind, status, deployment_id, mttr_ms FROM failures "
                              "WHERE stage_id = 'chaos.s'")).one()
    assert f.kind == "launch_failed" and f.status == "recovered" and f.deployment_id == first.id
    print(f"a launch that raised: recovered by the watchdog's next pass, MTTR {f.mttr_ms / 1000:.1f}s")
    stages.stop_stage("chaos.s", reg, deadline_s=30)


@pytest.mark.slow  # 47 s: the fence it meets is tested on the database (test_sink_fencing); make test-chaos runs it
def test_a_driver_that_wakes_after_it_was_replaced_writes_nothing_and_exits(clean_db):
    """SIGSTOP a driver, replace it while it sleeps (its run recorded failed and a new one started,
    as the watchdog does, but without the kill: across hosts a kill may not reach), then SIGCONT:
    the old driver is fenced. It commits nothing, reports nothing and exits, and the sink equals
    the ground truth."""
    import signal

    from streamops.store import ledger

    reg = _registry("chaos/fence")
    inputs = registry.resolve_path("chaos/fence")
    generator.generate(inputs, "web", "constant:rate=100", seed=9, duration_s=10, realtime=False)
    old = stages.start_stage("chaos.s", reg)
    eventually(lambda: _count("SELECT count(*) FROM sink_commits WHERE deployment_id = :d AND rows > 0",
                              d=old.deployment_id) >= 2, 120, "the first run's commits")
    os.killpg(old.pid, signal.SIGSTOP)
    try:
        ledger.finish(old.deployment_id, "failed", "watchdog: no heartbeat (test: the kill did not reach)")
        generator.generate(inputs, "web", "constant:rate=100", seed=9, duration_s=20, realtime=False)
        new = stages.start_stage("chaos.s", reg)
        eventually(lambda: _count("SELECT count(*) FROM sink_commits WHERE deployment_id = :d AND rows > 0",
                                  d=new.deployment_id) >= 1, 120, "the new run's first commit")
    finally:
        os.killpg(old.pid, signal.SIGCONT)
    woke, woke_mono = _count("SELECT extract(epoch FROM now())::bigint"), time.monotonic()
    eventually(lambda: not stages.is_alive(ledger.deployment(old.deployment_id)), 30, "the old driver to exit",
               interval=0.1)
    print(f"SIGCONT of a replaced driver: fenced and gone in {time.monotonic() - woke_mono:.1f}s")
    for table, column in (("sink_commits", "committed_at"), ("stage_metrics", "ts")):
        late = _count(f"SELECT count(*) FROM {table} WHERE deployment_id = :d AND {column} >= to_timestamp(:w)",
                      d=old.deployment_id, w=woke)
        assert late == 0, f"the replaced driver wrote {late} {table} row(s) after it woke"
    assert "action=fenced" in Path(old.log_path).read_text()
    want = oracles.expected("wordcount", generator.read_valid_records(inputs))
    eventually(lambda: oracles.actual(clean_db, "chaos.s", "wordcount") == want, 180, "the sink to equal the truth")
    assert ledger.deployment(new.deployment_id).status == "running"
    stages.stop_stage("chaos.s", reg, deadline_s=30)


def _cluster_registry(path: str) -> registry.Registry:
    stage = {**demo_job("wordcount", {"kind": "files", "path": path, "max_files_per_trigger": 2}),
             "cores": {"initial": 1, "max": 2}, "state_partitions": 2, "trigger_interval_ms": 1000, "pool": "c"}
    return registry.parse({
        "pools": {"c": {"master": "embedded", "cores": 2, "executor_cores": 1, "executor_memory": "512m"}},
        "apps": {"chaos": {"r_max_ms": 5000, "maintenance_window": {"cron": "0 3 * * *", "duration_min": 30},
                           "stages": {"s": stage}}},
    })


def _group_alive(pgid: int) -> list[int]:
    """The processes of a process group that still run (a zombie does not)."""
    import psutil

    out = []
    for p in psutil.process_iter(["status"]):
        try:
            if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue
    return out


@pytest.mark.slow
def test_a_cluster_pool_driver_sigstopped_under_a_supervisor_is_found_stopped_and_replaced_by_its_spare(
        clean_db, spark_standalone):
    """Issue 31 item 6: SIGSTOP of a cluster-pool driver's process group (the driver and its JVM)
    under a supervisor with warm spares. The supervisor sees it stopped within about a second
    (not after the 15 s heartbeat limit), kills the group and hands the run to the spare: one
    `stopped` failure, closed at the recovered run's first commit. SIGCONT then finds nothing
    left to write, and the sink equals the ground truth."""
    import signal

    from streamops import processes
    from streamops.store import ledger
    from tests.integration.test_reconfigure import Feeder, _settle_and_compare

    reg = _cluster_registry("chaos/stop")
    with Feeder("chaos/stop", seed=17, rate=100) as feeder:
        first = stages.start_stage("chaos.s", reg, wait_s=180)
        sup, stop, thread = supervisor.start_in_thread(reg, supervisor.SupervisorOptions(wait_s=120,
                                                                                         spare_at_most_after_s=60.0))
        try:
            eventually(lambda: _count("SELECT count(*) FROM sink_commits WHERE deployment_id = :d AND rows > 0",
                                      d=first.deployment_id) >= 2, 120, "two committed batches")
            spare_pid = eventually(lambda: sup.spare_ready("chaos.s"), 180, "a warm spare on the cluster pool")
            jvm = processes.children(first.pid)
            assert jvm, "the driver's JVM"
            # A slow batch on a loaded machine is an output gap of its own, before the fault: not this one.
            before = _count("SELECT COALESCE(max(id), 0) FROM failures WHERE stage_id = 'chaos.s'")
            os.killpg(first.pid, signal.SIGSTOP)
            eventually(lambda: _count("SELECT count(*) FROM failures WHERE stage_id = 'chaos.s' AND id > :b",
                                      b=before), 60, "the stop to be found")
            with clean_db.connect() as conn:
                f = eventually(lambda: conn.execute(text(
                    "SELECT * FROM failures WHERE stage_id = 'chaos.s' AND id > :b AND status <> 'recovering'"),
                    {"b": before}).first(), 150, "the recovery")
                conn.rollback()
            assert (f.kind, f.status, f.detected_by, f.deployment_id) == \
                ("stopped", "recovered", "supervisor", first.deployment_id), f
            assert "is stopped" in f.detail
            new = ledger.deployment(f.recovery_deployment_id)
            assert new.pid == spare_pid and new.status == "running", "the restart went to the spare"
            first_commit = _count("SELECT min(committed_at) FROM sink_commits WHERE deployment_id = :d",
                                  d=new.id)
            assert f.recovered_at == first_commit, "closed at the recovered run's first commit"
        finally:
            stop.set()
            thread.join(120)
        # The kill reached the stopped group: the driver and its JVM are gone, SIGCONT wakes nothing.
        assert not stages.is_alive(ledger.deployment(first.deployment_id))
        eventually(lambda: not any(processes.is_alive(p) for p in jvm), 30, "the stopped driver's JVM to be gone")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(first.pid, signal.SIGCONT)
        woke = _count("SELECT extract(epoch FROM now())::bigint")
        time.sleep(3)
        assert _group_alive(first.pid) == [], "a process of the stopped group woke"
        for table, column in (("sink_commits", "committed_at"), ("stage_metrics", "ts")):
            late = _count(f"SELECT count(*) FROM {table} WHERE deployment_id = :d AND {column} >= to_timestamp(:w)",
                          d=first.deployment_id, w=woke)
            assert late == 0, f"the stopped driver wrote {late} {table} row(s) after SIGCONT"
        print(f"SIGSTOP of a cluster-pool driver: found stopped {(f.detected_at - f.failed_at).total_seconds():.1f}s "
              f"after its last sighting running (heartbeat limit 15 s), MTTR {f.mttr_ms / 1000:.1f}s through the "
              f"spare, output gap {f.downtime_ms / 1000:.1f}s")
        _settle_and_compare(clean_db, feeder, "chaos.s")
    assert _count("SELECT count(*) FROM failures WHERE stage_id = 'chaos.s' AND id > :b", b=before) == 1
    stages.stop_stage("chaos.s", reg, deadline_s=30)


# 40 s: a stopped driver's detection is tests/unit/test_stops.py's on real SIGSTOPped processes;
# make test-chaos runs it
@pytest.mark.slow
def test_a_driver_process_sigstopped_alone_is_found_stopped_and_restarted_with_its_jvm_gone(clean_db):
    """The quick variant, on a local pool without spares: SIGSTOP of the driver's Python process
    only (its JVM runs on, and cannot beat for it). The supervisor finds it `stopped` within
    about a second, kills its process group (the JVM too, which was not stopped) and restarts
    the run cold; one failure, closed at the new run's first commit; the sink equals the truth."""
    import signal

    from streamops import processes
    from streamops.store import ledger

    reg = _registry("chaos/stop1")
    inputs = registry.resolve_path("chaos/stop1")
    generator.generate(inputs, "web", "constant:rate=100", seed=19, duration_s=10, realtime=False)
    first = stages.start_stage("chaos.s", reg)
    eventually(lambda: _count("SELECT count(*) FROM sink_commits WHERE deployment_id = :d AND rows > 0",
                              d=first.deployment_id) >= 1, 120, "the first commit")
    jvm = processes.children(first.pid)
    assert jvm, "the driver's JVM"
    sup, stop, thread = supervisor.start_in_thread(reg, supervisor.SupervisorOptions(wait_s=120, warm_spares=False))
    try:
        os.kill(first.pid, signal.SIGSTOP)
        generator.generate(inputs, "web", "constant:rate=100", seed=19, duration_s=10, realtime=False)
        rec = eventually(lambda: [r for r in sup.recoveries if r.status == "recovered"], 180, "the recovery")[0]
    finally:
        stop.set()
        thread.join(60)
    assert rec.kind == "stopped", rec
    assert not stages.is_alive(ledger.deployment(first.deployment_id))
    eventually(lambda: not any(processes.is_alive(p) for p in jvm), 30, "the driver's JVM to be gone")
    with clean_db.connect() as conn:
        [f] = conn.execute(text("SELECT * FROM failures WHERE stage_id = 'chaos.s'")).all()
    assert (f.kind, f.status, f.deployment_id) == ("stopped", "recovered", first.deployment_id), f
    assert f.recovered_at == _count("SELECT min(committed_at) FROM sink_commits WHERE deployment_id = :d",
                                    d=f.recovery_deployment_id), "closed at the new run's first commit"
    print(f"SIGSTOP of a driver process alone: found stopped {(f.detected_at - f.failed_at).total_seconds():.1f}s "
          f"after its last sighting running, MTTR {f.mttr_ms / 1000:.1f}s (a cold start)")
    want = oracles.expected("wordcount", generator.read_valid_records(inputs))
    eventually(lambda: oracles.actual(clean_db, "chaos.s", "wordcount") == want, 180, "the sink to equal the truth")
    stages.stop_stage("chaos.s", reg, deadline_s=30)


@pytest.mark.slow
def test_a_driver_that_beats_but_commits_nothing_while_input_waits_is_restarted(clean_db):
    """Liveness is progress: a lock held on the sink's staging table blocks the driver's batch in
    the sink while its heartbeat goes on. With input waiting and no commit past the stall limit
    (60 s here, 180 s by default), the supervisor kills and restarts it as `stalled`; once the
    lock is gone the new run catches up, and the sink equals the ground truth. Before, the
    beating driver counted as healthy for as long as the lock was held."""
    reg = _registry("chaos/stall")
    inputs = registry.resolve_path("chaos/stall")
    generator.generate(inputs, "web", "constant:rate=100", seed=13, duration_s=6, realtime=False)
    first = stages.start_stage("chaos.s", reg)
    eventually(lambda: _count("SELECT count(*) FROM sink_commits WHERE deployment_id = :d AND rows > 0",
                              d=first.deployment_id) >= 2, 120, "the first commits")
    _, stop, thread = supervisor.start_in_thread(reg, supervisor.SupervisorOptions(stall_s=60, wait_s=120,
                                                                                   warm_spares=False))
    locker = db.engine().connect()
    try:
        locker.execute(text("LOCK TABLE sink_staging IN ACCESS EXCLUSIVE MODE"))  # held until the rollback
        locked = time.monotonic()
        generator.generate(inputs, "web", "constant:rate=100", seed=13, duration_s=20, realtime=False)
        eventually(lambda: _count("SELECT count(*) FROM failures WHERE stage_id = 'chaos.s' AND kind = 'stalled'"),
                   120, "the stall to be found")
        found = time.monotonic() - locked
    finally:
        locker.rollback()
        locker.close()
    try:
        want = oracles.expected("wordcount", generator.read_valid_records(inputs))
        eventually(lambda: oracles.actual(clean_db, "chaos.s", "wordcount") == want, 180, "the sink to equal the truth")

        def closed():
            with clean_db.connect() as conn:
                return conn.execute(text("SELECT status, mttr_ms, deployment_id FROM failures "
                                         "WHERE stage_id = 'chaos.s' AND status = 'recovered'")).first()
        f = eventually(closed, 120, "the failure to close")
    finally:
        stop.set()
        thread.join(60)
    assert f.deployment_id == first.deployment_id and f.status == "recovered"
    with clean_db.connect() as conn:
        all_ = conn.execute(text("SELECT kind, detail, status FROM failures WHERE stage_id = 'chaos.s'")).all()
    assert len(all_) == 1, all_
    print(f"a batch blocked in the sink: stalled found {found:.1f}s after the lock (limit 60 s), "
          f"MTTR {f.mttr_ms / 1000:.1f}s")
    stages.stop_stage("chaos.s", reg, deadline_s=30)


def test_a_spare_the_failover_could_not_use_is_discarded_not_leaked(clean_db, tmp_path):
    """The supervisor takes the stage's spare for a failover, but its cores differ from the run's:
    the restart is a new driver, and the spare's process must go (one JVM leaked per failure)."""
    import signal
    import subprocess
    import sys

    from streamops.execute import launcher as launchers

    reg = _registry("chaos/spare")
    inputs = registry.resolve_path("chaos/spare")
    generator.generate(inputs, "web", "constant:rate=100", seed=4, duration_s=10, realtime=False)
    run = stages.start_stage("chaos.s", reg)
    sup, stop, thread = supervisor.start_in_thread(reg, supervisor.SupervisorOptions(wait_s=90, warm_spares=False))
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], stdin=subprocess.PIPE,
                            start_new_session=True)  # stands in for a warm driver of 2 cores (the run has 1)
    ready = tmp_path / "spare.ready"
    ready.touch()
    sup._spares["chaos.s"] = launchers.Spare("chaos.s", 2, idle, str(tmp_path / "spare.log"), ready)
    try:
        eventually(lambda: _count("SELECT count(*) FROM sink_commits WHERE rows > 0") >= 1, 120, "a commit")
        os.killpg(run.pid, signal.SIGKILL)
        eventually(lambda: [r for r in sup.recoveries if r.status == "recovered"], 150, "the failover")
        assert idle.poll() is not None, "the unused spare still runs"
        assert "chaos.s" not in sup._spares
    finally:
        stop.set()
        thread.join(60)
        if idle.poll() is None:
            idle.kill()
    stages.stop_stage("chaos.s", reg, deadline_s=30)


def test_a_supervisor_that_dies_is_restarted_by_the_watchdog_and_one_stopped_on_purpose_is_not(clean_db):
    import signal

    from streamops import processes
    from streamops.execute import supervisor as sup

    log = Path(os.environ["STREAMOPS_HOME"]) / "logs" / "supervisor.log"
    log.unlink(missing_ok=True)

    def supervising(n: int) -> bool:  # its SIGTERM handler is installed by then
        return log.exists() and log.read_text().count("supervising every") >= n

    first = sup.start_background(["--no-spares", "--poll", "1"])
    try:
        eventually(lambda: supervising(1), 60, "the supervisor")
        os.kill(first, signal.SIGKILL)
        eventually(lambda: not processes.is_alive(first), 10, "the supervisor to die")
        second = sup.ensure_running()
        assert second is not None and second != first and processes.is_alive(second)
        assert sup.ensure_running() is None, "a live supervisor is left alone"
        eventually(lambda: supervising(2), 60, "the restarted supervisor")
        processes.stop(second, grace_s=30)  # SIGTERM, as `streamops down` does
        assert not processes.is_alive(second) and sup.ensure_running() is None, "stopped on purpose: not restarted"
    finally:
        for pid in (first, locals().get("second")):
            if pid and processes.is_alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
def test_the_supervisor_killed_then_a_driver_killed_one_watchdog_run_brings_back_both(clean_db, tmp_path, monkeypatch):
    """Issue 31: kill -9 of the supervisor, then of a driver, gave no recovery for 2 min 24 s. One
    run of the watchdog DAG's task (it runs every minute) restarts the supervisor and the stage;
    the sink equals the ground truth. Issue 48 item 2: on a stage given up on before, whose
    dead driver was never detected: the start clears the give-up, the kill is a failure, the old
    give-up ends at the new run's first commit, and the report counts both failures' downtime."""
    import signal

    import yaml

    from streamops import processes
    from streamops.orchestrate import tasks

    apps = tmp_path / "apps.yaml"  # the background supervisor reads the registry from its file
    apps.write_text(yaml.safe_dump({
        "pools": {"p": {"cores": 2}},
        "apps": {"chaos": {"r_max_ms": 5000, "maintenance_window": {"cron": "0 3 * * *", "duration_min": 30},
                           "stages": {"s": {**demo_job("wordcount", {"kind": "files", "path": "chaos/sk",
                                                                                "max_files_per_trigger": 2}),
                                            "cores": {"initial": 1, "max": 2}, "state_partitions": 2,
                                            "trigger_interval_ms": 1000, "pool": "p"}}}}}))
    monkeypatch.setenv("STREAMOPS_APPS", str(apps))
    reg = registry.load()
    inputs = registry.resolve_path("chaos/sk")
    generator.generate(inputs, "web", "constant:rate=100", seed=5, duration_s=20, realtime=False)
    log = Path(os.environ["STREAMOPS_HOME"]) / "logs" / "supervisor.log"
    log.unlink(missing_ok=True)
    stages.sync_registry(reg)
    earlier, _, _ = failures.open_failure("chaos.s", "chaos", None, "query_failed", "an earlier run's bad batch",
                                          db.now())  # not before the app's registration: the report clips that
    failures.give_up(earlier, "3 restarts in a row failed")
    assert _count("SELECT count(*) FROM stages WHERE stage_id = 'chaos.s' AND health = 'failed'") == 1
    first = stages.start_stage("chaos.s", reg)
    assert _count("SELECT count(*) FROM stages WHERE stage_id = 'chaos.s' AND health = 'ok'") == 1, \
        "a successful start clears the give-up, whoever started it"
    sup = supervisor.start_background(["--no-spares", "--poll", "1"])
    second = None
    try:
        eventually(lambda: log.exists() and "supervising every" in log.read_text(), 60, "the supervisor")
        eventually(lambda: _count("SELECT count(*) FROM sink_commits WHERE rows > 0") >= 1, 120, "a commit")
        os.kill(sup, signal.SIGKILL)
        eventually(lambda: not processes.is_alive(sup), 10, "the supervisor to die")
        os.killpg(first.pid, signal.SIGKILL)
        killed = time.monotonic()
        generator.generate(inputs, "web", "constant:rate=100", seed=6, duration_s=10, realtime=False)

        tasks.watchdog(stale_s=60, wait_s=180)
        second = processes.read_pid(Path(os.environ["STREAMOPS_HOME"]) / "run" / "supervisor.pid")
        assert second not in (None, sup) and processes.is_alive(second), "the supervisor is back"
        want = oracles.expected("wordcount", generator.read_valid_records(inputs))
        eventually(lambda: oracles.actual(clean_db, "chaos.s", "wordcount") == want, 180, "the sink = ground truth")
        print(f"supervisor and driver killed: sink equal to the ground truth {time.monotonic() - killed:.1f}s "
              f"after the driver's kill, within one watchdog run")
        eventually(lambda: _count("SELECT count(*) FROM failures WHERE stage_id = 'chaos.s' "
                                  "AND recovered_at IS NOT NULL") == 2, 60, "both failures closed")
        with clean_db.connect() as conn:
            rows = conn.execute(text("SELECT kind, status, downtime_ms, COALESCE(last_commit_at, failed_at) AS lc "
                                     "FROM failures WHERE stage_id = 'chaos.s' ORDER BY id")).all()
            counted = conn.execute(text("SELECT sum(downtime_failure_s) FROM reporting.downtime_daily "
                                        "WHERE day >= current_date - 1 AND app = 'chaos'")).scalar_one()
        assert [(r.kind, r.status) for r in rows] == [("query_failed", "gave_up"), ("dead_pid", "recovered")], rows
        print(f"  the kill's output gap {rows[1].downtime_ms / 1000:.1f}s; the earlier give-up ended at the new "
              f"run's first commit ({rows[0].downtime_ms / 1000:.1f}s)")
        # each gap runs from the last commit before it; where they overlap, a second counts once
        (a0, a1), (b0, b1) = ((r.lc.timestamp(), r.lc.timestamp() + r.downtime_ms / 1000) for r in rows)
        union = (a1 - a0) + (b1 - b0) - max(0.0, min(a1, b1) - max(a0, b0))
        assert float(counted) == pytest.approx(union, abs=0.01), ("the report counts both", rows)
        assert _count("SELECT count(*) FROM deployments WHERE stage_id = 'chaos.s' "
                      "AND status IN ('starting', 'running')") == 1, "exactly one live run"
    finally:
        for pid in (sup, second):
            if pid and processes.is_alive(pid):
                processes.stop(pid, grace_s=30)
    stages.stop_stage("chaos.s", reg, deadline_s=30)


def test_a_database_restart_under_a_held_stage_lock_ends_the_action_without_an_error(private_database):
    """The soak found it: a recovery holding the stage lock while PostgreSQL restarted crashed on
    releasing the lock (its session was gone). The lock died with the session; releasing it is
    then nothing to do, and a later taker finds it free."""
    from streamops.store import reconfigurations as rstore

    with rstore.stage_lock("chaos.s") as free:
        assert free
        embedded.down()
        embedded.up()
    db.engine().dispose()
    with rstore.stage_lock("chaos.s") as free:
        assert free, "the lock died with the session"
