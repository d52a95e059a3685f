"""What a new deployment's size is chosen from (plan/start_size): the stage's last run (its size,
how long ago it ended, its metrics: the input rate and DS2's rows/s per core), the backlog
waiting now (unread files, or the Kafka records past the checkpoint's offsets), the pool's free
cores and the registry's declared rates (source.expected_rows_s, cores.per_core_rows_s). Best
effort: what cannot be read is not known, and a start with nothing known starts at
`cores.initial`, as before."""

from __future__ import annotations

import logging
import os
from datetime import datetime
from pathlib import Path

from streamops import checkpoint_layout, registry
from streamops.analyze.stats import useful_cores
from streamops.plan.start_size import StartInputs, StartSize, start_size
from streamops.registry import Pool, Stage
from streamops.sources import FileSource, KafkaSource
from streamops.store import db, ledger

log = logging.getLogger("streamops.execute")

SAMPLE_FILES = 20  # files whose lines are counted to size a first start's file backlog in rows
SAMPLE_BYTES = 64 * 1024 * 1024  # and at most this much read in all


def choose(sid: str, st: Stage, pool_name: str, pool: Pool, ckpt: str, role: str = "primary") -> StartSize:
    """The cores a new deployment of `sid` starts at, and why."""
    opts = st.policy.params
    return start_size(gather(sid, st, pool_name, pool, ckpt, role, opts.window_s), opts.catch_up_s,
                      opts.target_utilization)


def gather(sid: str, st: Stage, pool_name: str, pool: Pool, ckpt: str, role: str = "primary",
           window_s: float = 120.0) -> StartInputs:
    last = ledger.latest_run(sid, role=role)
    hist = db.row("start_size_history", stage_id=sid, window_s=window_s)
    span = hist.span_s if hist is not None and hist.batches >= 2 else 0.0
    input_rate = max(0.0, hist.arrived_rows) / span if hist is not None and span > 0 else None
    measured = hist.input_rows / hist.busy_core_s if hist is not None and hist.busy_core_s > 0 and hist.input_rows > 0 \
        else None
    declared = st.cores.per_core_rows_s
    free, _ = ledger.pool_room(pool_name, pool.cores)
    live = ledger.latest_run(sid, live=True, role=role)
    if live is not None and live.pool == pool_name:
        free += live.cores  # a dead run this start replaces gives its cores back at admission
    backlog, partitions = source_now(st, Path(ckpt), hist.rows_per_file if hist is not None else None)
    return StartInputs(
        initial=st.cores.initial, max_cores=st.cores.max,
        last_cores=last.cores if last is not None else None,
        last_age_s=_age_s(last.stopped_at) if last is not None else 0.0,
        input_rate=input_rate, input_rate_age_s=hist.age_s if hist is not None else 0.0,
        declared_input_rate=st.source.expected_rows_s, backlog_rows=backlog,
        rate_per_core=declared or measured, rate_per_core_declared=declared is not None,
        free_cores=free, reserved_cores=db.value("start_size_sibling_floors", pool=pool_name, stage_id=sid) or 0,
        useful_cores=useful_cores(partitions, getattr(st.source, "min_partitions", None)),
        step=pool.executor_cores if pool.kind == "standalone" else 1)


def _age_s(stopped_at: datetime | None) -> float:
    # stopped_at is the database's clock: so is the age's other end (docs/ha.md, "Clocks")
    return 0.0 if stopped_at is None else max(0.0, (db.now() - stopped_at).total_seconds())


def source_now(st: Stage, ckpt: Path, rows_per_file: float | None = None) -> tuple[float | None, int | None]:
    """Rows waiting for the stage now, and a Kafka topic's partitions; None when not known."""
    try:
        if isinstance(st.source, FileSource):
            return _file_backlog(registry.resolve_path(st.source.path), ckpt, st.source.format, rows_per_file), None
        if isinstance(st.source, KafkaSource):
            return _kafka_backlog(st.source, ckpt)
    except Exception as e:  # noqa: BLE001 - best effort: a backlog not known sizes nothing
        log.warning("action=start-size could not measure the backlog of %s: %s", ckpt, str(e).splitlines()[0])
    return None, None


def _file_backlog(input_dir: Path, ckpt: Path, fmt: str, rows_per_file: float | None) -> float | None:
    """Unread files × rows per file: the last run's figure, else lines counted in a sample."""
    files = checkpoint_layout.FileSourceBacklog(input_dir, ckpt).measure().files or 0
    if files == 0:
        return 0.0
    per_file = rows_per_file or (None if fmt == "parquet" else _lines_per_file(input_dir))
    return None if per_file is None else files * per_file


def _lines_per_file(input_dir: Path) -> float | None:
    """Mean lines in a sample of the directory's files (read or not: they come from one writer)."""
    names = sorted(e.name for e in os.scandir(input_dir) if e.is_file() and not e.name.startswith((".", "_")))
    lines = read = counted = 0
    for name in names[:SAMPLE_FILES]:
        with open(input_dir / name, "rb") as f:  # the sample only: an input file may be gigabytes
            data = f.read(SAMPLE_BYTES - read)
        read += len(data)
        lines += data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
        counted += 1
        if read >= SAMPLE_BYTES:
            break
    return lines / counted if counted else None


def _kafka_backlog(source: KafkaSource, ckpt: Path) -> tuple[float, int]:
    """Records in the topic past the checkpoint's newest planned offsets (a first start from
    `earliest`: every record the topic holds; from `latest`: none), and the topic's partitions."""
    held = _checkpoint_offsets(ckpt, source.topic)
    from confluent_kafka import Consumer, TopicPartition

    from streamops import kafka_broker

    c = Consumer({**kafka_broker.client_settings(source.bootstrap_servers).librdkafka(),
                  "group.id": "streamops-start-size", "enable.auto.commit": False, "log_level": 0})
    try:
        parts = c.list_topics(source.topic, timeout=5).topics[source.topic].partitions
        total = 0
        for p in parts:
            low, high = c.get_watermark_offsets(TopicPartition(source.topic, p), timeout=5)
            start = high if held is None and source.starting_offsets == "latest" else (held or {}).get(str(p), low)
            total += max(0, high - max(low, start))
        return float(total), len(parts)
    finally:
        c.close()


def _checkpoint_offsets(ckpt: Path, topic: str) -> dict[str, int] | None:
    """The Kafka offsets the checkpoint's newest planned batch reads up to, or None (no batch yet)."""
    n = checkpoint_layout.last_planned_batch(ckpt)
    if n is None:
        return None
    path = Path(ckpt) / "offsets" / str(n)
    lines = checkpoint_layout.read_entry(path)
    if len(lines) < 2 or lines[1] == "-":
        return None
    return {str(p): int(o) for p, o in checkpoint_layout.parse(path, lines[1]).get(topic, {}).items()}
