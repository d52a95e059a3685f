-- Retention of the run ledger (issue 44 item 12): heartbeats, deployments and failures grew for ever.
--
-- Prometheus counts failures and their output gaps from the first row (report/prometheus.py); a
-- count that fell would read as a reset plus a burst. What retention deletes is tallied here and
-- added back by metrics_failures.sql and metrics_output_gaps.sql, so those counters never fall.
CREATE TABLE failures_pruned (
    stage_id  text NOT NULL REFERENCES stages (stage_id) ON DELETE CASCADE,
    role      text NOT NULL,
    kind      text NOT NULL,
    cause     text NOT NULL,
    n         bigint NOT NULL,
    PRIMARY KEY (stage_id, role, kind, cause)
);
-- Gaps by the exporter's bucket (prometheus.GAP_BUCKETS_S; the same ladder below): bounded rows.
CREATE TABLE failure_gaps_pruned (
    stage_id  text NOT NULL REFERENCES stages (stage_id) ON DELETE CASCADE,
    role      text NOT NULL,
    le_s      double precision NOT NULL,  -- the smallest bound at least the gap; 'Infinity' beyond the last
    n         bigint NOT NULL,
    sum_s     double precision NOT NULL,
    PRIMARY KEY (stage_id, role, le_s)
);

-- Rows of runs that ended before `now() - keep_days` (the metrics' window: no report of a kept day
-- reads them), in dependency order:
-- - failures closed with their gap ended before the cutoff (an open one, or one given up and not yet
--   repaired, is down "until now" for the reports and stays);
-- - deployments ended before the cutoff, except each stage's latest run per role (a restart resumes
--   its checkpoint, gc keeps it, and fencing compares against it), a run a pending or running
--   reconfiguration names, a reconfiguration of the window names, or a failure still kept names;
-- - heartbeats of runs ended over a day ago (one row a run; the watchdog reads only the latest run's).
CREATE FUNCTION runs_retention(keep_days integer)
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
    DELETE FROM deployments d
    WHERE d.status IN ('stopped', 'failed', 'refused')
      AND COALESCE(d.stopped_at, d.started_at) < cutoff
      AND (d.status = 'refused' OR EXISTS (SELECT 1 FROM deployments n WHERE n.stage_id = d.stage_id
                                           AND n.role = d.role AND n.id > d.id AND n.status <> 'refused'))
      AND NOT EXISTS (SELECT 1 FROM reconfigurations r WHERE d.id IN (r.old_deployment_id, r.new_deployment_id)
                      AND (r.status IN ('pending', 'running') OR COALESCE(r.finished_at, r.requested_at) >= cutoff))
      AND NOT EXISTS (SELECT 1 FROM failures f WHERE d.id IN (f.deployment_id, f.recovery_deployment_id));
    GET DIAGNOSTICS deleted = ROW_COUNT; RETURN NEXT;

    target := 'heartbeats';
    DELETE FROM heartbeats h USING deployments d
    WHERE d.id = h.deployment_id AND d.status NOT IN ('starting', 'running', 'stopping')
      AND COALESCE(d.stopped_at, d.started_at) < now() - interval '1 day';
    GET DIAGNOSTICS deleted = ROW_COUNT; RETURN NEXT;
END $$;
