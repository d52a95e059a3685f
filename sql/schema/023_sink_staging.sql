-- A batch's sink rows are staged here by the executors, then applied to `sink_outputs` by the
-- driver in one transaction with the batch's commit row (sink_apply.sql). A batch that fails
-- half-way leaves nothing in the sink (before, the partitions that had committed stayed, and
-- their inflated counts then outranked the replay's); a fenced run's apply is rolled back whole.
-- Unlogged: a staged batch is rebuilt by its replay; a crash that empties the table is caught by
-- the apply's row count, which must match what the executors staged.
CREATE UNLOGGED TABLE sink_staging (
    stage_id       text NOT NULL,
    deployment_id  bigint NOT NULL,
    batch_id       bigint NOT NULL,
    key            text NOT NULL,
    value          jsonb NOT NULL,
    event_ts       timestamptz,
    version        double precision NOT NULL,
    staged_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX sink_staging_batch ON sink_staging (stage_id, deployment_id, batch_id);

-- Batches staged by a run that died before applying them (its replay staged them again): no
-- batch takes a day, whatever keep_days says. records_retention.sql calls it beside
-- records_retention (018).
CREATE FUNCTION sink_staging_retention() RETURNS bigint LANGUAGE sql AS $$
    WITH gone AS (DELETE FROM sink_staging WHERE staged_at < now() - interval '1 day' RETURNING 1)
    SELECT count(*) FROM gone
$$;
