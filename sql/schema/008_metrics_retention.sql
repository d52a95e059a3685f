-- Retention of stage_metrics: drop whole daily partitions (no DELETE, no bloat) older than
-- keep_days before `today`, delete the few stray rows that landed in the default partition
-- before the cutoff, and create today's and tomorrow's partitions ahead of their first rows.
-- Returns what it did, one row per action; running it twice a day is harmless.
CREATE FUNCTION stage_metrics_retention(keep_days integer, today date DEFAULT current_date)
RETURNS TABLE (action text, target text, detail text) LANGUAGE plpgsql AS $$
DECLARE
    cutoff date := today - keep_days;
    part record;
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
    n := ensure_stage_metrics_partitions(today, 2);
    action := 'ensured'; target := 'stage_metrics'; detail := n || ' partition(s) created for ' || today || ' and ' || (today + 1);
    RETURN NEXT;
END $$;
