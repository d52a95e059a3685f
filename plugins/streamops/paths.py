"""Where things live: the repo, the private state directory, the registry file."""

from __future__ import annotations

import os
from pathlib import Path

# plugins/streamops/paths.py -> repo root is two levels above the package.
REPO_ROOT = Path(__file__).resolve().parents[2]


def state_dir() -> Path:
    """`.streamops/` in the repo (or $STREAMOPS_HOME): pids, logs, checkpoints, the embedded cluster's record."""
    d = Path(os.environ.get("STREAMOPS_HOME", REPO_ROOT / ".streamops"))
    d.mkdir(parents=True, exist_ok=True)
    return d


def registry_path() -> Path:
    return Path(os.environ.get("STREAMOPS_APPS", REPO_ROOT / "apps.yaml"))


def sql_dir() -> Path:
    return REPO_ROOT / "sql"


def data_dir() -> Path:
    """Root for stage inputs, checkpoints and file sinks unless a stage names absolute paths."""
    d = state_dir() / "data"
    d.mkdir(parents=True, exist_ok=True)
    return d


def jars_dir() -> Path:
    """The JVM jars `make venv` fetched beside pyspark's (jars/pom.xml): `<venv>/jars/`, one
    folder per module (`kafka-broker/`, `spark-kafka/`); `$STREAMOPS_JARS` overrides."""
    import sys

    return Path(os.environ.get("STREAMOPS_JARS") or Path(sys.prefix) / "jars")


def write_private(path: Path, text: str, owner: str | None = None) -> None:
    """`text` in `path`, mode 0600 from the start: a secret is never readable by others, even
    briefly. `owner`: an OS user to hand the file to (the embedded PostgreSQL's, when we are root)."""
    import pwd

    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)
    if owner:
        pw = pwd.getpwnam(owner)
        os.chown(path, pw.pw_uid, pw.pw_gid)
