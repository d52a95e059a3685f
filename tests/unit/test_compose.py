"""docker/compose.yaml cannot run here (no Docker engine): check instead that everything it
names exists in this repo and this stack: files, Airflow commands, Spark classes, variables; and
that it is safe to run (issue 25 item 9): secrets only from docker/.env, ports on loopback by
default, Spark authenticated, no root."""

from __future__ import annotations

import os
import re
import secrets
import stat
import subprocess
import zipfile
from pathlib import Path

import pytest
import yaml

from streamops.paths import REPO_ROOT

DOCKER = REPO_ROOT / "docker"
COMPOSE = yaml.safe_load((DOCKER / "compose.yaml").read_text())
SERVICES = COMPOSE["services"]
RAW = (DOCKER / "compose.yaml").read_text()
SPARK_AUTH = "/usr/local/bin/spark-auth"  # docker/spark-auth.sh in the image
SOURCE = "\n".join(p.read_text() for root in ("plugins", "spark_apps") for p in (REPO_ROOT / root).rglob("*.py"))


def test_the_production_shape_is_all_there():
    assert {"postgres", "airflow-api-server", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer",
            "spark-master", "spark-worker-1", "spark-worker-2", "streamops-metrics", "prometheus",
            "grafana"} <= set(SERVICES)


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
        assert svc["entrypoint"] == [SPARK_AUTH, svc["entrypoint"][-1]]
        assert svc["entrypoint"][-1].endswith("site-packages/pyspark/bin/spark-class")
        assert svc["command"][0] in cluster_code, f"{svc['command'][0]} is not what `streamops spark up` starts"
    assert SERVICES["spark-worker-1"]["command"][1] == COMPOSE["x-streamops-env"]["STREAMOPS_SPARK_MASTER"]


def test_airflow_services_run_real_airflow_commands():
    from airflow.cli.cli_config import core_commands

    known = {c.name for c in core_commands}
    for name, svc in SERVICES.items():
        if name.startswith("airflow-") and name != "airflow-init":
            assert svc["entrypoint"] in (["airflow"], [SPARK_AUTH, "airflow"]), (name, svc["entrypoint"])
            assert svc["command"][0] in known, (name, svc["command"])
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


# --- Security (issue 25 item 9) ------------------------------------------------------------------

# Compose's interpolation: $$, $VAR, ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?err}, ${VAR?err}.
_INTERP = re.compile(r"\$(?:(?P<esc>\$)|\{(?P<braced>[A-Za-z_]\w*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}"
                     r"|(?P<named>[A-Za-z_]\w*))")
_REQUIRED_REF = re.compile(r"\$\{(?P<name>[A-Za-z_]\w*):\?(?P<msg>[^}]+)\}")
SECRET_NAME = re.compile(r"PASSWORD|SECRET|TOKEN|_KEY$|CREDENTIAL", re.I)
BIND = "STREAMOPS_BIND"


class MissingVariable(Exception):
    pass


def _strings(node, path=()):
    """Every (path, string value) in the parsed file (compose interpolates values, not keys)."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _strings(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _strings(v, (*path, i))
    elif isinstance(node, str):
        yield path, node


def _interpolate_str(value: str, env: dict[str, str]) -> str:
    def sub(m: re.Match) -> str:
        if m["esc"]:
            return "$"
        name, op = m["braced"] or m["named"], m["op"] or ""
        val = env.get(name)
        unset = not val if op.startswith(":") else val is None
        if op.endswith("-") and unset:
            return m["arg"]
        if op.endswith("?") and unset:
            raise MissingVariable(f"{name}: {m['arg']}")
        return val or ""

    return _INTERP.sub(sub, value)


def interpolate(node, env: dict[str, str]):
    if isinstance(node, dict):
        return {k: interpolate(v, env) for k, v in node.items()}
    if isinstance(node, list):
        return [interpolate(v, env) for v in node]
    return _interpolate_str(node, env) if isinstance(node, str) else node


def _references() -> dict[str, set[str]]:
    """Variable name -> the forms it is referenced in ('' for ${VAR}/$VAR, else the operator)."""
    refs: dict[str, set[str]] = {}
    for _, value in _strings(COMPOSE):
        for m in _INTERP.finditer(value):
            if not m["esc"]:
                refs.setdefault(m["braced"] or m["named"], set()).add(m["op"] or "")
    return refs


def _env_example() -> tuple[dict[str, str], list[str]]:
    lines = (DOCKER / "env.example").read_text().splitlines()
    values, undocumented = {}, []
    for i, line in enumerate(lines):
        if line.strip() and not line.startswith("#"):
            name, sep, value = line.partition("=")
            assert sep and re.fullmatch(r"[A-Za-z_]\w*", name), f"env.example line {i + 1}: {line!r}"
            assert name not in values, f"{name} twice in env.example"
            values[name] = value
            if i == 0 or not lines[i - 1].startswith("# "):
                undocumented.append(name)
    return values, undocumented


SECRETS = {n for n in _references() if n != BIND}
FILLED = {**{n: secrets.token_hex(16) for n in SECRETS}}


def test_the_env_file_is_not_committed_and_not_in_the_image():
    ignored = {ln.strip() for ln in (REPO_ROOT / ".gitignore").read_text().splitlines()}
    assert ignored & {"docker/.env", "/docker/.env"}, ".gitignore must list docker/.env"
    tracked = subprocess.run(["git", "ls-files", "--error-unmatch", "docker/.env"], cwd=REPO_ROOT,
                             capture_output=True, text=True)
    assert tracked.returncode != 0, "docker/.env is committed"
    ignore = (DOCKER / "Dockerfile.dockerignore").read_text().splitlines()
    assert "**/.env" in ignore, "docker/.env must stay out of the build context"
    for copied in re.findall(r"^COPY (\S+)", (DOCKER / "Dockerfile").read_text(), re.M):
        assert copied not in ignore, f"the Dockerfile copies {copied}, which the build context excludes"


def test_env_example_lists_every_variable_compose_reads_each_with_a_comment():
    values, undocumented = _env_example()
    assert set(values) == set(_references()), "env.example and compose.yaml name different variables"
    assert not undocumented, f"no comment line above {undocumented} in env.example"
    for name in SECRETS:
        # A placeholder, never a usable value: copying env.example unedited stops compose.
        assert values[name] == "", f"env.example gives {name} a value"
    assert values[BIND] == "127.0.0.1"


def test_every_secret_is_a_required_reference_never_a_literal():
    assert {"POSTGRES_PASSWORD", "AIRFLOW_API_SECRET_KEY", "AIRFLOW_JWT_SECRET", "SPARK_AUTH_SECRET",
            "GRAFANA_ADMIN_PASSWORD", "OBSERVER_DB_PASSWORD", "AIRFLOW_DB_PASSWORD"} <= SECRETS
    for name, forms in _references().items():
        if name != BIND:
            # ${VAR:?...} only: no default, and unset or empty is an error, not an empty password.
            assert forms == {":?"}, f"{name} is referenced as {forms}, not only ${{{name}:?...}}"
    for path, value in _strings(COMPOSE):
        key = str(path[-1]) if path else ""
        if SECRET_NAME.search(key) and not isinstance(path[-1], int):
            m = _REQUIRED_REF.fullmatch(value)
            assert m and "docker/env.example" in m["msg"], f"{'.'.join(map(str, path))} = {value!r}"
        for userinfo in re.findall(r"://([^/@\s]+)@", value):
            user, _, password = userinfo.partition(":")
            assert _REQUIRED_REF.fullmatch(password), f"a literal password for {user} in {value!r}"
        assert "spark.authenticate.secret" not in value, "the Spark secret on a command line (ps shows it)"
    assert "streamops:streamops@" not in RAW


def test_a_missing_secret_stops_compose_and_a_filled_one_reaches_its_users():
    example, _ = _env_example()
    for name in SECRETS:
        for env in ({k: v for k, v in FILLED.items() if k != name}, {**FILLED, name: ""}, example):
            with pytest.raises(MissingVariable):
                interpolate(COMPOSE, env)
    done = interpolate(COMPOSE, FILLED)
    assert not [p for p, v in _strings(done) if "${" in v]
    pg = FILLED["POSTGRES_PASSWORD"]
    assert done["services"]["postgres"]["environment"]["POSTGRES_PASSWORD"] == pg
    control = FILLED["CONTROL_DB_PASSWORD"]
    assert f"streamops:{control}@postgres:5432/" in done["x-streamops-env"]["STREAMOPS_DATABASE_URL"]
    airflow_url = done["x-airflow-env"]["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
    assert airflow_url.endswith(f"streamops_airflow:{FILLED['AIRFLOW_DB_PASSWORD']}@postgres:5432/airflow")


def test_the_page_and_the_exporter_hold_only_the_observer_s_url():
    """Issue 44 item 11: the api-server (the Streams page) and the exporter only read, so their
    containers get streamops_observer's URL and never the superuser's password."""
    from streamops.store import observe, roles

    done = interpolate(COMPOSE, FILLED)
    observer = f"postgresql://{roles.OBSERVER}:{FILLED['OBSERVER_DB_PASSWORD']}@postgres:5432/streamops"
    for name in ("airflow-api-server", "streamops-metrics"):
        env = done["services"][name]["environment"]
        assert env["STREAMOPS_DATABASE_URL"] == env[observe.URL_ENV] == observer, name
        assert FILLED["POSTGRES_PASSWORD"] not in " ".join(map(str, env.values())), name
    init = [v for v in SERVICES["postgres"]["volumes"] if v.startswith("./postgres-init.sh:")]
    assert init and init[0].split(":")[1].startswith("/docker-entrypoint-initdb.d/")


def test_only_the_postgres_service_holds_the_superuser_s_password():
    """Issue 44 item 11: the control plane (the scheduler, its tasks and drivers, airflow-init)
    connects as `streamops`, which owns the streamops database and is no superuser
    (tests/integration/test_least_privilege.py migrates and writes as such a role); the
    dag-processor and the triggerer only read, as the observer."""
    from streamops.store import roles

    done = interpolate(COMPOSE, FILLED)
    pg = FILLED["POSTGRES_PASSWORD"]
    assert done["services"]["postgres"]["environment"]["POSTGRES_USER"] == "postgres"
    for name, svc in done["services"].items():
        if name != "postgres":
            env = svc.get("environment") or {}
            assert pg not in " ".join(map(str, env.values() if isinstance(env, dict) else env)), name
    control = FILLED["CONTROL_DB_PASSWORD"]
    for name in ("airflow-dag-processor", "airflow-triggerer"):
        env = done["services"][name]["environment"]
        assert env["STREAMOPS_DATABASE_URL"].startswith(f"postgresql://{roles.OBSERVER}:"), name
        assert control not in " ".join(map(str, env.values())), name


def _postgres_init(tmp_path: Path, passwords: dict[str, str]) -> tuple[subprocess.CompletedProcess, str]:
    """docker/postgres-init.sh with a psql that records its arguments and its input."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "psql").write_text(f'#!/bin/sh\necho "ARGS $*" >> {tmp_path}/psql.log\ncat >> {tmp_path}/psql.log\n')
    (fake / "psql").chmod(0o755)
    env = {"PATH": f"{fake}:{os.environ['PATH']}", "POSTGRES_USER": "postgres", "POSTGRES_DB": "streamops",
           **passwords}
    res = subprocess.run(["sh", str(DOCKER / "postgres-init.sh")], env=env, capture_output=True, text=True,
                         timeout=30)
    log = tmp_path / "psql.log"
    return res, log.read_text() if log.exists() else ""


def test_postgres_init_makes_the_roles_with_passwords_on_stdin_only(tmp_path):
    from streamops.store import roles

    pw = {"OBSERVER_DB_PASSWORD": secrets.token_hex(16), "AIRFLOW_DB_PASSWORD": secrets.token_hex(16),
          "CONTROL_DB_PASSWORD": secrets.token_hex(16)}
    res, log = _postgres_init(tmp_path, pw)
    assert res.returncode == 0, res.stderr
    assert "CREATE ROLE streamops LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE" in log and pw["CONTROL_DB_PASSWORD"] in log
    assert "ALTER DATABASE streamops OWNER TO streamops" in log
    args = [ln for ln in log.splitlines() if ln.startswith("ARGS ")]
    assert len(args) == 2 and not any(p in a for a in args for p in pw.values()), "a password on a command line"
    assert f"CREATE ROLE {roles.OBSERVER} LOGIN NOSUPERUSER" in log and pw["OBSERVER_DB_PASSWORD"] in log
    assert f"CREATE DATABASE airflow OWNER {roles.AIRFLOW}" in log and pw["AIRFLOW_DB_PASSWORD"] in log
    assert log.index("log_min_error_statement = panic") < log.index("CREATE ROLE")


@pytest.mark.parametrize("bad", [None, "", "it's", "back\\slash"])
def test_postgres_init_refuses_a_missing_or_unquotable_password(tmp_path, bad):
    pw = {"OBSERVER_DB_PASSWORD": secrets.token_hex(16), "CONTROL_DB_PASSWORD": secrets.token_hex(16)}
    if bad is not None:
        pw["AIRFLOW_DB_PASSWORD"] = bad
    res, log = _postgres_init(tmp_path, pw)
    assert res.returncode != 0 and "CREATE ROLE" not in log


def test_every_published_port_binds_loopback_unless_told_otherwise():
    published = {}
    for name, svc in SERVICES.items():
        assert svc.get("network_mode") != "host", f"{name} shares the host's network"
        for port in svc.get("ports", []):
            assert isinstance(port, str) and re.fullmatch(r"\$\{STREAMOPS_BIND:-127\.0\.0\.1\}:\d+:\d+", port), \
                f"{name} publishes {port!r}: bind it to ${{STREAMOPS_BIND:-127.0.0.1}}"
            host_port = port.rsplit(":", 2)[1]
            published[host_port] = name
            assert _interpolate_str(port, {}) == f"127.0.0.1:{host_port}:{port.rsplit(':', 1)[1]}"
            assert _interpolate_str(port, {BIND: ""}).startswith("127.0.0.1:")
            assert _interpolate_str(port, {BIND: "0.0.0.0"}).startswith("0.0.0.0:")
    assert published == {"8080": "airflow-api-server", "8081": "spark-master", "9090": "prometheus",
                         "3000": "grafana"}


def _dockerfile_user() -> str:
    users = re.findall(r"^USER\s+(\S+)", (DOCKER / "Dockerfile").read_text(), re.M)
    return users[-1] if users else "root"


def _is_root(user: str) -> bool:
    return str(user).split(":")[0] in ("", "0", "root")


def test_every_service_runs_as_a_non_root_user():
    image_user = _dockerfile_user()
    # Numeric, so that Kubernetes' runAsNonRoot can check it too.
    assert re.fullmatch(r"[1-9]\d*:[1-9]\d*", image_user) and not _is_root(image_user), image_user
    for name, svc in SERVICES.items():
        assert not svc.get("privileged"), f"{name} is privileged"
        if "user" in svc:
            assert not _is_root(svc["user"]), f"{name} runs as {svc['user']}"
        else:
            assert svc.get("build", {}).get("dockerfile") == "docker/Dockerfile", \
                f"{name} runs as its image's default user, which may be root: set user:"
    # The postgres image's own unprivileged user: its entrypoint then never starts as root.
    assert SERVICES["postgres"]["user"] == "postgres"
    # Prometheus's (nobody) and Grafana's (grafana) own, which own their data directories.
    assert SERVICES["prometheus"]["user"] == "65534:65534" and SERVICES["grafana"]["user"] == "472"


def test_what_the_non_root_user_writes_is_its_own():
    """It can write where the services write: the state volume (a new named volume takes the
    image's ownership of its mount point), the workers' work dir, Spark's conf dir, reports."""
    dockerfile = (DOCKER / "Dockerfile").read_text()
    uid = _dockerfile_user().split(":")[0]
    chowned = {p for line in re.findall(rf"chown {uid}:\d+ ([^&\n\\]+)", dockerfile) for p in line.split()}
    env = {**COMPOSE["x-streamops-env"]}
    work = SERVICES["spark-worker-1"]["command"][SERVICES["spark-worker-1"]["command"].index("--work-dir") + 1]
    conf_dir = re.search(r"SPARK_CONF_DIR=(\S+)", dockerfile)[1]
    for path in (env["STREAMOPS_HOME"], work, conf_dir):
        assert path in chowned, f"{path} is not owned by the image's user"
    for path in (env["STREAMOPS_REPORTS_DIR"], SERVICES["airflow-scheduler"]["environment"]["AIRFLOW_HOME"]):
        assert path.startswith(env["STREAMOPS_HOME"] + "/"), f"{path} is not on the state volume"


def test_spark_authenticates_every_rpc_and_has_no_rest_server():
    dockerfile = (DOCKER / "Dockerfile").read_text()
    assert f"COPY docker/spark-auth.sh {SPARK_AUTH}" in dockerfile
    # Everything that speaks Spark RPC: the master, the workers, and the scheduler (the drivers).
    spark = {n for n, s in SERVICES.items() if s.get("entrypoint", [""])[-1].endswith("bin/spark-class")}
    assert spark == {"spark-master", "spark-worker-1", "spark-worker-2"}
    for name in spark | {"airflow-scheduler"}:
        svc = SERVICES[name]
        assert svc["entrypoint"][0] == SPARK_AUTH, f"{name} does not start through spark-auth"
        assert _REQUIRED_REF.fullmatch(svc["environment"]["SPARK_AUTH_SECRET"])["name"] == "SPARK_AUTH_SECRET"
    # Only they get the secret.
    for name, svc in SERVICES.items():
        if name not in spark | {"airflow-scheduler"}:
            assert "SPARK_AUTH_SECRET" not in _env_names(svc), name
    master_opts = SERVICES["spark-master"]["environment"]["SPARK_MASTER_OPTS"].split()
    assert "-Dspark.master.rest.enabled=false" in master_opts
    assert not re.search(r"spark\.authenticate=false|spark\.master\.rest\.enabled=true", RAW)
    # No session conf key (the embedded cluster writes its own spark-defaults.conf, a file's text).
    assert not re.search(r"""["']spark\.authenticate[\w.]*["']""", SOURCE), \
        "the code must not override spark-defaults.conf's authentication"


def test_the_launcher_in_the_image_reads_the_options_compose_sets():
    from streamops import spark_cluster

    (jar,) = (spark_cluster.spark_home() / "jars").glob("spark-launcher_*.jar")
    with zipfile.ZipFile(jar) as z:
        builder = z.read("org/apache/spark/launcher/SparkClassCommandBuilder.class")
    assert b"SPARK_MASTER_OPTS" in builder and b"org.apache.spark.deploy.master.Master" in builder


def _spark_auth(tmp_path: Path, secret: str | None) -> tuple[subprocess.CompletedProcess, Path]:
    conf_dir = tmp_path / "conf"
    env = {"PATH": os.environ["PATH"], "SPARK_CONF_DIR": str(conf_dir)}
    if secret is not None:
        env["SPARK_AUTH_SECRET"] = secret
    command = ["sh", "-c", 'echo "ran ${SPARK_AUTH_SECRET:-without it}"']
    res = subprocess.run(["sh", str(DOCKER / "spark-auth.sh"), *command], env=env, capture_output=True, text=True,
                         timeout=30)
    return res, conf_dir / "spark-defaults.conf"


def test_spark_auth_writes_a_private_conf_and_runs_the_command_without_the_secret(tmp_path):
    secret = secrets.token_hex(32)
    res, conf = _spark_auth(tmp_path, secret)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "ran without it"
    # RPC encryption as the embedded cluster has it (issue 44)
    from streamops.spark_cluster import RPC_CRYPTO

    assert conf.read_text().splitlines() == ["spark.authenticate true", f"spark.authenticate.secret {secret}",
                                             *(f"{k} {v}" for k, v in RPC_CRYPTO.items())]
    assert stat.S_IMODE(conf.stat().st_mode) == 0o600
    assert stat.S_IMODE(conf.parent.stat().st_mode) == 0o700


@pytest.mark.parametrize("secret", [None, "", "has space", "back\\slash", "new\nline"])
def test_spark_auth_refuses_a_missing_or_unsafe_secret(tmp_path, secret):
    res, conf = _spark_auth(tmp_path, secret)
    assert res.returncode != 0 and "ran" not in res.stdout
    assert "SPARK_AUTH_SECRET" in res.stderr
    assert not conf.exists()


# --- Prometheus metrics and Grafana (issue 30) ------------------------------------------------------

def _mount(name: str, host: str) -> str:
    """Where service `name` mounts `host` (a path under docker/)."""
    (target,) = [v.split(":")[1] for v in SERVICES[name]["volumes"] if v.split(":")[0] == host]
    return target


def test_images_from_registries_are_pinned():
    for name, svc in SERVICES.items():
        if "image" in svc:
            assert re.fullmatch(r"[\w./-]+:v?\d+(\.\d+)*", svc["image"]), f"{name}: pin {svc['image']!r} to a version"


def test_the_exporter_is_a_real_cli_command_on_every_interface_of_its_own_container_only():
    import typer

    from streamops.cli import app
    from streamops.report import prometheus

    svc = SERVICES["streamops-metrics"]
    assert svc["build"]["dockerfile"] == "docker/Dockerfile" and svc["entrypoint"] == ["streamops"]
    name, *options = svc["command"]
    command = typer.main.get_command(app).commands[name]
    assert set(options) <= {o for p in command.params for o in p.opts}
    assert svc["environment"]["STREAMOPS_METRICS_HOST"] == "0.0.0.0" and "ports" not in svc
    assert svc["environment"]["STREAMOPS_DATABASE_URL"] == COMPOSE["x-observer-url"]
    assert int(svc["environment"]["STREAMOPS_METRICS_PORT"]) == prometheus.DEFAULT_PORT
    # Loopback everywhere else: the variable is set on this service alone.
    assert [n for n, s in SERVICES.items() if "STREAMOPS_METRICS_HOST" in _env_names(s)] == ["streamops-metrics"]
    assert "STREAMOPS_METRICS_HOST" not in COMPOSE["x-streamops-env"]


def test_prometheus_scrapes_the_exporter_with_the_config_compose_mounts():
    config = yaml.safe_load((DOCKER / "prometheus.yml").read_text())
    flags = dict(f.removeprefix("--").split("=", 1) for f in SERVICES["prometheus"]["command"])
    assert flags["config.file"] == _mount("prometheus", "./prometheus.yml")
    assert flags["storage.tsdb.path"] == _mount("prometheus", "prometheus-data")
    (job,) = config["scrape_configs"]
    (target,) = [t for sc in job["static_configs"] for t in sc["targets"]]
    host, port = target.split(":")
    assert host == "streamops-metrics"
    assert port == SERVICES["streamops-metrics"]["environment"]["STREAMOPS_METRICS_PORT"]
    assert job.get("metrics_path", "/metrics") == "/metrics"


def test_grafana_is_provisioned_with_prometheus_and_the_dashboard():
    provisioning = DOCKER / "grafana" / "provisioning"
    assert _mount("grafana", "./grafana/provisioning") == "/etc/grafana/provisioning"
    (source,) = yaml.safe_load((provisioning / "datasources" / "prometheus.yaml").read_text())["datasources"]
    assert source["type"] == "prometheus" and source["url"] == "http://prometheus:9090"
    assert SERVICES["prometheus"]["ports"][0].endswith(":9090")
    (provider,) = yaml.safe_load((provisioning / "dashboards" / "streamops.yaml").read_text())["providers"]
    assert provider["options"]["path"] == _mount("grafana", "./grafana/dashboards")
    assert (DOCKER / "grafana" / "dashboards" / "streamops.json").is_file()
    env = SERVICES["grafana"]["environment"]
    assert env["GF_AUTH_ANONYMOUS_ENABLED"] == "false" and env["GF_USERS_ALLOW_SIGN_UP"] == "false"


def test_the_dashboard_queries_only_metrics_the_exporter_emits_templated_by_app_and_stage():
    import json

    from streamops.report import prometheus

    dashboard = json.loads((DOCKER / "grafana" / "dashboards" / "streamops.json").read_text())
    (source,) = yaml.safe_load((DOCKER / "grafana" / "provisioning" / "datasources" / "prometheus.yaml")
                               .read_text())["datasources"]
    names = set(prometheus.metric_names())
    emitted = names | {f"{n}_{s}" for n in names for s in ("bucket", "count", "sum", "created")}
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    used = set()
    for panel in panels:
        assert panel["datasource"]["uid"] == source["uid"], panel["title"]
        for target in panel["targets"]:
            found = set(re.findall(r"\bstreamops_\w+", target["expr"]))
            assert found and found <= emitted, (panel["title"], found - emitted)
            used |= found
            if "stage" in target["expr"] and "streamops_database_up" not in found:
                assert 'app=~"$app"' in target["expr"] and 'stage=~"$stage"' in target["expr"], panel["title"]
    assert {v["name"] for v in dashboard["templating"]["list"]} == {"app", "stage"}
    # Every gauge, counter and the histogram has a panel.
    assert {n.removesuffix("_bucket") for n in used} >= names - {"streamops_stage_backlog_files"}
