-- The watchdog's view of every stage: the latest run of each of its replicas (the primary and
-- 'replica-N'; never a refused one), the pool's master (which launcher asks whether the driver
-- lives), the stage's health and how long the run has been silent (no heartbeat since it
-- started or ran), what its last beat said (its backlog, seconds since its last progress), and how
-- long the server has been up (a restart silenced every driver at once). `given_up_at`: when the
-- watchdog last gave up on the stage (a run that ended before it is already recorded).
-- `last_commit_at`: the stage's last output by any run, and `trigger_active` (a batch in flight at
-- the last beat), for its output gaps (execute/gaps.py).
SELECT DISTINCT ON (d.stage_id, d.role) d.*, p.master, s.app, s.health, s.health_reason, h.beat_at,
       h.info AS beat_info, h.trigger_active,
       (SELECT max(c.committed_at) FROM sink_commits c WHERE c.stage_id = d.stage_id) AS last_commit_at,
       EXTRACT(EPOCH FROM now() - COALESCE(h.beat_at, d.running_at, d.started_at)) AS silent_s,
       EXTRACT(EPOCH FROM now() - pg_postmaster_start_time()) AS server_up_s,
       (SELECT max(f.closed_at) FROM failures f WHERE f.stage_id = d.stage_id AND f.status = 'gave_up') AS given_up_at
FROM deployments d
JOIN stages s ON s.stage_id = d.stage_id
JOIN pools p ON p.name = d.pool
LEFT JOIN heartbeats h ON h.deployment_id = d.id
WHERE (d.role = 'primary' OR d.role LIKE 'replica-%') AND d.status <> 'refused'
ORDER BY d.stage_id, d.role, d.started_at DESC, d.id DESC
