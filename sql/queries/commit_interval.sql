-- The stage's own commit interval before :ts: the median gap between its primary runs' commits in
-- the minute before (NULL with fewer than two commits). Replicas commit the same batches too, so
-- they are left out.
WITH c AS (
    SELECT c.committed_at - lag(c.committed_at) OVER (ORDER BY c.committed_at) AS gap
    FROM sink_commits c
    JOIN deployments d ON d.id = c.deployment_id AND d.role = 'primary'
    WHERE c.stage_id = :stage_id
      AND c.committed_at > CAST(:ts AS timestamptz) - interval '60 seconds'
      AND c.committed_at <= CAST(:ts AS timestamptz)
)
SELECT (percentile_cont(0.5) WITHIN GROUP (ORDER BY EXTRACT(EPOCH FROM gap) * 1000))::float8
FROM c WHERE gap IS NOT NULL
