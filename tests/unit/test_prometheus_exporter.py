"""The Prometheus exporter without a database: rows to metric families (pure), a database that
does not answer, the settings, and the supervisor carrying on when the exporter's port is taken.
The values from real rows over HTTP: tests/integration/test_prometheus.py."""

from __future__ import annotations

import logging
import socket
import urllib.request
from datetime import UTC, datetime
from types import SimpleNamespace as Row

import pytest
from prometheus_client.parser import text_string_to_metric_families

from streamops import registry
from streamops.execute import supervisor
from streamops.paths import REPO_ROOT
from streamops.report import prometheus

SINCE = datetime(2026, 3, 10, tzinfo=UTC)


def _parse(metric_families) -> dict[str, dict[tuple, float]]:
    class One:
        def collect(self):
            return metric_families

    out: dict[str, dict[tuple, float]] = {}
    for f in text_string_to_metric_families(prometheus.exposition(One())):
        for s in f.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def test_an_unknown_figure_is_an_absent_sample_not_a_zero():
    run = Row(app="a", stage="s", role="primary", running=False, cores=2, executors=1, backlog_rows=None,
              backlog_files=None, input_rps=None, latency_p95_s=None, heartbeat_age_s=None)
    values = _parse(prometheus.families(prometheus.Snapshot(since=SINCE, runs=[run])))
    key = (("app", "a"), ("role", "primary"), ("stage", "s"))
    assert values["streamops_stage_running"] == {key: 0.0}
    assert values["streamops_stage_cores"] == {key: 2.0}
    for name in ("backlog_rows", "latency_p95_seconds", "heartbeat_age_seconds", "input_rows_per_second"):
        assert f"streamops_stage_{name}" not in values
    assert "streamops_source_lag_records" not in values, "a file stage (or a row without the column) has no lag"


def test_a_kafka_stage_s_lag_is_its_own_gauge():
    run = Row(app="a", stage="s", role="primary", running=True, cores=1, executors=None, backlog_rows=420,
              backlog_files=None, input_rps=10.0, latency_p95_s=1.0, heartbeat_age_s=1.0, source_lag_records=420)
    values = _parse(prometheus.families(prometheus.Snapshot(since=SINCE, runs=[run])))
    key = (("app", "a"), ("role", "primary"), ("stage", "s"))
    assert values["streamops_source_lag_records"] == {key: 420.0}
    assert values["streamops_stage_backlog_rows"] == {key: 420.0}


def test_histogram_buckets_come_from_the_rows_sorted_with_inf_as_the_count():
    gaps = [Row(app="a", stage="s", role="primary", le=le, at_most=at_most, n=3, sum_s=70.5)
            for le, at_most in ((60.0, 2), (1.0, 0), (30.0, 2))]
    values = _parse([prometheus._histogram(gaps)])
    buckets = {dict(k)["le"]: v for k, v in values["streamops_failure_output_gap_seconds_bucket"].items()}
    assert buckets == {"1.0": 0, "30.0": 2, "60.0": 2, "+Inf": 3}
    assert list(values["streamops_failure_output_gap_seconds_count"].values()) == [3]
    assert list(values["streamops_failure_output_gap_seconds_sum"].values()) == [70.5]


def test_windowed_counters_say_when_they_started():
    batches = [Row(app="a", stage="s", role="primary", batches=12)]
    values = _parse(prometheus.families(prometheus.Snapshot(since=SINCE, batches=batches)))
    assert list(values["streamops_stage_batches_total"].values()) == [12]
    assert list(values["streamops_stage_batches_created"].values()) == [SINCE.timestamp()]
    assert prometheus.start_of_utc_day(datetime(2026, 3, 10, 23, 59, tzinfo=UTC)) == SINCE


def test_a_database_that_does_not_answer_is_a_scrape_saying_so(monkeypatch, caplog):
    def away(since):
        raise ConnectionError("could not connect to server")

    monkeypatch.setattr(prometheus, "read", away)
    collector = prometheus.StreamopsCollector()
    with caplog.at_level(logging.WARNING, "streamops.metrics"):
        first, second = _parse(collector.collect()), _parse(collector.collect())
    assert first == second == {"streamops_database_up": {(): 0.0}}
    assert len([r for r in caplog.records if "action=metrics" in r.message]) == 1  # logged once, not per scrape


def test_settings_default_to_loopback_and_port_zero_is_off(monkeypatch):
    monkeypatch.delenv("STREAMOPS_METRICS_HOST", raising=False)
    monkeypatch.delenv("STREAMOPS_METRICS_PORT", raising=False)
    assert prometheus.Settings.from_env() == prometheus.Settings("127.0.0.1", 9464)
    monkeypatch.setenv("STREAMOPS_METRICS_PORT", "0")
    assert prometheus.start_exporter() is None


def _supervisor(exporter) -> supervisor.Supervisor:
    return supervisor.Supervisor(registry.load(), supervisor.SupervisorOptions(warm_spares=False), exporter=exporter)


def test_a_taken_port_is_a_warning_and_the_supervisor_carries_on(caplog):
    import threading

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        sup = _supervisor(lambda: prometheus.start_exporter(prometheus.Settings("127.0.0.1", port)))
        stop = threading.Event()
        stop.set()  # no poll: only the exporter's start and end
        with caplog.at_level(logging.WARNING):
            sup.run(stop)
    warned = [r.message for r in caplog.records if "action=metrics-exporter" in r.message]
    assert len(warned) == 1 and f"127.0.0.1:{port}" in warned[0] and "STREAMOPS_METRICS_PORT" in warned[0]


def test_an_exporter_that_raises_is_a_warning_too(caplog):
    import threading

    def broken():
        raise RuntimeError("no")

    stop = threading.Event()
    stop.set()
    with caplog.at_level(logging.WARNING):
        _supervisor(broken).run(stop)
    assert any("action=metrics-exporter failed to start: RuntimeError" in r.message for r in caplog.records)


def test_the_supervisor_closes_its_exporter_when_it_ends(monkeypatch):
    import threading

    monkeypatch.setattr(prometheus, "read", lambda since: prometheus.Snapshot(since=since))
    started = []

    def exporter():
        started.append(prometheus.serve("127.0.0.1", 0))
        with urllib.request.urlopen(started[0].url, timeout=10) as resp:  # it answers while the supervisor runs
            assert b"streamops_database_up 1.0" in resp.read()
        return started[0]

    stop = threading.Event()
    stop.set()
    _supervisor(exporter).run(stop)
    with socket.socket() as again:  # nothing listens on its port any more (TIME_WAIT aside, as servers do)
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        again.bind(("127.0.0.1", started[0].port))
        again.listen()


def test_reporting_docs_list_every_metric():
    doc = (REPO_ROOT / "docs" / "reporting.md").read_text()
    missing = [n for n in prometheus.metric_names() if f"`{n}`" not in doc]
    assert not missing, f"docs/reporting.md does not list {missing}"


@pytest.mark.parametrize("name", prometheus.metric_names())
def test_names_follow_prometheus_conventions(name):
    assert name.startswith("streamops_") and name == name.lower()
    if name.endswith("_total"):
        assert not any(unit in name for unit in ("_seconds", "_ms"))
    assert "_ms" not in name and "_milliseconds" not in name, "base units: seconds"


# -- the cached snapshot: one read for many scrapes, a prompt answer when the database hangs (issue 44/48) --
def _hanging_read(release):
    def read(since):
        release.wait(30)
        return prometheus.Snapshot(since=since)
    return read


def test_many_scrapes_at_once_make_one_read(monkeypatch):
    import threading

    reads, release = [], threading.Event()

    def slow(since):
        reads.append(since)
        release.wait(10)
        return prometheus.Snapshot(since=since)

    monkeypatch.setattr(prometheus, "read", slow)
    collector = prometheus.StreamopsCollector(since=lambda: SINCE, max_age_s=60, wait_s=10)
    got: list[dict] = []
    scrapes = [threading.Thread(target=lambda: got.append(_parse(collector.collect()))) for _ in range(8)]
    for t in scrapes:
        t.start()
    release.set()
    for t in scrapes:
        t.join(15)
    assert len(got) == 8 and all(g["streamops_database_up"] == {(): 1.0} for g in got)
    _parse(collector.collect())  # fresh enough: served from the snapshot
    assert len(reads) == 1


def test_a_read_that_hangs_is_a_prompt_scrape_with_the_last_snapshots_age(monkeypatch):
    import threading
    import time

    monkeypatch.setattr(prometheus, "read", lambda since: prometheus.Snapshot(since=since))
    collector = prometheus.StreamopsCollector(since=lambda: SINCE, max_age_s=0, wait_s=0.5)
    assert _parse(collector.collect())["streamops_database_up"] == {(): 1.0}
    release = threading.Event()
    monkeypatch.setattr(prometheus, "read", _hanging_read(release))  # a stalled server: no timeout fires
    try:
        for _ in range(2):  # the second finds the first's read still hanging: no wait at all
            t0 = time.monotonic()
            values = _parse(collector.collect())
            assert time.monotonic() - t0 < 2
            assert values["streamops_database_up"] == {(): 0.0}
            assert values["streamops_snapshot_age_seconds"][()] >= 0
            assert set(values) == {"streamops_database_up", "streamops_snapshot_age_seconds"}, "no stale figures"
    finally:
        release.set()


def test_retention_tallies_pruned_gaps_by_the_exporter_s_own_buckets():
    """runs_retention (migration 040) keeps a deleted failure's gap as its bucket only: exact for
    the histogram as long as both ladders are the same."""
    import re

    from streamops.paths import sql_dir

    sql = (sql_dir() / "schema" / "040_run_ledger_retention.sql").read_text()
    ladder = re.search(r"ARRAY\[([0-9, ]+)\]::float8\[\]", sql).group(1)
    assert tuple(float(b) for b in ladder.split(",")) == prometheus.GAP_BUCKETS_S


def test_each_app_s_error_budget_is_a_gauge_and_its_burn_rates_one_per_window():
    budget = Row(app="b", slo_target=0.9, budget_s=8640.0, spent_s=540.0, left_ratio=0.9375, short_burn=8.0,
                 long_burn=1.5, price=480.0, age_s=12.0)
    values = _parse(prometheus.families(prometheus.Snapshot(since=SINCE, budgets=[budget])))
    app = (("app", "b"),)
    assert values["streamops_slo_burn_rate"] == {(("app", "b"), ("window", "long")): 1.5,
                                                 (("app", "b"), ("window", "short")): 8.0}
    assert values["streamops_slo_budget_seconds"] == {app: 8640.0}
    assert values["streamops_slo_budget_spent_seconds"] == {app: 540.0}
    assert values["streamops_slo_budget_left_ratio"] == {app: 0.9375}
    assert values["streamops_slo_price_core_seconds"] == {app: 480.0}
    assert values["streamops_slo_target_ratio"] == {app: 0.9}
    assert values["streamops_slo_budget_age_seconds"] == {app: 12.0}
    empty = _parse(prometheus.families(prometheus.Snapshot(since=SINCE)))
    assert not any(name.startswith("streamops_slo_") for name in empty), "no budget measured: no sample"
