"""What every benchmark shares: its scratch database or site (bench/scratch.py), its result file
under bench/results/ (the figures, with the git revision, the machine's load and the arguments
that made them), the summaries of its samples and the table it prints."""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from sqlalchemy import Engine

from bench.scratch import drop_database, end_run, scratch_database, scratch_site
from streamops.paths import REPO_ROOT
from streamops.store import db, migrate

__all__ = ["RESULTS", "console", "drop_database", "end_run", "load_1m", "machine_notes", "provenance",
           "scratch_database", "scratch_engine", "scratch_run", "scratch_site", "shown", "summary", "table",
           "write_result"]

RESULTS = REPO_ROOT / "bench" / "results"
console = Console()


def scratch_engine(name: str) -> tuple[Engine, str]:
    """A fresh, migrated database `name` that this process uses from now on: (its engine, the
    server's url for `drop_database(server, name)`)."""
    url, server = scratch_database(name)
    os.environ["STREAMOPS_DATABASE_URL"] = url
    db.engine.cache_clear()
    engine = db.engine()
    migrate.apply(engine)
    return engine, server


@contextmanager
def scratch_run(name: str, prefix: str, teardown: Callable[[], object] | None = None, keep: bool = False,
                say: Callable[[str], None] | None = None) -> Iterator[Path]:
    """A benchmark's own site (scratch_site: database `name` and a home under /tmp) around a
    measurement with real drivers: yields the home; afterwards every driver it launched is
    ended (said, with `say`), then `teardown` (a cluster or broker of its own), and the site is
    removed unless `keep`."""
    from streamops.execute.launcher import terminate_all_drivers

    _, server, home = scratch_site(name, prefix)
    try:
        yield home
    finally:
        orphans = terminate_all_drivers()  # only drivers this process started
        if orphans and say is not None:
            say(f"[yellow]killed {len(orphans)} driver(s) left running: {orphans}[/yellow]")
        db.engine().dispose()
        if teardown is not None:
            teardown()
        db.engine.cache_clear()
        if not keep:
            drop_database(server, name)
            shutil.rmtree(home, ignore_errors=True)
        elif say is not None:
            say(f"kept database {name} and {home}")


def machine_notes(cluster: bool = False) -> dict:
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor())
    try:
        java = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=20).stderr.splitlines()[0]
    except Exception:  # noqa: BLE001 - a note only
        java = "unknown"
    import pyspark

    mem_kb = next(int(ln.split()[1]) for ln in Path("/proc/meminfo").read_text().splitlines()
                  if ln.startswith("MemTotal"))
    return {
        "cpus": os.cpu_count(), "cpu_model": cpu, "memory_gb": round(mem_kb / 1024 / 1024, 1),
        "python": platform.python_version(), "pyspark": pyspark.__version__, "java": java,
        "platform": platform.platform(),
        "spark_master": "embedded standalone (1 worker, 1-core executors)" if cluster else "local[cores]",
        "state_store": "RocksDB",
        "driver_memory": "1g",
    }


def _git_revision() -> str | None:
    try:
        r = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True,
                           timeout=10)
    except OSError:
        return None
    if r.returncode:
        return None
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO_ROOT,
                           capture_output=True, text=True, timeout=10).stdout.strip()
    return r.stdout.strip() + ("+dirty" if dirty else "")


def provenance(args: argparse.Namespace | None = None) -> dict[str, Any]:
    """Where a result came from: the code's revision, the machine's load when it was written and
    the arguments, so two result files can be told apart."""
    return {"git_revision": _git_revision(), "cpus": os.cpu_count(),
            "loadavg": [round(x, 2) for x in os.getloadavg()],
            "argv": sys.argv[1:], "args": vars(args) if args is not None else None,
            "written_at": datetime.now(UTC).isoformat(timespec="seconds")}


def write_result(name: str | Path, result: Any, args: argparse.Namespace | None = None, indent: int = 2,
                 stamp: bool = True) -> Path:
    """Write `result` as JSON to bench/results/`name` (or to the path `name`), directories made.
    A dict gets its provenance under "provenance" unless not `stamp` (a dict keyed by names, where
    it would read as one more); a list is written as it is (its readers index it)."""
    path = Path(name) if isinstance(name, Path) else RESULTS / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if stamp and isinstance(result, dict):
        result = {**result, "provenance": provenance(args)}
    path.write_text(json.dumps(result, indent=indent, default=str))
    return path


def shown(path: Path) -> str:
    """`path` relative to the repository when it is inside it: shorter in a printed line."""
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


def load_1m() -> float:
    """The machine's 1-minute load average, as every sample records it: on a shared machine the
    figures mean little without it."""
    return round(os.getloadavg()[0], 2)


def summary(values: Iterable[float | None], digits: int = 3, count: str = "n") -> dict[str, Any]:
    """Median, min and max of the values that are not None (rounded to `digits`) and their count."""
    vals = [v for v in values if v is not None]
    if not vals:
        return {"median": None, "min": None, "max": None, count: 0}
    return {"median": round(statistics.median(vals), digits), "min": round(min(vals), digits),
            "max": round(max(vals), digits), count: len(vals)}


def table(title: str, columns: Sequence[str], rows: Iterable[Sequence[str]], left: Iterable[str] = (),
          styles: Iterable[str | None] | None = None) -> Table:
    """A rich table: the columns right-aligned (figures) except those named in `left`."""
    left = set(left)
    t = Table(title=title)
    for col in columns:
        t.add_column(col, justify="left" if col in left else "right")
    rows = list(rows)
    for row, style in zip(rows, styles if styles is not None else [None] * len(rows), strict=True):
        t.add_row(*row, style=style)
    return t
