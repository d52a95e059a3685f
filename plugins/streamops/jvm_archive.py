"""A class-data-sharing archive of Spark's classes for the drivers' and executors' JVMs (the JDK's
CDS: `-XX:SharedArchiveFile`).

A cold Spark JVM spends seconds opening the jars and parsing and verifying some ten thousand
classes; with the archive it maps them already parsed. One archive serves both roles: it is dumped
at exit by a local-mode session (driver and executor code in one JVM) that ran a stateful
streaming query like a stage's: a file source, a Python UDF, RocksDB state, a Python sink.

The archive belongs to this venv's jars and to one JDK, so it lives in the venv under a key of
both; `make venv` builds it (`streamops spark archive`). A JVM whose classpath does not match it
runs without it (-Xshare:auto, no error): a non-empty directory on the classpath, such as a
SPARK_CONF_DIR holding the cluster's secret, is one such mismatch, so the embedded cluster hands
its secret over with `--properties-file` instead (spark_cluster). `STREAMOPS_JVM_ARCHIVE=off`
turns it off. Measured in docs/reconfiguration.md ("Cold starts").
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from streamops.checkpoint_layout import ROCKSDB_PROVIDER

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

ENV = "STREAMOPS_JVM_ARCHIVE"


def _java_home() -> Path | None:
    if os.environ.get("JAVA_HOME"):
        return Path(os.environ["JAVA_HOME"])
    java = shutil.which("java")
    return Path(os.path.realpath(java)).parent.parent if java else None


def archive_path() -> Path | None:
    """This venv's archive for this JDK (None without a JDK). The key covers the JDK's release
    file and pyspark's version: another JDK or another Spark needs its own archive."""
    import pyspark

    home = _java_home()
    if home is None or not (home / "release").exists():
        return None
    key = hashlib.sha256((home / "release").read_bytes() + pyspark.__version__.encode()).hexdigest()[:12]
    return Path(sys.prefix) / "share" / "streamops" / f"spark-classes-{key}.jsa"


def enabled() -> bool:
    return os.environ.get(ENV, "on").lower() not in ("off", "0", "false", "no")


def java_option() -> str:
    """The option for `spark.{driver,executor}.extraJavaOptions`: the archive when it exists."""
    path = archive_path() if enabled() else None
    return f"-XX:SharedArchiveFile={path}" if path is not None and path.exists() else ""


def build(force: bool = False, progress: Callable[[str], None] = lambda _: None, timeout_s: float = 300) -> Path | None:
    """Dump the archive once (about 15 s), unless it exists. A lock file keeps two concurrent
    builds from writing it twice; the dump goes to a temporary name and is renamed into place,
    so a JVM never maps half an archive. Returns its path, None without a JDK."""
    path = archive_path()
    if path is None:
        progress("no JDK found (JAVA_HOME, java on PATH): no class archive")
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.exists() and not force:
            return path
        started = time.monotonic()
        progress(f"dumping Spark's classes into {path} (once per venv and JDK) …")
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        env = {k: v for k, v in os.environ.items() if k not in ("SPARK_CONF_DIR", "PYSPARK_SUBMIT_ARGS")}
        try:
            out = subprocess.run([sys.executable, "-m", "streamops.jvm_archive", str(tmp)], env=env,
                                 capture_output=True, text=True, timeout=timeout_s)
            if out.returncode != 0 or not tmp.exists():
                tail = "\n".join((out.stderr or out.stdout).splitlines()[-15:])
                raise RuntimeError(f"the class archive's training run failed (exit {out.returncode}):\n{tail}")
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        progress(f"class archive ready in {time.monotonic() - started:.0f}s ({path.stat().st_size >> 20} MB)")
        return path


def _train(dump_to: Path) -> None:
    """The training run (in its own process: the JVM dumps its classes when it exits)."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    work = Path(tempfile.mkdtemp(prefix="streamops-jvm-archive-"))
    try:
        src = work / "in"
        src.mkdir()
        (src / "0.json").write_text("".join(f'{{"k": "key{i % 50}", "v": {i}}}\n' for i in range(2000)))
        spark = (SparkSession.builder.master("local[2]").appName("streamops-jvm-archive")
                 .config("spark.driver.extraJavaOptions", f"-XX:ArchiveClassesAtExit={dump_to}")
                 .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
                 .config("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
                 .getOrCreate())
        assert spark.sparkContext._gateway is not None  # a started session has one
        gateway = spark.sparkContext._gateway.proc

        @F.udf("string")
        def key_of(line: str) -> str:
            import json

            return str(json.loads(line)["k"])

        def drain(rows: Iterable[Any]) -> None:  # reads every row, keeps none
            for _ in rows:
                pass

        def sink(batch: DataFrame, batch_id: int) -> None:
            batch.rdd.foreachPartition(drain)

        counts = (spark.readStream.format("text").load(str(src)).select(key_of("value").alias("k"))
                  .groupBy("k").count())
        q = (counts.writeStream.outputMode("update").foreachBatch(sink)
             .option("checkpointLocation", str(work / "ckpt")).trigger(availableNow=True).start())
        q.awaitTermination()
        spark.stop()
        # The JVM exits when its stdin closes, and dumps the archive on the way out.
        gateway.stdin.close()
        gateway.wait(timeout=240)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    _train(Path(sys.argv[1]))
