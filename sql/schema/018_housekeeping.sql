-- Housekeeping that survives a missed night.
--
-- A day whose partition was never created (the nightly run missed) has its rows in the default
-- partition, and creating that partition later fails ("updated partition constraint for default
-- partition would be violated"), every night, for good. Creating a partition now first moves
-- that day's rows out of the default partition, then back in through the new one.
CREATE OR REPLACE FUNCTION ensure_stage_metrics_partitions(from_day date, days integer)
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    d date;
    created integer := 0;
    part text;
BEGIN
    FOR i IN 0 .. days - 1 LOOP
        d := from_day + i;
        part := format('stage_metrics_%s', to_char(d, 'YYYYMMDD'));
        IF to_regclass(part) IS NULL THEN
            CREATE TEMP TABLE IF NOT EXISTS stage_metrics_drained (LIKE stage_metrics) ON COMMIT DROP;
            TRUNCATE stage_metrics_drained;
            WITH moved AS (DELETE FROM stage_metrics_default WHERE ts >= d::timestamptz AND ts < (d + 1)::timestamptz
                           RETURNING *)
            INSERT INTO stage_metrics_drained SELECT * FROM moved;
            EXECUTE format('CREATE TABLE %I PARTITION OF stage_metrics FOR VALUES FROM (%L) TO (%L)',
                           part, d::timestamptz, (d + 1)::timestamptz);
            INSERT INTO stage_metrics SELECT * FROM stage_metrics_drained;
            created := created + 1;
        END IF;
    END LOOP;
    RETURN created;
END $$;

-- Retention of stage_metrics, as in 008, plus: every day the default partition still holds (from a
-- missed night) gets its partition (which drains it), and partitions are created `ahead_days` ahead.
DROP FUNCTION stage_metrics_retention(integer, date);
CREATE FUNCTION stage_metrics_retention(keep_days integer, today date DEFAULT current_date, ahead_days integer DEFAULT 7)
RETURNS TABLE (action text, target text, detail text) LANGUAGE plpgsql AS $$
DECLARE
    cutoff date := today - keep_days;
    part record;
    stray record;
    n bigint;
BEGIN
    IF keep_days < 1 THEN
        RAISE EXCEPTION 'keep_days must be at least 1 (got %)', keep_days;
    END IF;
    FOR part IN
        SELECT c.relname, to_date(substr(c.relname, 15), 'YYYYMMDD') AS day
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'stage_metrics'::regclass AND c.relname ~ '^stage_metrics_[0-9]{8}$'
        ORDER BY 2
    LOOP
        IF part.day < cutoff THEN
            EXECUTE format('DROP TABLE %I', part.relname);
            action := 'dropped'; target := part.relname; detail := part.day::text;
            RETURN NEXT;
        END IF;
    END LOOP;
    DELETE FROM stage_metrics_default WHERE ts < cutoff::timestamptz;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n > 0 THEN
        action := 'deleted'; target := 'stage_metrics_default'; detail := n || ' rows before ' || cutoff;
        RETURN NEXT;
    END IF;
    FOR stray IN SELECT DISTINCT (ts AT TIME ZONE 'UTC')::date AS day FROM stage_metrics_default ORDER BY 1 LOOP
        n := ensure_stage_metrics_partitions(stray.day, 1);
        action := 'drained'; target := 'stage_metrics_default'; detail := n || ' partition(s) created for ' || stray.day;
        RETURN NEXT;
    END LOOP;
    n := ensure_stage_metrics_partitions(today, ahead_days + 1);
    action := 'ensured'; target := 'stage_metrics';
    detail := n || ' partition(s) created for ' || today || ' to ' || (today + ahead_days);
    RETURN NEXT;
END $$;

-- Retention of every other table that grows with time: rows older than `keep_days`. The latest
-- commit of each stage stays (the next failure's output gap starts there); a quarantined batch's
-- exclusion stays as long as its quarantine rows do.
CREATE FUNCTION records_retention(keep_days integer)
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
    target := 'stage_commands';
    DELETE FROM stage_commands WHERE done_at < cutoff;
    GET DIAGNOSTICS deleted = ROW_COUNT; RETURN NEXT;
END $$;
