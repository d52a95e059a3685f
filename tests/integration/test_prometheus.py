"""`/metrics` over HTTP from hand-built rows on real PostgreSQL (issue 30): two stages, batches,
quarantined lines of two reason kinds, reconfigurations and failures with output gaps. The text
is parsed with prometheus_client's own parser and every value is checked against the rows, the
per-run gauges against what `stage_metrics` holds."""

from __future__ import annotations

import time
import urllib.request
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text

from streamops.report import prometheus

pytestmark = pytest.mark.db

CLUSTER = '{"pool": {"master": "spark://h:7077", "executor_cores": 2}}'
LOCAL = '{"pool": {"master": "local", "executor_cores": 1}}'
# What the driver's heartbeat says (agent._executors): a count on a cluster pool, null in local mode.
BEAT_INFO = {"cluster": '{"executors": 2}', "local": '{"executors": null}'}


def _exec(conn, sql: str, **params) -> int | None:
    res = conn.execute(text(sql), params)
    return res.scalar_one() if res.returns_rows else None


def run(conn, sid: str, role: str, cores: int, status: str, config: str, started_ago_s: float) -> int:
    return _exec(conn, "INSERT INTO deployments (stage_id, role, pool, cores, state_partitions, config, launcher, "
                       "checkpoint, status, started_at) VALUES (:sid, :role, 'p', :c, 4, CAST(:cfg AS jsonb), 'local', "
                       "'/x', :st, now() - make_interval(secs => :ago)) RETURNING id",
                 sid=sid, role=role, c=cores, st=status, cfg=config, ago=started_ago_s)


def batch(conn, sid: str, dep: int, batch_id: int, ago_s: float, input_rows: int, p95_ms: float, backlog: int) -> None:
    _exec(conn, "INSERT INTO stage_metrics (ts, stage_id, deployment_id, run_id, batch_id, input_rows, "
                "batch_duration_ms, backlog_rows, backlog_files, latency_p95_ms) VALUES "
                "(now() - make_interval(secs => :ago), :sid, :dep, 'run-' || :dep, :b, :n, 100, :bl, :bl / 10, :p95)",
          sid=sid, dep=dep, b=batch_id, ago=ago_s, n=input_rows, bl=backlog, p95=p95_ms)


def quarantined(conn, sid: str, kind: str, n: int, ago_s: float = 60) -> None:
    for i in range(n):
        _exec(conn, "INSERT INTO quarantine (stage_id, record_key, raw, reason, reason_kind, quarantined_at) "
                    "VALUES (:sid, md5(:k), 'x', :kind, :kind, now() - make_interval(secs => :ago))",
              sid=sid, k=f"{kind}-{ago_s}-{i}", kind=kind, ago=ago_s)


def reconfiguration(conn, sid: str, action: str, mechanism: str | None, status: str) -> None:
    _exec(conn, "INSERT INTO reconfigurations (stage_id, app, action, target_cores, mechanism, status, requested_by) "
                "VALUES (:sid, 'a', :action, 2, :m, :st, 'user:test')", sid=sid, action=action, m=mechanism, st=status)


def failure(conn, sid: str, role: str, kind: str, downtime_ms: float | None, cause: str = "real") -> None:
    _exec(conn, "INSERT INTO failures (stage_id, app, role, kind, detail, failed_at, status, downtime_ms, cause) "
                "VALUES (:sid, 'a', :role, :kind, 'test', now() - interval '1 hour', :st, :down, :cause)",
          sid=sid, role=role, kind=kind, st="recovering" if downtime_ms is None else "recovered", down=downtime_ms,
          cause=cause)


@pytest.fixture
def rows(clean_db):
    """Stage a.s1: a primary on a cluster pool (4 cores of 2-core executors) and a replica on a
    local one, both running; stage a.s2: its latest primary run stopped, an older one failed."""
    with clean_db.begin() as conn:
        conn.execute(text("TRUNCATE failures, batch_failures, injected_faults CASCADE"))
        _exec(conn, "INSERT INTO pools (name, master, cores) VALUES ('p', 'local', 8)")
        _exec(conn, "INSERT INTO apps (name, r_max_ms, maintenance_window, spec) VALUES ('a', 1000, '{}', '{}')")
        for name, replicas in (("s1", 2), ("s2", 1)):
            _exec(conn, "INSERT INTO stages (stage_id, app, name, job, pool, cores, min_cores, max_cores, "
                        "state_partitions, trigger_ms, spec, replicas) "
                        "VALUES (:id, 'a', :n, 'wordcount', 'p', 1, 1, 8, 4, 1000, '{}', :r)",
              id=f"a.{name}", n=name, r=replicas)
        primary = run(conn, "a.s1", "primary", 4, "running", CLUSTER, 600)
        replica = run(conn, "a.s1", "replica-1", 2, "running", LOCAL, 500)
        run(conn, "a.s2", "primary", 1, "failed", LOCAL, 7200)
        stopped = run(conn, "a.s2", "primary", 3, "stopped", LOCAL, 3600)
        run(conn, "a.s2", "secondary", 3, "stopped", LOCAL, 3000)  # an old active backup: no series
        for dep, ago, pool in ((primary, 7, "cluster"), (replica, 2, "local"), (stopped, 900, "local")):
            _exec(conn, "INSERT INTO heartbeats (deployment_id, stage_id, beat_at, query_active, info) "
                        "SELECT id, stage_id, now() - make_interval(secs => :ago), true, CAST(:info AS jsonb) "
                        "FROM deployments WHERE id = :d", d=dep, ago=ago, info=BEAT_INFO[pool])
        _exec(conn, "SELECT ensure_stage_metrics_partitions(CAST(now() - interval '3 hours' AS date), 2)")
        batch(conn, "a.s1", primary, 1, 7300, 500, 9000, 99)  # before the counters' window
        batch(conn, "a.s1", primary, 2, 50, 60, 800, 40)
        batch(conn, "a.s1", primary, 3, 30, 120, 1200, 20)
        batch(conn, "a.s1", primary, 4, 10, 0, 0, 5)  # no input: not the p95's batch
        batch(conn, "a.s1", replica, 1, 20, 90, 700, 7)
        batch(conn, "a.s2", stopped, 1, 1200, 30, 400, 3)
        quarantined(conn, "a.s1", "malformed JSON", 3)
        quarantined(conn, "a.s1", "missing field", 1)
        quarantined(conn, "a.s2", "wrong type", 1)
        quarantined(conn, "a.s2", "wrong type", 2, ago_s=7300)  # before the window
        reconfiguration(conn, "a.s1", "scale_out", "live", "done")
        reconfiguration(conn, "a.s1", "scale_out", "live", "done")
        reconfiguration(conn, "a.s1", "migrate", "pause_resume", "rolled_back")
        reconfiguration(conn, "a.s2", "scale_in", None, "cancelled")
        reconfiguration(conn, "a.s2", "scale_in", "pause_resume", "pending")  # not finished: not counted
        failure(conn, "a.s1", "primary", "dead_pid", 1500)
        failure(conn, "a.s1", "primary", "dead_pid", 45_000, cause="injected")
        failure(conn, "a.s1", "replica-1", "stale_heartbeat", 25_000)
        failure(conn, "a.s2", "primary", "query_failed", None)  # open: counted, no gap yet
    return clean_db


@pytest.fixture
def scrape(rows):
    """GET /metrics from an exporter on a free loopback port; {family name: {labels: value}} and the families."""
    since = datetime.now(UTC) - timedelta(hours=1)
    exporter = prometheus.serve("127.0.0.1", 0, prometheus.StreamopsCollector(since=lambda: since))
    try:
        with urllib.request.urlopen(exporter.url, timeout=30) as resp:
            assert resp.status == 200
            body = resp.read().decode()
    finally:
        exporter.close()
    families = {f.name: f for f in text_string_to_metric_families(body)}
    values: dict[str, dict[tuple, float]] = {}
    for f in families.values():
        for s in f.samples:
            values.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return values, families, since


def L(**labels) -> tuple:
    return tuple(sorted(labels.items()))


def test_per_run_gauges_match_stage_metrics(scrape, rows):
    values, families, _ = scrape
    assert families["streamops_stage_cores"].type == "gauge"
    assert values["streamops_database_up"] == {(): 1.0}
    p, r, s2 = (L(app="a", stage="s1", role="primary"), L(app="a", stage="s1", role="replica-1"),
                L(app="a", stage="s2", role="primary"))
    assert values["streamops_stage_running"] == {p: 1.0, r: 1.0, s2: 0.0}
    assert values["streamops_stage_cores"] == {p: 4.0, r: 2.0, s2: 3.0}
    assert values["streamops_stage_executors"] == {p: 2.0}  # the local runs' drivers run their tasks themselves
    # What stage_metrics holds, read back here.
    with rows.connect() as conn:
        latest = {(row.stage_id, row.role): row for row in conn.execute(text(
            "SELECT DISTINCT ON (m.deployment_id) m.stage_id, d.role, m.backlog_rows, m.backlog_files "
            "FROM stage_metrics m JOIN deployments d ON d.id = m.deployment_id ORDER BY m.deployment_id, m.ts DESC"))}
        minute = dict(conn.execute(text(
            "SELECT d.role, sum(m.input_rows) / 60.0 FROM stage_metrics m JOIN deployments d ON d.id = m.deployment_id "
            "WHERE m.stage_id = 'a.s1' AND m.ts > now() - interval '60 seconds' GROUP BY d.role")).all())
    assert values["streamops_stage_backlog_rows"] == {
        p: latest["a.s1", "primary"].backlog_rows, r: latest["a.s1", "replica-1"].backlog_rows,
        s2: latest["a.s2", "primary"].backlog_rows} == {p: 5, r: 7, s2: 3}
    assert values["streamops_stage_backlog_files"][p] == latest["a.s1", "primary"].backlog_files == 0
    assert values["streamops_stage_input_rows_per_second"] == pytest.approx(
        {p: float(minute["primary"]), r: float(minute["replica-1"])})
    assert values["streamops_stage_input_rows_per_second"][p] == pytest.approx(3.0)  # (60 + 120 + 0) / 60
    # p95: the latest batch with input in the last minute (batch 3, not the idle batch 4); s2 is idle.
    assert values["streamops_stage_latency_p95_seconds"] == {p: 1.2, r: 0.7}
    ages = values["streamops_stage_heartbeat_age_seconds"]
    assert 7 <= ages[p] < 60 and 2 <= ages[r] < 60 and 900 <= ages[s2] < 960
    assert values["streamops_stage_replicas"] == {L(app="a", stage="s1"): 2.0, L(app="a", stage="s2"): 0.0}
    assert values["streamops_stage_replicas_wanted"] == {L(app="a", stage="s1"): 2.0, L(app="a", stage="s2"): 1.0}
    assert values["streamops_stage_given_up"] == {L(app="a", stage="s1"): 0.0, L(app="a", stage="s2"): 0.0}


def test_counters_count_the_rows(scrape):
    values, families, since = scrape
    assert families["streamops_stage_batches"].type == "counter"
    assert values["streamops_stage_batches_total"] == {
        L(app="a", stage="s1", role="primary"): 3.0, L(app="a", stage="s1", role="replica-1"): 1.0,
        L(app="a", stage="s2", role="primary"): 1.0}
    created = values["streamops_stage_batches_created"]
    assert list(created.values()) == pytest.approx([since.timestamp()] * 3)
    assert values["streamops_stage_quarantined_lines_total"] == {
        L(app="a", stage="s1", reason_kind="malformed JSON"): 3.0,
        L(app="a", stage="s1", reason_kind="missing field"): 1.0,
        L(app="a", stage="s2", reason_kind="wrong type"): 1.0}
    assert values["streamops_reconfigurations_total"] == {
        L(app="a", stage="s1", action="scale_out", mechanism="live", status="done"): 2.0,
        L(app="a", stage="s1", action="migrate", mechanism="pause_resume", status="rolled_back"): 1.0,
        L(app="a", stage="s2", action="scale_in", mechanism="none", status="cancelled"): 1.0}
    assert values["streamops_failures_total"] == {
        L(app="a", stage="s1", role="primary", kind="dead_pid", cause="real"): 1.0,
        L(app="a", stage="s1", role="primary", kind="dead_pid", cause="injected"): 1.0,
        L(app="a", stage="s1", role="replica-1", kind="stale_heartbeat", cause="real"): 1.0,
        L(app="a", stage="s2", role="primary", kind="query_failed", cause="real"): 1.0}
    assert "streamops_failures_created" not in values  # counted from the first row: no window


def test_output_gap_histogram_has_cumulative_buckets(scrape):
    values, families, _ = scrape
    assert families["streamops_failure_output_gap_seconds"].type == "histogram"
    buckets = values["streamops_failure_output_gap_seconds_bucket"]
    primary = {dict(k)["le"]: v for k, v in buckets.items() if dict(k)["role"] == "primary"}
    # Gaps of 1.5 s and 45 s.
    assert primary == {"1.0": 0, "2.0": 1, "5.0": 1, "10.0": 1, "20.0": 1, "30.0": 1, "60.0": 2, "120.0": 2,
                       "300.0": 2, "600.0": 2, "1800.0": 2, "+Inf": 2}
    replica = {dict(k)["le"]: v for k, v in buckets.items() if dict(k)["role"] == "replica-1"}
    assert replica["20.0"] == 0 and replica["30.0"] == 1 and replica["+Inf"] == 1
    assert values["streamops_failure_output_gap_seconds_count"] == {
        L(app="a", stage="s1", role="primary"): 2.0, L(app="a", stage="s1", role="replica-1"): 1.0}
    assert values["streamops_failure_output_gap_seconds_sum"][L(app="a", stage="s1", role="primary")] == \
        pytest.approx(46.5)


def test_the_cli_prints_the_same_families(rows):
    from typer.testing import CliRunner

    from streamops.cli import app

    res = CliRunner().invoke(app, ["metrics"])
    assert res.exit_code == 0, res.output
    names = {f.name for f in text_string_to_metric_families(res.output)}
    # The text format gives a counter's `_created` a family of its own: the windowed counters have one
    # (when they have a sample: not in the first seconds after 00:00 UTC, the window's start).
    assert {n for n in names if n.endswith("_created")} <= {"streamops_stage_batches_created",
                                                            "streamops_stage_quarantined_lines_created"}
    assert {n.removesuffix("_total") for n in prometheus.metric_names()} == \
        {n for n in names if not n.endswith("_created")}


def _get(url: str) -> tuple[float, dict[str, dict[tuple, float]]]:
    t0 = time.monotonic()
    with urllib.request.urlopen(url, timeout=30) as resp:
        assert resp.status == 200  # Prometheus keeps the series of a target that answers
        body = resp.read().decode()
    values: dict[str, dict[tuple, float]] = {}
    for f in text_string_to_metric_families(body):
        for s in f.samples:
            values.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return time.monotonic() - t0, values


def test_a_locked_metrics_table_is_a_prompt_scrape_saying_the_database_is_down(rows):
    """Issue 48: with stage_metrics locked, /metrics hung for over 20 s. It answers within the
    observability timeout (3 s) with streamops_database_up 0 and the last read's age, and the
    figures come back with the lock's end."""
    exporter = prometheus.serve("127.0.0.1", 0, prometheus.StreamopsCollector(max_age_s=0))
    try:
        _, before = _get(exporter.url)
        assert before["streamops_database_up"] == {(): 1.0}
        with rows.connect() as locker:
            locker.execute(text("LOCK TABLE stage_metrics IN ACCESS EXCLUSIVE MODE"))
            took, during = _get(exporter.url)
            locker.rollback()
        assert took < 5, f"the scrape took {took:.1f} s"
        assert during["streamops_database_up"] == {(): 0.0}
        assert set(during) == {"streamops_database_up", "streamops_snapshot_age_seconds"}
        assert during["streamops_snapshot_age_seconds"][()] >= 2.5  # the read before the lock
        # The read the lock held may still be finishing: the next scrape it has not ended by says 0.
        deadline = time.monotonic() + 10
        while _get(exporter.url)[1]["streamops_database_up"] != {(): 1.0}:
            assert time.monotonic() < deadline, "the figures did not come back after the lock"
            time.sleep(0.2)
        assert _get(exporter.url)[1]["streamops_stage_cores"]
    finally:
        exporter.close()
