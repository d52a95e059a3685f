"""The Kafka demo app's sustained rate and end-to-end latency, against the same job on files
(`streamops bench kafka`).

The stage is the demo's clicks.wordcount as apps.yaml declares it (the wordcount demo job, its
trigger, its batch of `max_offsets_per_trigger` records, its state partitions) on a local pool of
1, 2 and 4 cores (local[N]), reading either a fresh 4-partition topic of an embedded broker of its
own or a directory of files of 1 000 records (`max_files_per_trigger` = the same batch). Per
source and cores, one run:

  drain    BACKLOG valid web records wait in the topic (or the directory) when the stage starts
           (no warm-up). From stage_metrics, each batch after the first (a cold JVM) reads at
           input_rows / batch_duration_ms: their median and min-max, and the whole drain's rows
           over its wall time (from the start of batch 2 to the end of the last).
  latency  the backlog read, a feed of RATE records/s for FEED_S seconds, in 0.5 s ticks, each
           record stamped within its tick: the median over the feed's batches (the first left
           out) of stage_metrics.latency_p50_ms, the sink's commit time minus each output row's
           event time (a word's newest record).
  correct  the feed stopped, the sink equals the oracle (demo/oracles.py) over every record.

RATE is the same for every run, so they compare: half the first run's (kafka, 1 core) median
drain rate, at most 80 % of what the batch cap allows a trigger (records a batch / trigger
interval: the stage's sustainable ceiling), unless --rate says. The runs go by cores, kafka
then files, so both sources of a row see the same machine; this process generates the records
on the same cores. Scratch database `streamops_bench_kafka`, a temporary STREAMOPS_HOME and the
broker in it, removed at the end. Results in bench/results/kafka.json; a table is printed.

    .venv/bin/python bench/kafka.py [--quick] [--cores 1,2,4] [--backlog 300000] [--feed-s 90] [--rate N]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "plugins"), str(REPO)]

from bench.harness import end_run, load_1m, scratch_run, summary, write_result  # noqa: E402
from demo.oracles import actual, expected  # noqa: E402
from demo.stages import demo_job  # noqa: E402
from streamops import kafka_broker, registry  # noqa: E402
from streamops.execute import stages  # noqa: E402
from streamops.generator import SCHEMAS, sample_lines  # noqa: E402
from streamops.generator.topic import ensure_topic  # noqa: E402
from streamops.sources import KafkaSource  # noqa: E402
from streamops.store import db  # noqa: E402
from streamops.waiting import wait_until  # noqa: E402

SCRATCH_DB = "streamops_bench_kafka"
APP = "kb"
DEMO = "clicks.wordcount"
SOURCES = ("kafka", "files")
PARTITIONS = 4
FILE_RECORDS = 1000
TICK_S = 0.5

Say = Callable[[str], None]


def _demo() -> registry.Stage:
    return registry.load(REPO / "apps.yaml").stage(DEMO)[2]


def _batch_cap(demo: registry.Stage) -> int:
    """The demo's records a batch (its topic's max_offsets_per_trigger): both sources' batch here."""
    assert isinstance(demo.source, KafkaSource), f"{DEMO} reads {demo.source.kind}, not a topic"
    return demo.source.max_offsets_per_trigger


def _registry(name: str, source: str, cores: int, topic: str, demo: registry.Stage) -> registry.Registry:
    """The demo stage, one source or the other, on a local pool of `cores`."""
    cap = _batch_cap(demo)
    src = {"kind": "kafka", "topic": topic, "max_offsets_per_trigger": cap} if source == "kafka" else \
        {"kind": "files", "path": f"{name}/in", "max_files_per_trigger": max(1, cap // FILE_RECORDS)}
    stage = {**demo_job("wordcount", src), "cores": {"initial": cores, "max": cores},
             "state_partitions": demo.state_partitions, "trigger_interval_ms": demo.trigger_interval_ms,
             "pool": "p", "params": {**demo.params, "cpu_cost": 0}}  # the source's cost, not the demo's burn
    assert stage["job"] == demo.job, f"the demo runs {demo.job}, the bench {stage['job']}"
    return registry.parse({
        "pools": {"p": {"master": "local", "cores": cores}},
        "apps": {APP: {"r_max_ms": 10_000, "maintenance_window": {"cron": "0 3 * * *", "duration_min": 30},
                       "stages": {name: stage}}}})


class TopicWriter:
    """Lines to the topic, spread evenly over its partitions; flushed before returning."""

    def __init__(self, topic: str):
        from confluent_kafka import Producer

        self.topic, self.sent = topic, 0
        conf = kafka_broker.client_settings().librdkafka_producer()
        self.producer = Producer({**conf, "linger.ms": 5, "log_level": 0})

    def __call__(self, lines: list[str]) -> None:
        for line in lines:
            while True:
                try:
                    self.producer.produce(self.topic, value=line.encode(), partition=self.sent % PARTITIONS)
                    break
                except BufferError:  # the client's queue is full: let it send first
                    self.producer.poll(0.5)
            self.sent += 1
        if self.producer.flush(60):
            raise RuntimeError(f"topic {self.topic}: records left unsent")


class DirWriter:
    """Lines as files of FILE_RECORDS, each written aside and moved in whole (Spark lists the
    directory: it must never see half a file)."""

    def __init__(self, directory: Path, staging: Path):
        self.directory, self.staging, self.files = directory, staging, 0
        directory.mkdir(parents=True, exist_ok=True)
        staging.mkdir(parents=True, exist_ok=True)

    def __call__(self, lines: list[str]) -> None:
        for i in range(0, len(lines), FILE_RECORDS):
            tmp = self.staging / f"part-{self.files:06d}.json"
            tmp.write_text("\n".join(lines[i:i + FILE_RECORDS]) + "\n")
            os.replace(tmp, self.directory / tmp.name)
            self.files += 1


class Feed:
    """`rate` records a second through `write`, a tick's worth every TICK_S, each record stamped
    between the previous tick and this one (so its latency starts when it could have been sent)."""

    def __init__(self, write: Callable[[list[str]], None], rate: int, rng: random.Random, lines: list[str]):
        self.write, self.rate, self.rng, self.lines = write, rate, rng, lines
        self.stop = threading.Event()
        self.error: Exception | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        last, due, owed = datetime.now(UTC), time.monotonic(), 0.0
        try:
            while not self.stop.wait(max(0.0, due + TICK_S - time.monotonic())):
                due += TICK_S
                now = datetime.now(UTC)
                owed += self.rate * TICK_S
                n, owed = int(owed), owed - int(owed)
                batch = sample_lines(SCHEMAS["web"], n, rng=self.rng, ts_from=last, ts_to=now) if n else []
                self.write(batch)
                self.lines += batch
                last = now
        except Exception as e:  # noqa: BLE001 - said by the run, which then fails
            self.error = e


def _batches(dep_id: int) -> list:
    return db.rows("bench/batches_of_run", d=dep_id)


def _read(res: stages.StartResult, backlog: int) -> bool:
    """Whether the run has read the backlog; a run that ended instead fails the wait at once."""
    dep = db.row("bench/deployment", i=res.deployment_id)
    if dep is not None and dep.status not in ("starting", "running"):
        raise RuntimeError(f"the run is {dep.status}: {dep.stop_reason}; driver log {res.log_path}")
    return sum(b.input_rows for b in _batches(res.deployment_id)) >= backlog


def _drain(dep_id: int) -> dict:
    """Rows/s of the drain's batches after the first, from stage_metrics."""
    done = _batches(dep_id)
    after = done[1:]
    rates = [b.input_rows * 1000 / b.batch_duration_ms for b in after if b.batch_duration_ms > 0]
    out = {"batches": len(done), "first_batch_ms": done[0].batch_duration_ms if done else None,
           "per_batch": [{"rows": b.input_rows, "ms": b.batch_duration_ms} for b in done],
           "rows_per_s": summary(rates, 1), "rows_per_batch": summary([b.input_rows for b in after], 1)}
    if after:
        span = (after[-1].ts - after[0].ts).total_seconds() + after[-1].batch_duration_ms / 1000
        out["wall_rows_per_s"] = round(sum(b.input_rows for b in after) / span, 1) if span > 0 else None
    return out


def one_run(source: str, cores: int, args: argparse.Namespace, rate: int | None, demo: registry.Stage,
            say: Say) -> dict:
    name = f"{source}{cores}"
    sid = registry.stage_id(APP, name)
    topic = f"kb-{name}-{uuid.uuid4().hex[:6]}"
    reg = _registry(name, source, cores, topic, demo)
    trigger_ms = demo.trigger_interval_ms
    work = registry.resolve_path(name)
    if source == "kafka":
        ensure_topic(kafka_broker.client_settings().librdkafka(), topic, PARTITIONS)
        write: Callable[[list[str]], None] = TopicWriter(topic)
    else:
        write = DirWriter(registry.input_dir(reg.stage(sid)[2]) or work / "in", work / "staging")
    rng = random.Random(cores)  # the same records for both sources of a row
    now = datetime.now(UTC)
    # an hour old: a feed record's newer event time is what a word's latency is taken from
    lines = sample_lines(SCHEMAS["web"], args.backlog, rng=rng, ts_from=now - timedelta(hours=1),
                         ts_to=now - timedelta(minutes=10))
    write(lines)
    say(f"{name}: {args.backlog} records in the {'topic' if source == 'kafka' else 'directory'}; starting")
    result: dict = {"source": source, "cores": cores, "backlog": args.backlog, "trigger_ms": trigger_ms,
                    "oversubscribed": cores > (os.cpu_count() or 1), "load_1m_before": load_1m()}
    feed = Feed(write, rate or 0, rng, lines)
    try:
        t = time.monotonic()
        res = stages.start_stage(sid, reg, wait_s=300, warm_up=False)
        result["start_to_running_s"] = round(time.monotonic() - t, 1)
        drained = wait_until(lambda: _read(res, args.backlog), 120 + args.backlog / 200, interval_s=1.0)
        if not drained:
            raise TimeoutError(f"the backlog not read; driver log {res.log_path}")
        result["drain"] = _drain(res.deployment_id)
        result["drain_s"] = round(time.monotonic() - t, 1)
        d = result["drain"]
        say(f"{name}: drained in {result['drain_s']}s (running after {result['start_to_running_s']}s, first batch "
            f"{d['first_batch_ms']} ms): {d['rows_per_s']['median']} rows/s a batch over {d['rows_per_s']['n']} "
            f"batches ({d['rows_per_s']['min']}-{d['rows_per_s']['max']}), {d.get('wall_rows_per_s')} over the wall")
        if d["rows_per_s"]["median"] is None:
            raise RuntimeError(f"the backlog fit in {d['batches']} batch(es): no batch after the first to measure")
        if rate is None:  # the first run sets the feed's rate for all
            # Sustainable at all: a batch reads at most `cap` records a trigger, whatever its speed
            # (a first run at 6 300/s over a ceiling of 5 000/s measured a growing lag, not latency).
            ceiling = _batch_cap(demo) * 1000 / trigger_ms
            rate = feed.rate = max(50, int(min(d["rows_per_s"]["median"] / 2, 0.8 * ceiling) // 50 * 50))
            say(f"feed rate for every run: {rate} records/s (half of {name}'s median drain rate, at most 80 % of "
                f"the {ceiling:.0f}/s its batch cap and trigger allow)")
        result["rate"] = rate
        started = datetime.now(UTC)
        feed.thread.start()
        feed.stop.wait(args.feed_s)
        feed.stop.set()
        feed.thread.join(30)
        ended = datetime.now(UTC)
        if feed.error is not None:
            raise RuntimeError(f"the feed failed: {feed.error}")
        fed = len(feed.lines) - args.backlog
        want = expected("wordcount", (json.loads(x) for x in feed.lines))
        t = time.monotonic()
        equal = bool(wait_until(lambda: actual(db.engine(), sid, "wordcount") == want, 180, interval_s=2.0))
        result.update(fed=fed, sink_equals_oracle=equal, words=sum(want.values()), keys=len(want),
                      caught_up_s=round(time.monotonic() - t, 1) if equal else None)
        time.sleep(2)  # the last batch's metrics row is written after its commit
        # the feed's batches from its second trigger on: the first may still hold the drain's tail
        fed_batches = [b for b in _batches(res.deployment_id)
                       if started + timedelta(milliseconds=trigger_ms) <= b.ts < ended]
        result["feed"] = {
            "batches": len(fed_batches),
            "latency_p50_ms": summary([b.latency_p50_ms for b in fed_batches if b.latency_p50_ms is not None], 1),
            "latency_p95_ms": summary([b.latency_p95_ms for b in fed_batches if b.latency_p95_ms is not None], 1),
            "batch_ms": summary([b.batch_duration_ms for b in fed_batches], 1),
            "rows_per_batch": summary([b.input_rows for b in fed_batches], 1)}
        f = result["feed"]
        result["kept_up"] = f["batch_ms"]["median"] is not None and f["batch_ms"]["median"] < trigger_ms
        say(f"{name}: fed {fed} records at {rate}/s for {args.feed_s:.0f}s: latency p50 median "
            f"{f['latency_p50_ms']['median']} ms over {f['batches']} batches (batch {f['batch_ms']['median']} ms); "
            f"sink = oracle: {equal} ({result['words']} words, {result['keys']} keys)")
        return result
    finally:
        result["load_1m_after"] = load_1m()
        end_run(sid, reg, feed.stop, feed.thread, work, "bench:kafka", say, deadline_s=30)


def _cell(s: dict | None, unit: str = "") -> str:
    if not s or s.get("median") is None:
        return "-"
    return f"{s['median']:,.0f}{unit} ({s['min']:,.0f}-{s['max']:,.0f})"


def table(runs: list[dict], rate: int | None) -> str:
    head = ("source", "cores", "drain rows/s a batch: median (min-max)", "drain rows/s wall",
            f"e2e p50 ms at {rate} rec/s: median (min-max)", "batches drain/feed", "kept up", "sink = oracle")
    rows = [head]
    for r in runs:
        d, f = r.get("drain") or {}, r.get("feed") or {}
        cores = f"{r['cores']}{'*' if r['oversubscribed'] else ''}"
        if "error" in r:
            rows.append((r["source"], cores, f"error: {r['error'][:90]}", "", "", "", "", ""))
            continue
        wall = f"{d['wall_rows_per_s']:,.0f}" if d.get("wall_rows_per_s") else "-"
        rows.append((r["source"], cores, _cell(d.get("rows_per_s")), wall,
                     _cell(f.get("latency_p50_ms")), f"{d.get('rows_per_s', {}).get('n', 0)}/{f.get('batches', 0)}",
                     "yes" if r.get("kept_up") else "no", "yes" if r.get("sink_equals_oracle") else "NO"))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(head))]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="1 core only, 80 000 records, a 30 s feed (about 3 min)")
    p.add_argument("--cores", default=None, help="comma-separated local pools' cores (default 1,2,4)")
    p.add_argument("--backlog", type=int, default=None, help="records waiting at the start (default 300 000)")
    p.add_argument("--feed-s", type=float, default=None, help="seconds of the fixed-rate feed (default 90)")
    p.add_argument("--rate", type=int, default=None, help="the feed's records/s (default: half the first drain's)")
    args = p.parse_args(argv)
    cores = [int(c) for c in (args.cores or ("1" if args.quick else "1,2,4")).split(",")]
    args.backlog = args.backlog or (80_000 if args.quick else 300_000)
    args.feed_s = args.feed_s or (30.0 if args.quick else 90.0)
    t0 = time.monotonic()

    def say(m: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} +{time.monotonic() - t0:4.0f}s {m}", flush=True)

    demo = _demo()
    say(f"{DEMO}: trigger {demo.trigger_interval_ms} ms, {_batch_cap(demo)} records a batch, "
        f"{demo.state_partitions} state partitions; cores {cores} on a {os.cpu_count()}-core machine"
        + (" (more cores than the machine has are oversubscribed: *)" if max(cores) > (os.cpu_count() or 1) else ""))
    runs: list[dict] = []
    rate = args.rate
    with scratch_run(SCRATCH_DB, "streamops-bench-kafka-", teardown=kafka_broker.down):
        broker, _ = kafka_broker.up()
        say(f"broker up on {broker.bootstrap}")
        for n in cores:
            for source in SOURCES:
                say(f"{source}, {n} core(s): run")
                try:
                    runs.append(one_run(source, n, args, rate, demo, say))
                    rate = rate or runs[-1].get("rate")
                except Exception as e:  # noqa: BLE001 - a failed run is reported, the others still count
                    say(f"{source}, {n} core(s): {type(e).__name__}: {e}")
                    runs.append({"source": source, "cores": n, "oversubscribed": n > (os.cpu_count() or 1),
                                 "error": f"{type(e).__name__}: {e}"})
    result = {"when": time.strftime("%Y-%m-%d %H:%M:%S"), "cpus": os.cpu_count(), "args": vars(args),
              "demo_stage": DEMO, "rate": rate, "took_s": round(time.monotonic() - t0), "runs": runs}
    out = write_result("kafka.json", result, args)
    print(table(runs, rate))
    if any(r["oversubscribed"] for r in runs):
        print(f"* more cores than this machine's {os.cpu_count()}")
    print(f"took {result['took_s']}s; results in {out}")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
