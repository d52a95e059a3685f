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

-- records_retention (018) with the staged batches no run applied.
CREATE OR REPLACE FUNCTION records_retention(keep_days integer)
RETURNS TABLE (target text, deleted bigint) LANGUAGE plpgsql AS $$
DECLARE
    cutoff timestamptz := now() - make_interval(days => keep_days);
BEGIN
    IF keep_days < 1 THEN
        RAISE EXCEPTION 'keep_days must be at least 1 (got %)', keep_days;
    END IF;
    target := 'quarantine';
    DELETE FROM quarantine WHERE quarantined_at < cutoff;
    GET DIAGNOSTICS deleted = ROW_COUNT; RETURN NEXT;
    target := 'sink_commits';
    DELETE FROM sink_commits c WHERE c.committed_at < cutoff
        AND c.committed_at < (SELECT max(l.committed_at) FROM sink_commits l WHERE l.stage_id = c.stage_id);
    GET DIAGNOSTICS deleted = ROW_COUNT; RETURN NEXT;
    target := 'batch_failures';
    DELETE FROM batch_failures WHERE last_failed_at < cutoff;
    GET DIAGNOSTICS deleted = ROW_COUNT; RETURN NEXT;
    target := 'injected_faults';
    DELETE FROM injected_faults WHERE injected_at < cutoff;
    GET DIAGNOSTICS deleted = ROW_COUNT; RETURN NEXT;
    target := 'input_anomalies';
    DELETE FROM input_anomalies WHERE updated_at < cutoff;
    GET DIAGNOSTICS deleted = ROW_COUNT; RETURN NEXT;
    -- A batch staged by a run that died before applying it: its replay staged it again. No
    -- batch takes a day, whatever keep_days says.
    target := 'sink_staging';
    DELETE FROM sink_staging WHERE staged_at < now() - interval '1 day';
    GET DIAGNOSTICS deleted = ROW_COUNT; RETURN NEXT;
    target := 'stage_commands';
    DELETE FROM stage_commands WHERE done_at < cutoff;
    GET DIAGNOSTICS deleted = ROW_COUNT; RETURN NEXT;
END $$;
