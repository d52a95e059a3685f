"""The layering rules of docs/architecture.md, checked on the source (issue 12): who may import
whom (import-linter's contracts in pyproject.toml), where SQL and connections live, and how long
a module may grow. Pure: no database."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

from streamops.paths import REPO_ROOT

PACKAGE = REPO_ROOT / "plugins" / "streamops"
PRODUCT = [PACKAGE, REPO_ROOT / "spark_apps", REPO_ROOT / "dags"]
# The benchmarks keep their SQL in sql/ and their connections in store/ too (not the other rules:
# they reach into execute/ and engines as a test would).
BENCH = REPO_ROOT / "bench"
BENCH_QUERY_HELPERS = {"q", "q1", "scalar", "_all"}  # bench/{ha,soak,reconfig}.py: name → sql/bench/<name>.sql
MAX_LINES = 450

SQL_START = re.compile(r"^\s*(SELECT|INSERT\s+INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM|WITH\s+\w+\s+AS|CREATE\s|DROP\s|"
                       r"ALTER\s|SET\s+LOCAL|TRUNCATE\s)", re.I)


def _modules(*roots: Path) -> list[Path]:
    return sorted(p for root in roots for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def _name(path: Path) -> str:
    rel = path.relative_to(REPO_ROOT / "plugins" if PACKAGE in path.parents else REPO_ROOT)
    return ".".join(rel.with_suffix("").parts).removesuffix(".__init__")


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def test_import_contracts():
    """Who may import whom, the floors and no import circles: the contracts of [tool.importlinter]
    in pyproject.toml (`make lint` runs them too). Lazy imports inside functions count."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(REPO_ROOT / "plugins")])}
    r = subprocess.run([str(Path(sys.executable).with_name("lint-imports")), "--no-cache", "--no-logo"],
                       cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


def test_only_store_opens_connections():
    offenders = []
    for p in _modules(*PRODUCT):
        if _name(p).startswith("streamops.store"):
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "engine" \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "db":
                offenders.append(f"{p.relative_to(REPO_ROOT)}:{node.lineno}")
    assert not offenders, "db.engine() outside store/ (use store functions, db.transaction() or db.rows()):\n" + \
        "\n".join(offenders)


def test_only_store_connects_with_psycopg2():
    """psycopg2.connect (or `from psycopg2 import connect`) outside store/: a connection without
    the platform's timeouts and application_name. db.writer_connection() is the way."""
    offenders = []
    for p in _modules(*PRODUCT, BENCH):
        if _name(p).startswith("streamops.store"):
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "connect" \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "psycopg2" \
                    or isinstance(node, ast.ImportFrom) and node.module == "psycopg2" \
                    and any(a.name == "connect" for a in node.names):
                offenders.append(f"{p.relative_to(REPO_ROOT)}:{node.lineno}")
    assert not offenders, "psycopg2.connect outside store/ (use db.writer_connection()):\n" + "\n".join(offenders)


def _is_query_text(node: ast.AST) -> bool:
    """`db.query(...)` or `db.query(...).text`."""
    if isinstance(node, ast.Attribute) and node.attr == "text":
        node = node.value
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "query" \
        and isinstance(node.func.value, ast.Name) and node.func.value.id == "db"


def test_named_queries_are_not_pieced_together():
    """A named query's text with more SQL glued on (`+`, `%`, an f-string) is a statement no file
    holds: give it a file of its own."""
    offenders = []
    for p in _modules(*PRODUCT, BENCH):
        if _name(p).startswith("streamops.store"):
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            glued = isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mod)) \
                and (_is_query_text(node.left) or _is_query_text(node.right)) \
                or isinstance(node, ast.JoinedStr) and any(
                    isinstance(v, ast.FormattedValue) and _is_query_text(v.value) for v in node.values)
            if glued:
                offenders.append(f"{p.relative_to(REPO_ROOT)}:{node.lineno}")
    assert not offenders, "a named query's text pieced together (give the statement a file in sql/queries/):\n" + \
        "\n".join(offenders)


def test_no_sql_text_outside_sql_dir():
    offenders = []
    for p in _modules(*PRODUCT, BENCH):
        tree = ast.parse(p.read_text())
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs \
                    and SQL_START.match(node.value):
                offenders.append(f"{p.relative_to(REPO_ROOT)}:{node.lineno}: {node.value.strip()[:60]!r}")
    assert not offenders, "SQL belongs in sql/ (a named query for db.query):\n" + "\n".join(offenders)


def test_no_module_grows_past_the_limit():
    long = [(p.relative_to(REPO_ROOT), n) for p in _modules(*PRODUCT)
            if (n := len(p.read_text().splitlines())) > MAX_LINES]
    assert not long, f"modules over {MAX_LINES} lines: split them along a seam: {long}"


def test_every_named_query_exists():
    """db.query("x") and db.rows/row/value/write/bulk("x") name files that exist: a typo fails here, not in
    production. `bench/x` is sql/bench/x.sql."""
    queries = {p.stem for p in (REPO_ROOT / "sql" / "queries").glob("*.sql")} | \
        {f"bench/{p.stem}" for p in (REPO_ROOT / "sql" / "bench").glob("*.sql")}
    missing = []
    for p in _modules(*PRODUCT, BENCH):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in ("query", "rows", "row", "value", "write", "bulk", "explain") \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "db" \
                    and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value not in queries:
                missing.append(f"{p.relative_to(REPO_ROOT)}:{node.lineno}: {node.args[0].value}")
    for p in _modules(BENCH):  # the benchmarks' helpers that run sql/bench/<name>.sql
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in BENCH_QUERY_HELPERS \
                    and node.args and isinstance(node.args[0], ast.Constant) \
                    and f"bench/{node.args[0].value}" not in queries:
                missing.append(f"{p.relative_to(REPO_ROOT)}:{node.lineno}: bench/{node.args[0].value}")
    assert not missing, "named queries without a sql/queries file:\n" + "\n".join(missing)


def _job_names() -> set[str]:
    """The demo's jobs as the registry names them (module and function of each `job:`), and the
    closed list of workloads they were before issue 43. Words of plain English that the platform
    uses in their own sense (identity, repartition, count) are left out."""
    import yaml

    reg = yaml.safe_load((REPO_ROOT / "apps.yaml").read_text())
    refs = [st["job"] for app in reg["apps"].values() for st in app["stages"].values()]
    examples = REPO_ROOT / "examples" / "jobs"
    functions = {node.name for p in examples.rglob("*.py") for node in ast.walk(ast.parse(p.read_text()))
                 if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")}
    names = {part for ref in refs for part in re.split(r"[.:]", ref)} | functions | {"taxi_top10"}
    return names - {"identity", "repartition", "count", "web", "taxi", "patterns"}


def test_the_platform_names_no_job():
    """Issue 43: the demo's pipelines are jobs like any team's. No module of the platform (its
    Python, DAGs, named SQL and report views; not the applied migrations) names one."""
    names = _job_names()
    assert {"demo_jobs", "wordcount", "top_routes", "taxi_top10"} <= names
    word = re.compile(r"\b(" + "|".join(map(re.escape, sorted(names))) + r")\b", re.IGNORECASE)
    found = [f"{p.relative_to(REPO_ROOT)}:{i}: {m.group(0)}"
             for p in [*_modules(*PRODUCT), *(REPO_ROOT / "sql" / "queries").glob("*.sql"),
                       *(REPO_ROOT / "sql" / "reports").glob("*.sql")]
             for i, line in enumerate(p.read_text().splitlines(), 1) if (m := word.search(line))]
    assert not found, "the platform names a job:\n" + "\n".join(found)
