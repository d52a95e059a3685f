-- A given-up failure's downtime ends at the first commit of any later run of its stage (a repair:
-- a redeploy, a start by hand). It stays `gave_up` (the watchdog did not recover it, and no MTTR is
-- set), but recovered_at ends its gap and the app's time in service; left open, it counted as
-- downtime for ever.
WITH repaired AS (
    SELECT f.id, c.deployment_id, c.committed_at AS at
    FROM failures f
    CROSS JOIN LATERAL (
        SELECT c.deployment_id, c.committed_at FROM sink_commits c
        WHERE c.stage_id = f.stage_id AND c.committed_at > f.failed_at
          AND c.deployment_id > COALESCE(f.deployment_id, 0)
        ORDER BY c.committed_at LIMIT 1) c
    WHERE f.status = 'gave_up' AND f.recovered_at IS NULL
)
UPDATE failures f SET recovered_at = r.at, recovery_deployment_id = r.deployment_id,
       downtime_ms = EXTRACT(EPOCH FROM r.at - COALESCE(f.last_commit_at, f.failed_at)) * 1000
FROM repaired r
WHERE f.id = r.id AND f.recovered_at IS NULL
RETURNING f.id, f.stage_id, f.role, f.downtime_ms
