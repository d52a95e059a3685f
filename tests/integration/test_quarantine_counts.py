"""The quarantine counts that `/metrics`, `status` and the Streams page read on every load
(issue 44 item 9): the day's lines, from an index on quarantined_at, never the whole table (90
days of it under retention; 1M rows took 120-250 ms per scrape in a sequential scan)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from streamops.store import db

pytestmark = pytest.mark.db


@pytest.fixture
def lines(clean_db):
    with clean_db.begin() as conn:
        conn.execute(text("INSERT INTO pools (name, master, cores) VALUES ('p', 'local', 8)"))
        conn.execute(text("INSERT INTO apps (name, r_max_ms, maintenance_window, spec) VALUES ('a', 1000, '{}', '{}')"))
        conn.execute(text("INSERT INTO stages (stage_id, app, name, job, pool, cores, min_cores, max_cores, "
                          "state_partitions, trigger_ms, spec) VALUES ('a.s', 'a', 's', 'wordcount', 'p', 1, 1, 8, "
                          "4, 1000, '{}')"))
        for i, hours_ago in enumerate((1, 2, 3, 30, 24 * 40)):
            conn.execute(text("INSERT INTO quarantine (stage_id, record_key, raw, reason, reason_kind, "
                              "quarantined_at) VALUES ('a.s', :k, 'x', 'wrong type', 'wrong type', "
                              "now() - make_interval(hours => :h))"), {"k": f"k{i}", "h": hours_ago})
    return clean_db


def test_status_counts_the_last_24_hours(lines):
    assert [r.quarantined for r in db.rows("stage_status")] == [3]


@pytest.mark.parametrize("name", ["metrics_quarantined", "stage_status"])
def test_the_counts_read_the_index_not_the_table(lines, name):
    """Planned as on a big table (no sequential scan when there is another way): a range scan of
    quarantine_time, the window's rows only (a tiny table gets a bitmap scan of it, a big one an
    index-only scan: docs/reporting.md has the figures)."""
    with lines.connect() as conn:
        conn.execute(text("SET LOCAL enable_seqscan = off"))
        plan = "\n".join(db.explain(name, {"since": datetime.now(UTC) - timedelta(hours=12)}, conn))
    assert "Seq Scan on quarantine" not in plan and "Index Scan on quarantine_time" in plan \
        or "Index Only Scan using quarantine_time" in plan, plan
