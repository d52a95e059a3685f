"""Prometheus metrics: `/metrics`, read from PostgreSQL.

PostgreSQL is the source of truth: a read runs a few small named queries (`sql/queries/metrics_*.sql`)
in one connection and turns their rows into metric families (`families`, pure). The exporter keeps
only its latest read (`CachedSnapshot`): one thread reads at a time, at most every
`STREAMOPS_METRICS_MAX_AGE_S` (5 s), so any number of scrapes cost one read; any number of
exporters give the same figures, and a restarted one carries on where the tables are. Reads go
through `store/observe.py`: an engine of their own (2 connections, not the supervisor's pool),
short timeouts, and a deadline, so a locked table or a stalled server is a prompt
`streamops_database_up 0`, never a scrape that hangs (issue 48).

The exporter is started with the supervisor (`streamops supervise`; the CLI passes `start_exporter`
in, since execute/ sits beside report/), not served by the Airflow plugin: Prometheus scrapes it
without an Airflow JWT (which expires), and the figures keep coming while Airflow's api-server is
down, which is when one wants them. `streamops metrics` prints one scrape; `--serve` runs the
exporter alone (compose's `streamops-metrics` service).

Counters and retention: `batches` and `quarantined lines` count the rows of the current UTC day
(their tables lose old rows to retention, and a counter that falls would read as a reset plus a
burst); they restart at 00:00 UTC, which Prometheus reads as a counter reset, and their `_created`
says when. Reconfigurations are never deleted, and failures retention deletes are tallied
(`failures_pruned`, migration 040) and added back: both counted from their first row.
docs/reporting.md lists every metric.
"""

from __future__ import annotations

import logging
import operator
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

from streamops.store import db, observe

log = logging.getLogger("streamops.metrics")

HOST_ENV, PORT_ENV = "STREAMOPS_METRICS_HOST", "STREAMOPS_METRICS_PORT"
MAX_AGE_ENV, DEFAULT_MAX_AGE_S = "STREAMOPS_METRICS_MAX_AGE_S", 5.0  # a third of Prometheus's usual 15 s
DEFAULT_HOST = "127.0.0.1"  # loopback: the figures name every stage; exposing them is a choice
DEFAULT_PORT = 9464  # the port OpenTelemetry's Prometheus exporters use; 0: no exporter
# Upper bounds (s) of the output-gap histogram: a masked failure costs about one trigger interval,
# a warm failover seconds, a cold restart tens of seconds, a given-up stage minutes and more.
GAP_BUCKETS_S = (1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)

STAGE = ["app", "stage"]
RUN = ["app", "stage", "role"]
# name → (help, labels), for every per-run gauge: the column of metrics_stage_runs of the same
# name after `streamops_stage_`, its unit in the name as Prometheus's conventions ask.
RUN_GAUGES = {
    "running": "1 while the run's status is running, else 0 (starting, stopping, stopped, failed)",
    "cores": "cores of the run (a live scaling changes them within the run)",
    "executors": "live executors of the run, as its driver's latest heartbeat counted them (a cluster pool); absent "
                 "on a local pool, whose driver runs the tasks itself",
    "backlog_rows": "input rows not yet read, at the run's latest batch of the last day",
    "backlog_files": "input files not yet read, at the run's latest batch of the last day",
    "input_rows_per_second": "input rows read in the last minute, per second",
    "latency_p95_seconds": "p95 latency (sink commit minus event time) of the latest batch with input in the last "
                           "minute; absent while the stage is idle",
    "heartbeat_age_seconds": "seconds since the run's driver last beat",
}
_RUN_COLUMNS = {"input_rows_per_second": "input_rps", "latency_p95_seconds": "latency_p95_s",
                "heartbeat_age_seconds": "heartbeat_age_s"}


def start_of_utc_day(now: datetime | None = None) -> datetime:
    """00:00 UTC of today: where the counters of tables that retention shrinks start."""
    now = now or datetime.now(UTC)
    return now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)


@dataclass(frozen=True)
class Snapshot:
    """One scrape's rows, as the metrics_* queries return them."""
    since: datetime  # start of the windowed counters
    runs: Sequence[Any] = ()
    stages: Sequence[Any] = ()
    batches: Sequence[Any] = ()
    quarantined: Sequence[Any] = ()
    reconfigurations: Sequence[Any] = ()
    failures: Sequence[Any] = ()
    gaps: Sequence[Any] = ()
    budgets: Sequence[Any] = ()


def read(since: datetime) -> Snapshot:
    """The scrape's rows, in one connection of the observability engine."""
    with db.connection(observe.engine()) as conn:
        def q(statement: Any, **params: Any) -> Sequence[Any]:
            return conn.execute(statement, params).all()

        return Snapshot(
            since=since,
            runs=q(db.query("metrics_stage_runs")),
            stages=q(db.query("metrics_stages")),
            batches=q(db.query("metrics_batches"), since=since),
            quarantined=q(db.query("metrics_quarantined"), since=since),
            reconfigurations=q(db.query("metrics_reconfigurations")),
            failures=q(db.query("metrics_failures")),
            gaps=q(db.query("metrics_output_gaps"), bounds=list(GAP_BUCKETS_S)),
            budgets=q(db.query("metrics_slo_budgets")),
        )


def _gauge(name: str, doc: str, labels: list[str], rows: Iterable[Any], value: Callable[[Any], Any]) -> Metric:
    g = GaugeMetricFamily(name, doc, labels=labels)
    for r in rows:
        v = value(r)
        if v is not None:  # an unknown figure is an absent sample, never a 0
            g.add_metric([str(getattr(r, k)) for k in labels], float(v))
    return g


def _counter(name: str, doc: str, labels: list[str], rows: Iterable[Any], column: str,
             created: float | None = None) -> Metric:
    c = CounterMetricFamily(name, doc, labels=labels)
    for r in rows:
        c.add_metric([str(getattr(r, k)) for k in labels], float(getattr(r, column)), created=created)
    return c


def _histogram(rows: Sequence[Any]) -> Metric:
    h = HistogramMetricFamily("streamops_failure_output_gap_seconds",
                              "output gap of each closed failure: the stage's last sink commit before it to its "
                              "first after it (failures.downtime_ms)", labels=RUN)
    series: dict[tuple[str, ...], list[Any]] = {}
    for r in rows:
        series.setdefault((str(r.app), str(r.stage), str(r.role)), []).append(r)
    for key, buckets in series.items():
        buckets.sort(key=lambda b: b.le)
        h.add_metric(list(key), [(_le(b.le), float(b.at_most)) for b in buckets] + [("+Inf", float(buckets[0].n))],
                     float(buckets[0].sum_s))
    return h


def _le(bound: float) -> str:
    """A bucket's bound as Prometheus client libraries spell it (1.0, 2.5)."""
    return str(floatToGoString(float(bound)))  # type: ignore[no-untyped-call]  # the library leaves it unannotated


def _slo(rows: Sequence[Any]) -> list[Metric]:
    """Each app's SLO error budget, as the last re-plan stored it (slo_budgets, budget_pass.py)."""
    app = ["app"]
    burn = GaugeMetricFamily("streamops_slo_burn_rate", "the app's share of seconds above R_max over the share its "
                             "SLO allows, in the short and long window (5 min and 1 h at a 60 s control interval): at "
                             "1 the day's budget lasts the day", labels=["app", "window"])
    for r in rows:
        burn.add_metric([str(r.app), "short"], float(r.short_burn))
        burn.add_metric([str(r.app), "long"], float(r.long_burn))
    return [
        _gauge("streamops_slo_target_ratio", "the share of seconds within R_max the app's SLO aims at (slo_target)",
               app, rows, lambda r: r.slo_target),
        _gauge("streamops_slo_budget_seconds", "seconds above R_max the app's SLO allows in the UTC day "
               "((1 - slo_target) x 86 400)", app, rows, lambda r: r.budget_s),
        _gauge("streamops_slo_budget_spent_seconds", "seconds above R_max the app had so far today (UTC)", app, rows,
               lambda r: r.spent_s),
        _gauge("streamops_slo_budget_left_ratio", "the share of the day's error budget not spent yet (negative: "
               "overspent)", app, rows, lambda r: r.left_ratio),
        burn,
        _gauge("streamops_slo_price_core_seconds", "core-seconds mpc puts on one second above the app's R_max, as the "
               "error budget sets it (plan/budget.py)", app, rows, lambda r: r.price),
        _gauge("streamops_slo_budget_age_seconds", "seconds since the re-plan last measured the app's error budget",
               app, rows, lambda r: r.age_s),
    ]


def families(s: Snapshot, database_up: bool = True, age_s: float | None = None) -> list[Metric]:
    """The metric families of one scrape's rows (pure); `age_s`: seconds since they were read."""
    up = GaugeMetricFamily("streamops_database_up", "1 when this scrape's figures are a fresh read of PostgreSQL, "
                           "0 when it did not answer in time (then only the snapshot's age is in it)",
                           value=1.0 if database_up else 0.0)
    age = GaugeMetricFamily("streamops_snapshot_age_seconds", "seconds since the exporter last read PostgreSQL "
                            "successfully (absent before its first read)")
    if age_s is not None:
        age.add_metric([], max(0.0, age_s))
    if not database_up:
        return [up, age]  # no stale figure that would read as live
    since = s.since.timestamp()
    out: list[Metric] = [up, age]
    for name, doc in RUN_GAUGES.items():
        column = _RUN_COLUMNS.get(name, name)
        out.append(_gauge(f"streamops_stage_{name}", doc, RUN, s.runs, operator.attrgetter(column)))
    out += [
        _gauge("streamops_source_lag_records", "a Kafka stage's records behind the topic's latest offsets, summed "
               "over partitions, at the run's latest batch of the last day (its backlog_rows); absent for files",
               RUN, s.runs, lambda r: getattr(r, "source_lag_records", None)),
        _gauge("streamops_stage_replicas", "the stage's replicas running (its primary and replica-N runs)", STAGE,
               s.stages, lambda r: r.replicas),
        _gauge("streamops_stage_replicas_wanted", "the replicas the stage is to have (stages.replicas)", STAGE,
               s.stages, lambda r: r.replicas_wanted),
        _gauge("streamops_checkpoint_bytes", "bytes on disk of the checkpoints the stage's latest runs resume from "
               "(one per role, with their quarantine query's), as the supervisor last measured them (each minute)",
               STAGE, s.stages, lambda r: getattr(r, "checkpoint_bytes", None)),
        _gauge("streamops_stage_given_up", "1 when the watchdog gave up on the stage (stages.health = failed) until "
               "it is deployed again", STAGE, s.stages, lambda r: r.given_up),
        _counter("streamops_stage_batches", "micro-batches run (stage_metrics rows) since 00:00 UTC",
                 RUN, s.batches, "batches", created=since),
        _counter("streamops_stage_quarantined_lines", "input lines quarantined since 00:00 UTC, by reason kind",
                 [*STAGE, "reason_kind"], s.quarantined, "lines", created=since),
        _counter("streamops_reconfigurations", "finished reconfigurations, by action, mechanism and end status",
                 [*STAGE, "action", "mechanism", "status"], s.reconfigurations, "n"),
        _counter("streamops_failures", "failures the watchdog, the supervisor or the driver recorded, by kind and "
                 "cause (real or injected)", [*RUN, "kind", "cause"], s.failures, "n"),
        _histogram(s.gaps),
        *_slo(s.budgets),
    ]
    return out


def metric_names() -> list[str]:
    """Every metric name the exporter emits, as in the exposition (counters with `_total`)."""
    return [f.name + ("_total" if f.type == "counter" else "")
            for f in families(Snapshot(since=datetime.fromtimestamp(0, UTC)))]


class CachedSnapshot:
    """The exporter's latest read. One read at a time, by a thread of its own; a new one at most
    every `max_age_s` (a failed one too: an outage is not hammered); a scrape waits at most
    `wait_s` for it, less the time the read has already taken, so while a read hangs every
    scrape answers at once."""

    def __init__(self, read: Callable[[], Snapshot], max_age_s: float, wait_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._read, self.max_age_s, self.wait_s, self._clock = read, max_age_s, wait_s, clock
        self._lock = threading.Lock()
        self._snapshot: Snapshot | None = None
        self._read_at: float | None = None  # when the last good read ended
        self._started_at: float | None = None  # when the last read started
        self._error: BaseException | None = None  # the last finished read's, None if it worked
        self._reading: threading.Thread | None = None

    def get(self) -> tuple[Snapshot | None, float | None, BaseException | None]:
        """(the snapshot, or None if the database did not answer; seconds since the last good read,
        None before one; why not)."""
        with self._lock:
            self._start_if_due()
            reading, started = self._reading, self._started_at
        if reading is not None and started is not None:  # both set together, under the lock
            reading.join(max(0.0, self.wait_s - (self._clock() - started)))
        with self._lock:
            age = None if self._read_at is None else self._clock() - self._read_at
            if self._reading is not None:
                return None, age, observe.NotAnswering(f"no answer within {self.wait_s:g} s")
            return (None, age, self._error) if self._error is not None else (self._snapshot, age, None)

    def _start_if_due(self) -> None:
        now = self._clock()
        if self._reading is not None or (self._started_at is not None and now - self._started_at < self.max_age_s):
            return
        self._started_at = now
        self._reading = threading.Thread(target=self._run, name="streamops-metrics-read", daemon=True)
        self._reading.start()

    def _run(self) -> None:
        try:
            snapshot, error = self._read(), None
        except Exception as e:  # kept for the scrapes to report
            snapshot, error = None, e
        with self._lock:
            if error is None:
                self._snapshot, self._read_at = snapshot, self._clock()
            self._error, self._reading = error, None


class StreamopsCollector(Collector):
    """Serves the cached snapshot on each `collect` (each scrape); a database that does not
    answer gives `streamops_database_up 0` and the last good read's age, logged once until it
    answers again. `since` gives the start of the windowed counters (00:00 UTC; a test passes
    its own); `max_age_s` (STREAMOPS_METRICS_MAX_AGE_S) and `wait_s` (observe's timeout) as in
    CachedSnapshot."""

    def __init__(self, since: Callable[[], datetime] = start_of_utc_day, max_age_s: float | None = None,
                 wait_s: float | None = None) -> None:
        self.since = since
        if max_age_s is None:
            max_age_s = float(os.environ.get(MAX_AGE_ENV) or DEFAULT_MAX_AGE_S)
        # `read` looked up at each call: a test replaces the module's
        self._cache = CachedSnapshot(lambda: read(self.since()), max_age_s,
                                     observe.timeout_s() if wait_s is None else wait_s)
        self._down = False

    def describe(self) -> list[Metric]:
        return []  # registering must not query the database

    def collect(self) -> Iterable[Metric]:
        snapshot, age, error = self._cache.get()
        if snapshot is None:  # the database away or stalled: say so in the scrape, not with an HTTP 500
            if not self._down:
                log.warning("action=metrics scrape could not read the database: %s: %s", type(error).__name__,
                            observe.reason(error) if error else "")
            self._down = True
            return families(Snapshot(since=self.since()), database_up=False, age_s=age)
        self._down = False
        return families(snapshot, age_s=age)


def registry(collector: Collector | None = None) -> CollectorRegistry:
    """A registry holding only streamops' collector (no process or platform metrics)."""
    reg = CollectorRegistry()
    reg.register(collector or StreamopsCollector())
    return reg


def exposition(collector: Collector | None = None) -> str:
    """One scrape as Prometheus's text format (`streamops metrics`)."""
    from prometheus_client import generate_latest

    return generate_latest(registry(collector)).decode()


@dataclass(frozen=True)
class Settings:
    host: str
    port: int  # 0: no exporter

    @classmethod
    def from_env(cls) -> Settings:
        """`STREAMOPS_METRICS_HOST` (127.0.0.1) and `STREAMOPS_METRICS_PORT` (9464; 0: off)."""
        return cls(os.environ.get(HOST_ENV) or DEFAULT_HOST, int(os.environ.get(PORT_ENV) or DEFAULT_PORT))


class Exporter:
    """A running `/metrics` server (prometheus_client's, a thread per request)."""

    def __init__(self, server: Any, thread: Any) -> None:
        self._server, self._thread = server, thread
        self.host, self.port = server.server_address[0], server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def serve(host: str, port: int, collector: Collector | None = None) -> Exporter:
    """Serve `/metrics` on host:port (port 0: a free one) in a daemon thread; OSError if it cannot bind."""
    from prometheus_client import start_http_server

    server, thread = start_http_server(port, addr=host, registry=registry(collector))
    return Exporter(server, thread)


def start_exporter(settings: Settings | None = None, collector: Collector | None = None) -> Exporter | None:
    """The supervisor's exporter, as the environment says; None when it is off (port 0) or its port is
    taken or unbindable: a warning naming the action, and the caller carries on without it."""
    settings = settings or Settings.from_env()
    if settings.port == 0:
        log.info("action=metrics-exporter off (%s=0)", PORT_ENV)
        return None
    try:
        exporter = serve(settings.host, settings.port, collector)
    except OSError as e:
        log.warning("action=metrics-exporter not started: cannot listen on %s:%d (%s); no /metrics from this "
                    "process: free the port or set %s (0: off)", settings.host, settings.port, e.strerror or e,
                    PORT_ENV)
        return None
    log.info("action=metrics-exporter serving %s", exporter.url)
    return exporter
