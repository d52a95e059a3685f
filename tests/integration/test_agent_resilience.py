"""A database that goes away delays reports; it never kills the stage."""

from __future__ import annotations

import socket
import time
from datetime import UTC

import pytest
from sqlalchemy import create_engine

from streamops.agent.errors import is_transient
from streamops.agent.sinks import retry_idempotent
from streamops.agent.writer import BufferedWriter


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.db
def test_writer_buffers_while_the_database_is_away_then_delivers(engine, clean_db):
    away = create_engine(f"postgresql+psycopg2://postgres@127.0.0.1:{_closed_port()}/streamops",
                         connect_args={"connect_timeout": 1})
    writer = BufferedWriter(away, "t.away")
    writer.start()
    for i in range(3):
        writer.submit("command_done", {"id": -i, "outcome": "x"})
    time.sleep(2)
    assert writer.is_alive() and len(writer.pending) == 3, "nothing is lost while the database is away"
    writer.engine = engine  # the database is back
    deadline = time.monotonic() + 20
    while writer.pending and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not writer.pending
    writer.close(2)


def test_the_writer_commits_only_metrics_without_waiting_for_the_wal(monkeypatch):
    """A stage_metrics row lost in a server crash is a report missing; an input anomaly is a
    record kept for the operator, so its commit waits."""
    import contextlib

    from streamops.agent import agent

    commits = []

    @contextlib.contextmanager
    def transaction(on=None, durable=True):
        commits.append(durable)
        yield type("Conn", (), {"execute": lambda self, *a: None})()

    monkeypatch.setattr(agent.db, "transaction", transaction)
    writer = BufferedWriter(None, "t.durable")
    writer.pending.extend([("metrics_insert", {}), ("input_anomaly_upsert", {})])
    writer._flush()
    assert commits == [False, True]


def test_only_transient_errors_are_retried():
    assert is_transient(RuntimeError('psycopg2.OperationalError: could not connect to server: Connection refused'))
    assert not is_transient(RuntimeError("ModuleNotFoundError: No module named 'streamops'"))
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise RuntimeError("server closed the connection unexpectedly")

    retry_idempotent(flaky, "test write", budget_s=30)
    assert len(calls) == 3


def test_a_lasting_error_fails_at_once_and_a_stop_cuts_the_retries_short(caplog):
    import threading

    calls = []

    def broken():
        calls.append(1)
        raise ValueError("not a database error")

    with pytest.raises(ValueError):
        retry_idempotent(broken, "stage t.s: batch 1 sink write", budget_s=30)
    assert len(calls) == 1

    stop = threading.Event()

    def away():
        calls.append(1)
        stop.set()  # a stop arrives while the database is away
        raise RuntimeError("could not connect to server: Connection refused")

    with pytest.raises(RuntimeError, match="Connection refused"):
        retry_idempotent(away, "stage t.s: batch 2 sink write", budget_s=30, abort=stop)
    assert len(calls) == 2

    stop.clear()
    tries = []

    def flaky():
        tries.append(1)
        if len(tries) < 2:
            raise RuntimeError("server closed the connection unexpectedly")
        return "written"

    with caplog.at_level("WARNING", logger="streamops.agent.sinks"):
        assert retry_idempotent(flaky, "stage t.s: batch 3 sink write", budget_s=30, abort=stop) == "written"
    assert [r.getMessage() for r in caplog.records] == [
        "stage t.s: batch 3 sink write failed, retrying in 1s: server closed the connection unexpectedly"]


@pytest.mark.db
def test_concurrent_writers_of_the_same_keys_never_deadlock(clean_db):
    """A primary and its active backup write the same keys at once. Each stages its batch (fed
    in opposite orders) and applies it in one transaction; the apply locks rows in key order, so
    both finish and the newest version of every key wins."""
    import threading

    from sqlalchemy import text

    from streamops.agent.sinks import _execute_values_partition
    from streamops.store import db

    keys = [f"k{i:05d}" for i in range(6000)]
    url = db.libpq_url(db.database_url())
    errors, start = [], threading.Barrier(2)

    def run(run_id: int, version: int, rows: list[str]) -> None:
        batch = {"stage_id": "dl.s", "deployment_id": run_id, "batch_id": version}
        try:
            _execute_values_partition(url, db.query("sink_stage").text, "(%s, %s, %s, %s, %s::jsonb, %s, %s)",
                                      lambda k: ("dl.s", run_id, version, k, f'{{"v": {version}}}', None, version),
                                      conflict_key=lambda t: t[3])(iter(rows))
            start.wait()
            with db.transaction() as conn:
                got = conn.execute(db.query("sink_apply"), batch).one()
            assert got.staged == len(rows)
        except Exception as e:  # noqa: BLE001 - the test reports whatever a writer raised
            errors.append(e)

    for rnd in range(3):
        threads = [threading.Thread(target=run, args=(1, 2 * rnd + 1, keys)),
                   threading.Thread(target=run, args=(2, 2 * rnd + 2, keys[::-1]))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert not errors, f"round {rnd}: {errors[0]}"
    with clean_db.connect() as conn:
        versions = conn.execute(text("SELECT min(version), max(version), count(*) FROM sink_outputs "
                                     "WHERE stage_id = 'dl.s'")).one()
        staged = conn.execute(text("SELECT count(*) FROM sink_staging WHERE stage_id = 'dl.s'")).scalar_one()
    assert tuple(versions) == (6, 6, len(keys)) and staged == 0, "every staged row applied once"


def test_a_rolled_back_transaction_is_retried():
    assert is_transient(RuntimeError("psycopg2.errors.DeadlockDetected: deadlock detected"))
    assert is_transient(RuntimeError("could not serialize access due to concurrent update"))


@pytest.mark.parametrize("silent_s, server_up_s, hung", [
    (16, 3600, True),    # silent past the limit, the server long up: hung
    (14, 3600, False),   # within the limit
    (40, 10, False),     # the server restarted 10 s ago: every driver gets the limit to beat again
    (40, 16, True),      # ... and no more
    (None, 3600, False),  # never beat, never ran: nothing to judge
    (16, None, True),    # no server age known: the heartbeat alone
])
def test_silence_is_judged_only_once_the_database_has_been_back_for_the_limit(silent_s, server_up_s, hung):
    from streamops.execute.watchdog import silent_too_long

    assert silent_too_long(silent_s, server_up_s, stale_s=15) is hung


def test_a_run_starting_past_the_launch_limit_is_a_launch_failure():
    from datetime import datetime
    from types import SimpleNamespace

    from streamops.execute.watchdog import LAUNCH_LIMIT_S, detect

    def run(silent_s, **kw):
        return SimpleNamespace(**{"health": "ok", "status": "starting", "pid": None, "silent_s": silent_s,
                                  "server_up_s": 3600, "beat_at": None, "running_at": None,
                                  "started_at": datetime.now(UTC), "stage_id": "a.s", "id": 1,
                                  "role": "primary", "stop_reason": None, "stopped_at": None, **kw})

    assert detect(15, candidates=[run(LAUNCH_LIMIT_S - 1)]) == []  # being launched right now
    [f] = detect(15, candidates=[run(LAUNCH_LIMIT_S + 1)])
    assert f.kind == "launch_failed" and "no pid" in f.detail
    [f] = detect(15, candidates=[run(5, status="failed", stop_reason="launch failed: RuntimeError: master down")])
    assert f.kind == "launch_failed" and "master down" in f.detail


@pytest.mark.parametrize("text, transient", [
    ("streamops-sqlstate=53100 DiskFull: could not extend file", True),           # disk full
    ("streamops-sqlstate=25006 ReadOnlySqlTransaction: cannot execute INSERT", True),  # a standby, after a failover
    ("streamops-sqlstate=57014 QueryCanceled: canceling statement due to statement timeout", True),
    ("streamops-sqlstate=57P01 AdminShutdown: terminating connection", True),
    ("streamops-sqlstate=23505 UniqueViolation: duplicate key value", False),     # the data's
    ("streamops-sqlstate=22P02 InvalidTextRepresentation: invalid input syntax", False),
    ("org.apache.spark.SparkException: Python worker exited unexpectedly (crashed)", True),  # a killed worker
    ("ExecutorLostFailure (executor 1 exited caused by one of the running tasks)", True),
    ("RuntimeError: injected fault: batch 7 holds a poison record", False),
])
def test_errors_are_classified_by_sqlstate_and_spark_s_failure_names(text, transient):
    wrapped = f"py4j.protocol.Py4JJavaError: An error occurred\n  File ..., in write\nRuntimeError: {text}\n"
    assert is_transient(wrapped) is transient


@pytest.mark.db
def test_real_database_errors_keep_their_class_through_the_executor_s_tag(engine):
    import psycopg2

    from streamops.agent.errors import sqlstate, tag_sqlstate
    from streamops.store import db

    def error_of(*statements: str) -> psycopg2.Error:
        conn = psycopg2.connect(db.writer_dsn())
        try:
            with conn.cursor() as cur:
                for s in statements:
                    cur.execute(s)
        except psycopg2.Error as e:
            return e
        finally:
            conn.close()
        raise AssertionError("no error")

    timeout = error_of("SET statement_timeout = 10", "SELECT pg_sleep(1)")
    read_only = error_of("SET TRANSACTION READ ONLY", "CREATE TABLE ro_probe (x int)")
    data = error_of("SELECT 1 / 0")
    assert (sqlstate(timeout), sqlstate(read_only), sqlstate(data)) == ("57014", "25006", "22012")
    for e, transient in ((timeout, True), (read_only, True), (data, False)):
        assert is_transient(e) is transient
        assert is_transient(RuntimeError(f"Py4JJavaError ... {tag_sqlstate(e)}")) is transient


def test_liveness_is_the_host_and_the_process_start_time_not_only_a_pid():
    import os
    import socket
    from types import SimpleNamespace

    from streamops import processes
    from streamops.execute.stages import is_alive

    me, started = os.getpid(), processes.started_at(os.getpid())
    run = dict(master="local", pid=me, driver_id=None, host=socket.gethostname(), pid_started_at=started)
    assert is_alive(SimpleNamespace(**run))
    assert not is_alive(SimpleNamespace(**{**run, "pid_started_at": started - 3600})), "a reused pid is not the driver"
    assert is_alive(SimpleNamespace(**{**run, "pid": 2 ** 22 + 1, "host": "elsewhere"})), \
        "another host: the heartbeat decides"
    assert not is_alive(SimpleNamespace(**{**run, "pid": 2 ** 22 + 1}))


@pytest.mark.parametrize("poison, expected_runs", [
    ({"f3"}, 6),            # one file of eight: found by halving
    ({"f0", "f7"}, 10),     # two, in both halves
    (set(), 2),             # none fails alone (the batch fails only together): nothing is blamed
])
def test_a_failed_batch_is_bisected_to_the_files_that_fail_alone(poison, expected_runs):
    from streamops.agent.poison import isolate

    files = tuple(f"f{i}" for i in range(8))
    runs = []

    def fails_alone(subset):
        runs.append(subset)
        return "ValueError: bad" if poison & set(subset) else None

    blamed = isolate(files, "ValueError: bad", fails_alone)
    assert set(blamed) == poison
    assert len(runs) == expected_runs


def test_bisecting_blames_only_the_batch_s_own_error_and_stops_at_its_budget():
    from streamops.agent.poison import isolate

    files = tuple(f"f{i}" for i in range(8))
    assert isolate(files, "ValueError: bad", lambda s: "OtherError: x" if "f3" in s else None) == (), \
        "a file that fails differently alone is not this batch's poison"
    assert isolate(files, "ValueError: bad", lambda s: "ValueError: bad", budget=3) == ("f0",), \
        "past the budget of dry runs: only the files proven to fail alone"
    assert isolate(("only",), "ValueError: bad", lambda s: None) == ()


def test_a_live_log_is_rotated_in_place_and_its_writer_goes_on_at_the_new_end(tmp_path):
    """A process appending to its log (as every driver, JVM and PostgreSQL here does) keeps
    writing after the rotation: the old lines are in `.1`, the live file starts again from its
    beginning, without the hole of NUL bytes a writer without O_APPEND would leave."""
    import sys

    from streamops import processes
    from streamops.execute.housekeeping import rotate_logs
    from streamops.waiting import wait_until

    log = tmp_path / "writer.log"
    proc = processes.spawn_detached([sys.executable, "-u", "-c", "import time\nfor i in range(100000):\n"
                                     "    print(f'line {i:06d} ' + 'x' * 100)\n    time.sleep(0.001)"], log_path=log)
    try:
        assert wait_until(lambda: log.stat().st_size > 20_000, 30, 0.05)
        assert rotate_logs(max_bytes=10_000, files=[log]) == [str(log)]
        kept = (tmp_path / "writer.log.1").read_bytes()
        assert kept.startswith(b"line 000000 ")
        assert wait_until(lambda: log.stat().st_size > 5_000, 30, 0.05), "the writer goes on"
        live = log.read_bytes()
        assert not live.startswith(b"\x00") and b"line 000000 " not in live
        assert rotate_logs(max_bytes=10**9, files=[log]) == [], "under the limit: left alone"
    finally:
        proc.kill()
        proc.wait()


def test_a_beating_driver_that_commits_nothing_while_input_waits_is_stalled():
    """Liveness is progress, not only a beat: a driver whose last beat says input waits and it
    has committed nothing for longer than the limit is stalled. Not when no input waits (idle),
    not while it stops, not within the limit."""
    from datetime import datetime
    from types import SimpleNamespace

    from streamops.execute.watchdog import detect

    def run(**info):
        return SimpleNamespace(health="ok", status="running", pid=None, silent_s=2.0, server_up_s=3600,
                               beat_at=datetime.now(UTC), running_at=None,
                               started_at=datetime.now(UTC),
                               stage_id="a.s", id=1, role="primary", stop_reason=None, stopped_at=None,
                               beat_info={"backlog_files": 3, "since_progress_s": 200.0, "stop_requested": False,
                                          **info})

    [f] = detect(15, candidates=[run()], stall_s=180)
    assert f.kind == "stalled" and "no commit for 202s while 3 input file(s) wait" in f.detail
    assert detect(15, candidates=[run(backlog_files=0)], stall_s=180) == [], "idle: nothing to commit"
    assert detect(15, candidates=[run(stop_requested=True)], stall_s=180) == [], "stopping"
    assert detect(15, candidates=[run(since_progress_s=100.0)], stall_s=180) == [], "within the limit"
    assert detect(15, candidates=[run()], stall_s=None) == [], "the check off"
    assert detect(15, candidates=[run(since_progress_s=None)], stall_s=180) == [], "a driver that does not say"
