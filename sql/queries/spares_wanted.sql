-- Stages that get a warm spare driver from the supervisor: a running primary, on a local pool or
-- a cluster pool (where the spare holds no executor while it waits). One spare per stage, whichever
-- of its replicas fails first takes it (they share their cores). `pool`: the run's pool settings.
-- `settled`: the run has been running for :settle_s; a spare is built only then, since building one
-- (a JVM, a warm-up) beside its first batches would slow them, as beside a recovery's catch-up.
SELECT d.stage_id, d.cores, p.master, d.config -> 'pool' AS pool,
       d.running_at <= now() - make_interval(secs => :settle_s) AS settled
FROM deployments d
JOIN pools p ON p.name = d.pool
JOIN stages s ON s.stage_id = d.stage_id
WHERE d.role = 'primary' AND d.status = 'running' AND s.health = 'ok'
ORDER BY d.stage_id
