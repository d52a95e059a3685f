"""Prometheus metrics: `/metrics`, read from PostgreSQL on each scrape.

PostgreSQL is the source of truth: a scrape runs a few small named queries (`sql/queries/metrics_*.sql`)
in one connection and turns their rows into metric families (`families`, pure). Nothing is kept in
the exporter's memory, so any number of exporters give the same figures, and a restarted one
carries on where the tables are.

The exporter is started with the supervisor (`streamops supervise`; the CLI passes `start_exporter`
in, since execute/ sits beside report/), not served by the Airflow plugin: Prometheus scrapes it
without an Airflow JWT (which expires), and the figures keep coming while Airflow's api-server is
down, which is when one wants them. `streamops metrics` prints one scrape; `--serve` runs the
exporter alone (compose's `streamops-metrics` service).

Counters and retention: `batches` and `quarantined lines` count the rows of the current UTC day
(their tables lose old rows to retention, and a counter that falls would read as a reset plus a
burst); they restart at 00:00 UTC, which Prometheus reads as a counter reset, and their `_created`
says when. Failures and reconfigurations are never deleted: counted from their first row.
docs/reporting.md lists every metric.
"""

from __future__ import annotations

import logging
import operator
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

from streamops.store import db

log = logging.getLogger("streamops.metrics")

HOST_ENV, PORT_ENV = "STREAMOPS_METRICS_HOST", "STREAMOPS_METRICS_PORT"
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
    now = now or datetime.now(timezone.utc)
    return now.astimezone(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)


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


def read(since: datetime) -> Snapshot:
    """The scrape's rows, in one connection."""
    with db.connection() as conn:
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
    return str(floatToGoString(float(bound)))


def families(s: Snapshot, database_up: bool = True) -> list[Metric]:
    """The metric families of one scrape's rows (pure)."""
    up = GaugeMetricFamily("streamops_database_up", "1 when this scrape read PostgreSQL, 0 when it could not "
                           "(then no other streamops_ metric is in it)", value=1.0 if database_up else 0.0)
    if not database_up:
        return [up]
    since = s.since.timestamp()
    out: list[Metric] = [up]
    for name, doc in RUN_GAUGES.items():
        column = _RUN_COLUMNS.get(name, name)
        out.append(_gauge(f"streamops_stage_{name}", doc, RUN, s.runs, operator.attrgetter(column)))
    out += [
        _gauge("streamops_stage_replicas", "the stage's replicas running (its primary and replica-N runs)", STAGE,
               s.stages, lambda r: r.replicas),
        _gauge("streamops_stage_replicas_wanted", "the replicas the stage is to have (stages.replicas)", STAGE,
               s.stages, lambda r: r.replicas_wanted),
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
    ]
    return out


def metric_names() -> list[str]:
    """Every metric name the exporter emits, as in the exposition (counters with `_total`)."""
    return [f.name + ("_total" if f.type == "counter" else "")
            for f in families(Snapshot(since=datetime.fromtimestamp(0, timezone.utc)))]


class StreamopsCollector(Collector):
    """Reads PostgreSQL on each `collect` (each scrape); a database that does not answer gives
    `streamops_database_up 0` and nothing else, logged once until it answers again. `since`
    gives the start of the windowed counters (00:00 UTC; a test passes its own)."""

    def __init__(self, since: Callable[[], datetime] = start_of_utc_day) -> None:
        self.since = since
        self._down = False

    def describe(self) -> list[Metric]:
        return []  # registering must not query the database

    def collect(self) -> Iterable[Metric]:
        try:
            snapshot = read(self.since())
        except Exception as e:  # the database away: say so in the scrape, not with an HTTP 500
            if not self._down:
                log.warning("action=metrics scrape could not read the database: %s: %s", type(e).__name__,
                            str(e).splitlines()[0] if str(e) else "")
            self._down = True
            return families(Snapshot(since=self.since()), database_up=False)
        self._down = False
        return families(snapshot)


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
