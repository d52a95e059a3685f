"""Build a stage's Spark session and start its queries. Used by `run_stage.py` and by tests.

A stage runs two queries on the same replayable source: the main one (parse → the team's job →
idempotent sink) and a side one that writes malformed records to `quarantine`. The main
query also counts malformed records (`observe`) so that its metrics row carries them.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from spark_apps.job_runtime import build_output, ensure_table, shaped, sink_shape, user_sink
from spark_apps.parse import burn_cpu, parse_records, read_kafka, read_lines, write_sample
from spark_apps.sink_faults import SINK_FAULTS
from streamops import jvm_archive
from streamops.agent.metrics import SinkStats, StageContext
from streamops.agent.sinks import ParquetSink, PostgresUpsertSink, QuarantineSink
from streamops.checkpoint_layout import QUERIES, ROCKSDB_PROVIDER, query_checkpoint
from streamops.registry import Stage, resolve_path
from streamops.sources import KafkaSource
from streamops.spark_cluster import UI_PORT_ENV

DRIVER_HOST_ENV = "STREAMOPS_DRIVER_HOST"
# Extra JVM options for every driver, executor and offline job (`spark.*.extraJavaOptions`).
# The tests set a cheaper JIT (tests/conftest.py); unset, the JVMs run with Java's defaults.
JAVA_OPTIONS_ENV = "STREAMOPS_SPARK_JAVA_OPTIONS"


def ui_port() -> int | None:
    """The Spark UI port this driver's launcher chose (UI_PORT_ENV), or None: the UI off. The
    launcher also sets SPARK_LOCAL_IP and SPARK_PUBLIC_DNS to 127.0.0.1: Spark binds its UI to
    SPARK_LOCAL_IP (else to every address) and names it by SPARK_PUBLIC_DNS in sc.uiWebUrl."""
    value = os.environ.get(UI_PORT_ENV, "").strip()
    return int(value) if value else None


def ui_conf(port: int | None) -> dict[str, str]:
    """The driver's Spark UI: off, or on `port` (Spark tries the next ports if it was taken)."""
    if port is None:
        return {"spark.ui.enabled": "false"}
    return {
        "spark.ui.enabled": "true",
        "spark.ui.port": str(port),
        # A stage's queries and batches belong to the platform: no kill buttons.
        "spark.ui.killEnabled": "false",
        # The Structured Streaming tab's own store (only with the UI): the newest progress updates
        # of the stage's few queries, not those of every query a long run restarted.
        "spark.sql.streaming.ui.retainedProgressUpdates": "100",
        "spark.sql.streaming.ui.retainedQueries": "10",
    }


# A driver runs for days and Spark's status store (what the UI shows; it runs with the UI off too)
# lives in its heap: it keeps only the newest of each, not Spark's 1000 jobs, stages and SQL
# executions and 100 000 tasks a stage.
STATUS_RETENTION = {
    "spark.ui.retainedJobs": "100",
    "spark.ui.retainedStages": "100",
    "spark.ui.retainedTasks": "1000",
    "spark.ui.retainedDeadExecutors": "20",
    "spark.sql.ui.retainedExecutions": "100",
}


def session_conf(cores: int, state_partitions: int, master: str | None = None, executor_cores: int = 1,
                 executor_memory: str = "1g", max_cores: int | None = None,
                 initial_executors: int | None = None, ui_port: int | None = None) -> dict[str, str]:
    """The driver's Spark conf: `local[cores]`, or on a standalone cluster (`master`) up to
    `max_cores` in executors of `executor_cores`, the count set by `executors.scale_to`; it
    registers with `initial_executors` (default: the `cores` admitted; a warm spare's 0). Its
    Spark UI is on `ui_port` (ui_conf), or off."""
    conf = {
        "spark.master": f"local[{cores}]",
        # Offline state repartition (spark._streamingCheckpointManager) needs RocksDB state.
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
        "spark.sql.shuffle.partitions": str(state_partitions),
        "spark.sql.session.timeZone": "UTC",
        **ui_conf(ui_port),
        **STATUS_RETENTION,
        # No console progress bars ([Stage N:==>  (n + m) / k]) in the driver logs.
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.adaptive.enabled": "false",  # not supported in streaming; silences a warning per query
        "spark.driver.memory": "1g",
        **jvm_conf(),
    }
    if master:
        conf.update(cluster_conf(master, cores, executor_cores, executor_memory, max_cores, initial_executors))
    return conf


def jvm_conf() -> dict[str, str]:
    """The jars and JVM options of every session's driver and executors."""
    conf = {}
    # Spark's Kafka connector, local files (never fetched at run time), on every session: a warm
    # spare does not know its stage's source yet, and ~10 MB of jars a Kafka-less run never opens.
    jars = kafka_jars()
    if jars:
        conf["spark.jars"] = jars
    # Spark's classes mapped from the venv's class archive (streamops.jvm_archive): a cold driver
    # or executor JVM then starts faster.
    java_options = " ".join(filter(None, [jvm_archive.java_option(), os.environ.get(JAVA_OPTIONS_ENV, "").strip()]))
    if java_options:
        conf["spark.driver.extraJavaOptions"] = java_options
        conf["spark.executor.extraJavaOptions"] = java_options
    return conf


def cluster_conf(master: str, cores: int, executor_cores: int, executor_memory: str, max_cores: int | None,
                 initial_executors: int | None) -> dict[str, str]:
    """On a standalone cluster: where its executors reach the driver, and how many they are."""
    from streamops.paths import REPO_ROOT

    driver_host = os.environ.get(DRIVER_HOST_ENV, "127.0.0.1")
    return {
        "spark.master": master,
        # Executors connect back to the driver: loopback on one machine; in containers the
        # driver's own hostname (docker/compose.yaml sets it).
        "spark.driver.host": driver_host,
        "spark.driver.bindAddress": "127.0.0.1" if driver_host == "127.0.0.1" else "0.0.0.0",
        # spark.cores.max caps the live scale-outs. Without dynamic allocation the master
        # would grant all of it at registration, more than the ledger admitted (issue 26 item
        # 8). With it on, the application registers with an executor limit of 0 and the
        # allocation manager's first request is `initialExecutors`, the admitted count;
        # build_session then stops that manager, so the platform's policies, not task
        # backlogs, decide the count from there (executors.scale_to).
        "spark.cores.max": str(max_cores or cores),
        "spark.executor.cores": str(executor_cores),
        "spark.executor.memory": executor_memory,
        "spark.dynamicAllocation.enabled": "true",
        "spark.dynamicAllocation.shuffleTracking.enabled": "true",  # no external shuffle service
        "spark.dynamicAllocation.minExecutors": "0",
        "spark.dynamicAllocation.initialExecutors": str(
            max(1, cores // executor_cores) if initial_executors is None else initial_executors),
        "spark.dynamicAllocation.maxExecutors": str(max(1, (max_cores or cores) // executor_cores)),
        # Executors start Python workers in their own work directory: this venv's interpreter,
        # with streamops and spark_apps importable.
        "spark.executorEnv.PYSPARK_PYTHON": sys.executable,
        "spark.executorEnv.PYTHONPATH": os.pathsep.join([str(REPO_ROOT / "plugins"), str(REPO_ROOT)]),
    }


def kafka_jars() -> str | None:
    """`spark.jars` for the Kafka source, or None when `make venv` fetched no connector."""
    from streamops import kafka_broker

    try:
        return kafka_broker.spark_jars()
    except kafka_broker.KafkaBrokerError:
        return None


def build_session(app_name: str, cores: int, state_partitions: int, extra_conf: dict[str, str] | None = None,
                  **cluster) -> SparkSession:
    """A session for a stage (or a job): `cluster` is session_conf's master, executor and UI settings;
    `extra_conf` is added on top (the redundancy manager's speculation settings)."""
    # Python workers must import streamops: this venv's interpreter, not `python3` on PATH.
    # In-process PySpark reads only the environment for this (the conf is for spark-submit).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    for k, v in {**session_conf(cores, state_partitions, **cluster), **(extra_conf or {})}.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    stop_allocation_manager(spark)
    return spark


def stop_allocation_manager(spark: SparkSession) -> bool:
    """Stop Spark's dynamic allocation manager once it has asked for the initial executors
    (session_conf): from then on only `executors.scale_to` sets the count. Its schedule does
    nothing before the first job, so stopping it here changes no target. True if one ran."""
    manager = spark.sparkContext._jsc.sc().executorAllocationManager()
    if manager.isEmpty():
        return False
    manager.get().stop()
    return True


def _discard(df, batch_id: int) -> None:
    # The sink's path without its writes: Python workers fork for foreachPartition and import
    # the database driver, as the real sink's do.
    df.foreachPartition(_consume)


def _consume(rows) -> None:
    importlib.import_module("psycopg2")  # the sink's import, once per Python worker

    for _ in rows:
        pass


def warm_up_sample(stage: Stage, sample_lines: int = 400) -> list[str]:
    """The newest lines of the stage's input, or, before any input has come, a synthetic sample of
    its declared schema (the generator's): a stage started ahead of its producers warms up too."""
    import random
    from datetime import datetime, timedelta

    from streamops.generator import sample_lines as synthetic

    source = stage.source
    files = sorted((p for p in resolve_path(source.path).glob("*") if p.is_file() and not p.name.startswith(".")),
                   key=lambda p: p.stat().st_mtime)[-3:] \
        if source.kind == "files" and stage.record_schema.format != "parquet" else []
    lines = [ln for p in files for ln in p.read_text(errors="replace").splitlines()][:sample_lines]
    if lines:
        return lines
    now = datetime.now(UTC)
    return synthetic(stage.record_schema, sample_lines, rng=random.Random(0), ts_from=now - timedelta(minutes=1),
                     ts_to=now)


def warm_up(spark: SparkSession, stage: Stage, cores: int, partitions: int, sample_lines: int = 400,
            rounds: int = 1) -> tuple[int, list[float]]:
    """Run the stage's own query `rounds` times over a sample of its input (`warm_up_sample`) into
    no sink, each with a throwaway checkpoint: class loading, code generation (cached by code), the
    state store library and the Python workers are then warm for the real first batch, on every
    executor the sample's tasks reach (a file per core); later rounds warm the JIT's per-batch
    paths (planning, the state store's commit, the checkpoint's writes), which a round runs once.
    Returns the lines used and each round's seconds."""
    import shutil
    import tempfile

    lines = warm_up_sample(stage, sample_lines)
    tmp = Path(tempfile.mkdtemp(prefix="streamops-warmup-"))
    took: list[float] = []
    try:
        write_sample(spark, stage.record_schema, lines, tmp / "in", files=cores)
        ctx = StageContext(stage_id="warm-up", deployment_id=None, cores=cores, state_partitions=partitions,
                           trigger_interval_ms=stage.trigger_interval_ms)
        for i in range(rounds):
            started = time.monotonic()
            # A sample of files, whatever the source: the parse, the job and the state store warm up
            # (a Kafka stage's connector loads with its first batch).
            q = start_query("main", spark, stage, ctx, tmp / "in", tmp / f"ckpt-{i}", available_now=True,
                            discard=True)
            q.awaitTermination(120)
            took.append(time.monotonic() - started)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return len(lines), took


QUARANTINE_HOLD_TRIGGERS = 1


def _held_first(sink, event: threading.Event, trigger_s: float, abort: threading.Event | None):
    """The sink, whose first call waits for `event` (at most QUARANTINE_HOLD_TRIGGERS trigger
    intervals, and not past a stop request): the batch's plan is made, its work and writes come
    after."""
    held = {"done": False}

    def hold(df, batch_id: int) -> None:
        if not held["done"]:
            held["done"] = True
            deadline = time.monotonic() + QUARANTINE_HOLD_TRIGGERS * trigger_s
            while not event.wait(0.2) and not (abort is not None and abort.is_set()) \
                    and time.monotonic() < deadline:
                pass
        sink(df, batch_id)

    return hold


def _paused(sink, pause: Callable[[], float]):
    def paused(df, batch_id: int) -> None:
        pause()
        sink(df, batch_id)

    return paused


QUARANTINE_TRIGGER_FACTOR = 5


def files_per_trigger(stage: Stage, which: str) -> int:
    """The quarantine query triggers QUARANTINE_TRIGGER_FACTOR times less often than the main
    one, so it takes that many times the files (a Kafka source: records) per batch: the same
    input per second, or it falls further behind the main query with every batch of a sustained
    load (issue 31: more than 10 minutes behind). Its batches stay cheap: a filter, and only the
    bad lines written."""
    source = stage.source
    n = source.max_offsets_per_trigger if source.kind == "kafka" else source.max_files_per_trigger
    return n * QUARANTINE_TRIGGER_FACTOR if which == "quarantine" else n


def fails_alone(spark: SparkSession, stage: Stage, ctx: StageContext, files: tuple[str, ...],
                fault: str | None = None) -> str | None:
    """A dry run of the main query's output for these input files alone (a batch job over the
    same parse, job and sink write, taken back before it reaches the sink): the error
    signature it raised, or None. The poison book bisects a failing batch with it. Only the
    PostgreSQL sink has a dry run; other sinks answer None (the whole batch is quarantined)."""
    from streamops.agent.poison import error_signature

    if stage.sink.kind != "postgres" or stage.source.kind != "files":
        return None
    lines = read_lines(spark, stage.record_schema, list(files), streaming=False)
    records = parse_records(lines, stage.record_schema, stage.max_record_bytes, None)
    valid = burn_cpu(records.where(F.col("reason").isNull()), int(stage.params.get("cpu_cost", 0)))
    sink = PostgresUpsertSink(ctx.stage_id, ctx.deployment_id).dry_run
    if fault in SINK_FAULTS:
        sink = SINK_FAULTS[fault](sink)
    try:
        output = build_output(stage, valid, streaming=False)
        sink(sink_shape(stage, output)(output, PostgresUpsertSink.DRY_RUN_BATCH), PostgresUpsertSink.DRY_RUN_BATCH)
    except Exception as e:  # noqa: BLE001 - whatever the batch raised is the answer
        return error_signature(str(e))
    return None


def start_stage_queries(
    spark: SparkSession,
    stage: Stage,
    ctx: StageContext,
    input_dir: Path | None,
    checkpoint: Path,
    *,
    exclude_files: dict[str, list[str]] | None = None,
    **options,
) -> list[StreamingQuery]:
    """Start [main, quarantine]; `options` are `start_query`'s. `exclude_files` (query → files)
    leaves out the files of batches quarantined whole."""
    return [start_query(q, spark, stage, ctx, input_dir, checkpoint, exclude_files=(exclude_files or {}).get(q),
                        **options)
            for q in QUERIES]


def start_query(
    which: str,
    spark: SparkSession,
    stage: Stage,
    ctx: StageContext,
    input_dir: Path | None,
    checkpoint: Path,
    *,
    on_commit: Callable[[SinkStats], None] | None = None,
    available_now: bool = False,
    abort: threading.Event | None = None,
    fault: str | None = None,
    once: bool = False,
    exclude_files: list[str] | None = None,
    pause: Callable[[], float] | None = None,
    discard: bool = False,
    hold_until: threading.Event | None = None,
) -> StreamingQuery:
    """Start one of the stage's queries: `main` (parse → the job → idempotent sink) or
    `quarantine` (the lines that are not records → `quarantine`), over the files of `input_dir`,
    or (None) the stage's Kafka topic. `available_now` drains the
    input and stops (tests). `once` runs a single batch and stops: after an interrupted stop,
    that batch is the pending one (offsets/N without commits/N). `abort` (the agent's stop
    request) cuts short the sinks' retries while the database is away. `hold_until` (the
    quarantine query): its first batch waits for that event (the main query's first commit), at
    most QUARANTINE_HOLD_TRIGGERS of its own trigger intervals, so that the two first batches of
    a run do not share a cold executor's cores."""
    spark.conf.set("spark.sql.shuffle.partitions", str(ctx.state_partitions))
    records = _read_records(which, spark, stage, input_dir, exclude_files)
    if which == "quarantine":
        return _start_quarantine(records, ctx, query_checkpoint(which, checkpoint), abort=abort,
                                 hold_until=hold_until, once=once, available_now=available_now)
    counted = records.observe(
        "input_quality",
        F.count(F.lit(1)).alias("rows"),
        F.sum(F.when(F.col("reason").isNotNull(), 1).otherwise(0)).alias("malformed"),
    )
    valid = burn_cpu(counted.where(F.col("reason").isNull()), int(stage.params.get("cpu_cost", 0)))
    output = build_output(stage, valid)
    sink = _main_sink(stage, output, ctx, on_commit=on_commit, abort=abort, fault=fault, discard=discard)
    if pause is not None:  # the fault injector's slow batches
        sink = _paused(sink, pause)
    return _triggered(
        output.writeStream.queryName(ctx.stage_id)
        .outputMode(stage.output_mode)
        .foreachBatch(sink)
        .option("checkpointLocation", str(query_checkpoint(which, checkpoint))),
        ctx.trigger_interval_ms, once=once, available_now=available_now,
    ).start()


def _triggered(writer, interval_ms: int, *, once: bool, available_now: bool):
    """The writer with its trigger: one batch (`once`), the input there now (`available_now`), or
    a batch every `interval_ms`."""
    if once:
        return writer.trigger(once=True)
    if available_now:
        return writer.trigger(availableNow=True)
    return writer.trigger(processingTime=f"{interval_ms} milliseconds")


def _start_quarantine(records, ctx: StageContext, checkpoint: Path, *, abort: threading.Event | None,
                      hold_until: threading.Event | None, once: bool, available_now: bool) -> StreamingQuery:
    """The side query: the lines that are not records, with why, into `quarantine`."""
    # The side query runs less often: its lines wait (nothing downstream waits for them), and
    # on one core its batches would otherwise take turns with every batch of the main query.
    side = ctx.trigger_interval_ms * QUARANTINE_TRIGGER_FACTOR
    quarantine = QuarantineSink(ctx.stage_id, ctx.deployment_id, abort)
    return _triggered(
        records.where(F.col("reason").isNotNull())
        .select("source_file", "raw", "reason_kind", "reason")
        .writeStream.queryName(f"{ctx.stage_id}#quarantine")
        .foreachBatch(quarantine if hold_until is None else
                      _held_first(quarantine, hold_until, side / 1000, abort))
        .option("checkpointLocation", str(checkpoint)),
        side, once=once, available_now=available_now,
    ).start()


def _read_records(which: str, spark: SparkSession, stage: Stage, input_dir: Path | None,
                  exclude_files: list[str] | None):
    """The query's input (the files of `input_dir`, or the stage's Kafka topic), parsed: a record
    or the reason it is not one."""
    if input_dir is None:  # the stage's Kafka topic
        assert isinstance(stage.source, KafkaSource), "only a Kafka stage runs without an input directory"
        lines = read_kafka(spark, stage.source, files_per_trigger(stage, which))
    else:
        Path(input_dir).mkdir(parents=True, exist_ok=True)
        lines = read_lines(spark, stage.record_schema, str(input_dir), streaming=True,
                           max_files=files_per_trigger(stage, which))
    return parse_records(lines, stage.record_schema, stage.max_record_bytes, exclude_files)


def _main_sink(stage: Stage, output, ctx: StageContext, *, on_commit: Callable[[SinkStats], None] | None,
               abort: threading.Event | None, fault: str | None, discard: bool):
    """The main query's foreachBatch sink, by the stage's sink kind; nothing written for a warm-up."""
    # Faults wrap the sink itself: on the upsert sink they see its key/value rows.
    faulty = SINK_FAULTS.get(fault or "", lambda s: s)
    if discard:  # a warm-up: the same plan, nothing written
        return _discard
    if stage.sink.kind == "parquet":
        return faulty(ParquetSink(str(resolve_path(stage.sink.path)), ctx.stage_id, ctx.deployment_id, on_commit,
                                  abort))
    if stage.sink.kind == "foreach_batch":
        return faulty(user_sink(stage, output, ctx.stage_id, ctx.deployment_id, on_commit=on_commit, abort=abort))
    shape = sink_shape(stage, output)
    ensure_table(stage, output, ctx.stage_id)
    return shaped(faulty(PostgresUpsertSink(ctx.stage_id, ctx.deployment_id, on_commit, abort)), shape)
