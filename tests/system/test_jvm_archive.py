"""The class archive (streamops.jvm_archive): built once per venv and JDK, and mapped by the
drivers' and the executors' JVMs; a JVM whose classpath does not match it runs without it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from streamops import jvm_archive

pytestmark = pytest.mark.skipif(shutil.which("java") is None, reason="needs a JDK")


def _maps(archive: Path, classpath: str) -> subprocess.CompletedProcess:
    """Start a JVM with `classpath` that must map `archive` (-Xshare:on fails when it cannot)."""
    return subprocess.run(["java", f"-XX:SharedArchiveFile={archive}", "-Xshare:on", "-cp", classpath,
                           "-Xlog:cds=off", "-version"], capture_output=True, text=True, timeout=60)


def test_the_archive_is_built_once_and_named_for_its_jdk_and_spark(monkeypatch):
    path = jvm_archive.build()  # `make venv` built it already: this only finds it
    assert path is not None and path.exists() and path.stat().st_size > 50 << 20
    assert path == jvm_archive.archive_path() and path.parent.is_relative_to(Path(jvm_archive.sys.prefix))
    assert jvm_archive.java_option() == f"-XX:SharedArchiveFile={path}"
    monkeypatch.setenv(jvm_archive.ENV, "off")
    assert jvm_archive.java_option() == ""


@pytest.mark.db
def test_a_driver_maps_it_and_a_conf_dir_on_the_classpath_would_not(spark, tmp_path):
    """The session's own JVM was started with the archive, and a JVM with its classpath maps it;
    a non-empty SPARK_CONF_DIR in front of that classpath cannot (why the embedded cluster hands
    its secret over with --properties-file)."""
    archive = jvm_archive.build()
    jvm = spark.sparkContext._jvm
    args = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    assert f"-XX:SharedArchiveFile={archive}" in args
    classpath = jvm.java.lang.System.getProperty("java.class.path")
    ok = _maps(archive, classpath)
    assert ok.returncode == 0, ok.stderr[-2000:]
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text("spark.authenticate true\n")
    refused = _maps(archive, f"{conf}:{classpath.split(':', 1)[1]}")
    assert refused.returncode != 0


@pytest.mark.db
def test_executors_of_the_embedded_cluster_map_it(spark_standalone, tmp_path):
    """An executor of a stage driver on the embedded cluster starts with the archive, on a
    classpath that maps it (the workers read the secret with --properties-file)."""
    import os

    import psutil

    from streamops import spark_cluster

    if os.environ.get(spark_cluster.ENV_MASTER):
        pytest.skip("an external master is in use")
    archive = jvm_archive.build()
    code = ("import os, sys; sys.path[:0] = ['plugins', '.']\n"
            "from spark_apps.stage import build_session\n"
            f"s = build_session('archive-probe', 1, 1, master={spark_standalone!r})\n"
            "print('COUNT', s.range(10).count(), s.sparkContext.applicationId); sys.stdout.flush(); input()\n")
    env = {**os.environ, **spark_cluster.client_env()}
    proc = subprocess.Popen([jvm_archive.sys.executable, "-c", code], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, cwd=str(Path(__file__).parents[2]))
    try:
        _, count, app_id = proc.stdout.readline().split()
        assert count == "10"
        executors = [p.info["cmdline"] for p in psutil.process_iter(["cmdline"])
                     if app_id in (p.info["cmdline"] or []) and "--executor-id" in p.info["cmdline"]]
        assert executors, f"no executor JVM of {app_id} found"
        argv = executors[0]
        assert f"-XX:SharedArchiveFile={archive}" in argv
        ok = _maps(archive, argv[argv.index("-cp") + 1])
        assert ok.returncode == 0, ok.stderr[-2000:]
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
