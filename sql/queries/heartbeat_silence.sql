-- How long a run has been silent (no heartbeat since it started or ran), what its last beat said,
-- and how long the server has been up: re-read under the stage lock, just before a hung or
-- stalled driver is killed.
SELECT EXTRACT(EPOCH FROM now() - COALESCE(h.beat_at, d.running_at, d.started_at)) AS silent_s, h.info AS beat_info,
       EXTRACT(EPOCH FROM now() - pg_postmaster_start_time()) AS server_up_s
FROM deployments d
LEFT JOIN heartbeats h ON h.deployment_id = d.id
WHERE d.id = :deployment_id
