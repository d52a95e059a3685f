"""sink.table (issue 43 item 3): a job's results by name, typed, readable by the analysts' role; a
job whose output no longer fits is refused with the column named."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import text

from streamops.store import sink_tables

pytestmark = pytest.mark.db

COLUMNS = [("user", "string"), ("session_start", "timestamp"), ("clicks", "bigint"), ("tags", "array<string>")]


def _row(conn, sid: str, key: str, value: dict) -> None:
    conn.execute(text("INSERT INTO sink_outputs (stage_id, key, value, version, batch_id) "
                      "VALUES (:s, :k, CAST(:v AS jsonb), 1, 0)"), {"s": sid, "k": key, "v": json.dumps(value)})


def test_a_sink_table_is_typed_by_the_jobs_output_and_checked_at_every_start(clean_db):
    assert sink_tables.ensure("t_user_sessions", "t.s", COLUMNS, apply=False) == "new"
    assert sink_tables.ensure("t_user_sessions", "t.s", COLUMNS) == "created"
    assert sink_tables.ensure("t_user_sessions", "t.s", COLUMNS) == "unchanged"
    with clean_db.begin() as conn:
        _row(conn, "t.s", "u1|a", {"user": "u1", "session_start": "2026-01-01T00:00:00.000Z", "clicks": 3,
                                   "tags": ["a", "b"]})
        _row(conn, "t.other", "u9|a", {"user": "u9", "session_start": "2026-01-01T00:00:00.000Z", "clicks": 1})
    with clean_db.connect() as conn:
        rows = conn.execute(text("SELECT * FROM sinks.t_user_sessions")).mappings().all()
        types = dict(conn.execute(text("SELECT column_name, data_type FROM information_schema.columns "
                                       "WHERE table_schema = 'sinks' AND table_name = 't_user_sessions'")).all())
    assert [(r["user"], r["clicks"], r["tags"]) for r in rows] == [("u1", 3, ["a", "b"])], "only its stage's rows"
    assert rows[0]["session_start"].year == 2026
    with clean_db.connect() as conn:  # the analysts' role reads it by name (the raw table stays refused)
        conn.execute(text("SET ROLE streamops_reader"))
        assert conn.execute(text("SELECT count(*) FROM sinks.t_user_sessions")).scalar_one() == 1
        conn.rollback()
    assert types == {"stage_id": "text", "user": "text", "session_start": "timestamp with time zone",
                     "clicks": "bigint", "tags": "jsonb", "written_at": "timestamp with time zone"}


@pytest.mark.parametrize("columns, named", [
    ([("user", "string"), ("session_start", "timestamp"), ("clicks", "string"), ("tags", "array<string>")],
     "column 3 differs: the table has clicks bigint, the job writes clicks text"),
    ([("user", "string"), ("session_start", "timestamp"), ("clicks", "bigint")],
     "column 4 differs: the table has tags jsonb, the job writes nothing"),
    ([("user", "string"), ("written_at", "timestamp")], "output column 'written_at' is the table's own"),
])
def test_an_output_that_no_longer_fits_is_refused_naming_the_column(clean_db, columns, named):
    sink_tables.ensure("sessions_fit", "t.s", COLUMNS)
    with pytest.raises(sink_tables.SinkTableMismatch, match=named):
        sink_tables.ensure("sessions_fit", "t.s", columns, apply=False)
    with pytest.raises(sink_tables.SinkTableMismatch, match="holds stage t.s's results"):
        sink_tables.ensure("sessions_fit", "t.other", COLUMNS)
