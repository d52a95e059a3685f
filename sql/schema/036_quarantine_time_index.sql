-- The quarantine counts read on every scrape and page load (issue 44 item 9): /metrics counts
-- the lines since 00:00 UTC, `status` and the Streams page those of the last 24 h. Without an
-- index on the time, each count read the whole table (90 days under retention): 1M rows took
-- 120-250 ms per scrape in a sequential scan. With the stage and reason kind in the index the
-- day's lines are an index-only range scan (about 1 ms), and retention's
-- `DELETE … WHERE quarantined_at < cutoff` finds its rows the same way.
CREATE INDEX IF NOT EXISTS quarantine_time ON quarantine (quarantined_at, stage_id, reason_kind);
