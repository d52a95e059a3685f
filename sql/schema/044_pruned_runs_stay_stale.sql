-- A pruned run stays stale. runs_retention (040) deletes the rows of runs that ended over
-- keep_days ago and were replaced, and run_is_current (020) found no row for such a run and so
-- called it current: a driver paused for longer than that (SIGSTOP, a suspended VM) would wake and
-- commit beside its successor. Each pruned id is kept here (one bigint a run: a few a day), and
-- a run named here is stale. A missing row alone cannot say it: tests' and tools' own run ids
-- have no row and must stay current.
CREATE TABLE deployments_pruned (id bigint PRIMARY KEY);

CREATE OR REPLACE FUNCTION run_is_current(run bigint) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT run IS NULL OR run = 0 OR (
        NOT EXISTS (SELECT 1 FROM deployments_pruned p WHERE p.id = run)
        AND NOT EXISTS (
            SELECT 1 FROM deployments d JOIN deployments n ON n.stage_id = d.stage_id AND n.role = d.role
            WHERE d.id = run AND n.id > d.id AND n.status <> 'refused'))
$$;

-- As in 040, with each deleted run's id kept in deployments_pruned.
CREATE OR REPLACE FUNCTION runs_retention(keep_days integer)
RETURNS TABLE (target text, deleted bigint) LANGUAGE plpgsql AS $$
DECLARE
    cutoff timestamptz := now() - make_interval(days => keep_days);
BEGIN
    IF keep_days < 1 THEN
        RAISE EXCEPTION 'keep_days must be at least 1 (got %)', keep_days;
    END IF;
    CREATE TEMP TABLE failures_gone ON COMMIT DROP AS
        SELECT id, stage_id, role, kind, cause, downtime_ms / 1000.0 AS gap_s FROM failures
        WHERE status <> 'recovering' AND recovered_at < cutoff AND COALESCE(closed_at, recovered_at) < cutoff;
    INSERT INTO failures_pruned AS p (stage_id, role, kind, cause, n)
        SELECT stage_id, role, kind, cause, count(*) FROM failures_gone GROUP BY 1, 2, 3, 4
        ON CONFLICT (stage_id, role, kind, cause) DO UPDATE SET n = p.n + EXCLUDED.n;
    INSERT INTO failure_gaps_pruned AS p (stage_id, role, le_s, n, sum_s)
        SELECT g.stage_id, g.role,
               COALESCE((SELECT min(b) FROM unnest(ARRAY[1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800]::float8[]) b
                         WHERE b >= g.gap_s), 'Infinity'),
               count(*), sum(g.gap_s)
        FROM failures_gone g WHERE g.gap_s IS NOT NULL GROUP BY 1, 2, 3
        ON CONFLICT (stage_id, role, le_s) DO UPDATE SET n = p.n + EXCLUDED.n, sum_s = p.sum_s + EXCLUDED.sum_s;
    target := 'failures';
    DELETE FROM failures f USING failures_gone g WHERE f.id = g.id;
    GET DIAGNOSTICS deleted = ROW_COUNT; RETURN NEXT;
    DROP TABLE failures_gone;

    target := 'deployments';
    WITH gone AS (
        DELETE FROM deployments d
        WHERE d.status IN ('stopped', 'failed', 'refused')
          AND COALESCE(d.stopped_at, d.started_at) < cutoff
          AND (d.status = 'refused' OR EXISTS (SELECT 1 FROM deployments n WHERE n.stage_id = d.stage_id
                                               AND n.role = d.role AND n.id > d.id AND n.status <> 'refused'))
          AND NOT EXISTS (SELECT 1 FROM reconfigurations r WHERE d.id IN (r.old_deployment_id, r.new_deployment_id)
                          AND (r.status IN ('pending', 'running') OR COALESCE(r.finished_at, r.requested_at) >= cutoff))
          AND NOT EXISTS (SELECT 1 FROM failures f WHERE d.id IN (f.deployment_id, f.recovery_deployment_id))
        RETURNING d.id)
    INSERT INTO deployments_pruned (id) SELECT id FROM gone;
    GET DIAGNOSTICS deleted = ROW_COUNT; RETURN NEXT;

    target := 'heartbeats';
    DELETE FROM heartbeats h USING deployments d
    WHERE d.id = h.deployment_id AND d.status NOT IN ('starting', 'running', 'stopping')
      AND COALESCE(d.stopped_at, d.started_at) < now() - interval '1 day';
    GET DIAGNOSTICS deleted = ROW_COUNT; RETURN NEXT;
END $$;
