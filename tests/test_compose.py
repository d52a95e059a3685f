"""docker/compose.yaml cannot run here (no Docker engine): check instead that everything it
names exists in this repo and this stack: files, Airflow commands, Spark classes, variables."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from streamops.paths import REPO_ROOT

DOCKER = REPO_ROOT / "docker"
COMPOSE = yaml.safe_load((DOCKER / "compose.yaml").read_text())
SERVICES = COMPOSE["services"]
SOURCE = "\n".join(p.read_text() for root in ("plugins", "spark_apps") for p in (REPO_ROOT / root).rglob("*.py"))


def test_the_production_shape_is_all_there():
    assert {"postgres", "airflow-api-server", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer",
            "spark-master", "spark-worker-1", "spark-worker-2"} <= set(SERVICES)


@pytest.mark.parametrize("name", sorted(SERVICES))
def test_builds_and_mounts_name_files_that_exist(name):
    svc = SERVICES[name]
    if "build" in svc:
        context = (DOCKER / svc["build"]["context"]).resolve()
        assert context == REPO_ROOT and (context / svc["build"]["dockerfile"]).is_file()
    for volume in svc.get("volumes", []):
        host = volume.split(":")[0]
        if host.startswith("."):
            assert (DOCKER / host).exists(), f"{name} mounts {host}, which is not in docker/"
        else:
            assert host in COMPOSE["volumes"], f"{name} uses an undeclared volume {host}"


def test_the_image_holds_what_the_services_run():
    dockerfile = (DOCKER / "Dockerfile").read_text()
    for path in ("plugins", "spark_apps", "sql", "dags", "apps.yaml"):
        assert f"COPY {path} " in dockerfile and (REPO_ROOT / path).exists(), path
    assert "FROM python:3.11" in dockerfile, "spark-class is addressed under python3.11's site-packages"


def test_spark_services_start_the_classes_the_embedded_cluster_uses():
    from streamops import spark_cluster

    local = spark_cluster.spark_home() / "bin" / "spark-class"
    assert local.is_file()
    cluster_code = Path(spark_cluster.__file__).read_text()
    for name in ("spark-master", "spark-worker-1"):
        svc = SERVICES[name]
        assert svc["entrypoint"][0].endswith("site-packages/pyspark/bin/spark-class")
        assert svc["command"][0] in cluster_code, f"{svc['command'][0]} is not what `streamops spark up` starts"
    assert SERVICES["spark-worker-1"]["command"][1] == COMPOSE["x-streamops-env"]["STREAMOPS_SPARK_MASTER"]


def test_airflow_services_run_real_airflow_commands():
    from airflow.cli.cli_config import core_commands

    known = {c.name for c in core_commands}
    for name, svc in SERVICES.items():
        if name.startswith("airflow-") and name != "airflow-init":
            assert svc["entrypoint"] == ["airflow"] and svc["command"][0] in known, (name, svc["command"])
    assert "airflow db migrate" in " ".join(SERVICES["airflow-init"]["entrypoint"])


def _env_names(svc: dict) -> set[str]:
    env = svc.get("environment") or {}
    return set(env) if isinstance(env, dict) else {e.split("=")[0] for e in env}


def test_every_streamops_variable_set_is_one_the_code_reads():
    names = set(COMPOSE["x-streamops-env"]) | {n for svc in SERVICES.values() for n in _env_names(svc)}
    ours = {n for n in names if n.startswith("STREAMOPS_")}
    assert ours >= {"STREAMOPS_DATABASE_URL", "STREAMOPS_SPARK_MASTER", "STREAMOPS_DRIVER_HOST"}
    for n in ours:
        assert re.search(rf'"{n}"', SOURCE), f"{n} is set in compose.yaml but nothing reads it"


def test_airflow_settings_match_the_embedded_sites():
    """The same Airflow settings `streamops airflow up` writes (orchestrate/airflow_home.py)."""
    site_code = (REPO_ROOT / "plugins" / "streamops" / "orchestrate" / "airflow_home.py").read_text()
    for n in COMPOSE["x-airflow-env"]:
        if n.startswith("AIRFLOW__"):
            assert f'"{n}"' in site_code, f"{n} is not a setting the embedded site uses"
