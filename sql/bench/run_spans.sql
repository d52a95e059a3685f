-- Each admitted run's cores and span (still running: up to b).
SELECT cores, COALESCE(running_at, started_at) AS a, COALESCE(stopped_at, :b) AS z FROM deployments
WHERE status <> 'refused'
