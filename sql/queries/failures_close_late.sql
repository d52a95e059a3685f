-- Failures still open although their replica runs again and has committed since: a restart that
-- produced its first output after the recovery stopped waiting for it (or a run started by someone
-- else). Closed at that run's first commit after the failure, measured as failure_recovered does;
-- left open, the report would count the stage as down from the failure on.
WITH late AS (
    SELECT f.id, d.id AS deployment_id,
           (SELECT min(c.committed_at) FROM sink_commits c
            WHERE c.deployment_id = d.id AND c.committed_at > f.failed_at) AS at,
           (SELECT min(c.committed_at) FROM sink_commits c
            WHERE c.stage_id = f.stage_id AND c.committed_at > f.failed_at
              AND c.deployment_id IS DISTINCT FROM f.deployment_id) AS other
    FROM failures f
    CROSS JOIN LATERAL (SELECT id FROM deployments
                        WHERE stage_id = f.stage_id AND role = f.role AND status <> 'refused'
                        ORDER BY started_at DESC, id DESC LIMIT 1) d
    WHERE f.status = 'recovering' AND d.id IS DISTINCT FROM f.deployment_id
)
UPDATE failures f SET status = 'recovered', closed_at = now(), recovered_at = l.at,
       mttr_ms = EXTRACT(EPOCH FROM l.at - f.failed_at) * 1000,
       downtime_ms = EXTRACT(EPOCH FROM LEAST(l.at, COALESCE(l.other, l.at))
                                        - COALESCE(f.last_commit_at, f.failed_at)) * 1000,
       recovery_deployment_id = l.deployment_id
FROM late l
WHERE f.id = l.id AND l.at IS NOT NULL AND f.status = 'recovering'
RETURNING f.id, f.stage_id, f.role, f.mttr_ms
