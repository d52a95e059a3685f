"""`sink.table`: a job's results by name, one typed column per output column (`sinks.<table>`,
sql/schema/033_typed_sinks.sql), checked against the job's output on deploy and at every start."""

from __future__ import annotations

import json

from sqlalchemy.exc import DBAPIError

from streamops.store import db

# Spark's simple type names → PostgreSQL's, as information_schema spells them (the check compares
# them); anything nested stays JSON.
_PG_TYPES = {"string": "text", "int": "integer", "bigint": "bigint", "smallint": "smallint", "tinyint": "smallint",
             "double": "double precision", "float": "double precision", "boolean": "boolean",
             "timestamp": "timestamp with time zone", "timestamp_ntz": "timestamp without time zone",
             "date": "date"}
RESERVED = ("stage_id", "written_at")  # the view's own columns


class SinkTableMismatch(ValueError):
    """The job's output does not fit the stage's table; the message names the column."""


def pg_type(spark_type: str) -> str:
    if spark_type.startswith("decimal"):
        return "numeric"
    return _PG_TYPES.get(spark_type, "jsonb")


def ensure(table: str, stage_id: str, columns: list[tuple[str, str]], apply: bool = True) -> str:
    """Check sinks.<table> against the job's output `columns` (name, Spark type) and, with
    `apply`, create it: 'created', 'unchanged' or (not applied) 'new'."""
    clash = [c for c, _ in columns if c in RESERVED]
    if clash:
        raise SinkTableMismatch(f"sink.table {table}: the job's output column {clash[0]!r} is the table's own; "
                                f"rename it")
    cols = json.dumps([{"name": c, "type": pg_type(t)} for c, t in columns])
    try:
        with db.transaction() as conn:
            done: str = conn.execute(db.query("sink_table_ensure"), {"view": table, "stage_id": stage_id,
                                                                     "columns": cols, "apply": apply}).scalar_one()
            return done
    except DBAPIError as e:
        if getattr(e.orig, "pgcode", None) == "P0001":  # the function's own RAISE: the mismatch, named
            raise SinkTableMismatch(str(e.orig).strip().splitlines()[0]) from None
        raise
