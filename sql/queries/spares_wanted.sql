-- Stages that get a warm spare driver from the supervisor: a running primary, on a local pool or
-- a cluster pool (where the spare holds no executor while it waits). One spare per stage, whichever
-- of its replicas fails first takes it (they share their cores). `pool`: the run's pool settings.
-- `settled`: a spare is built only then, since building one (a JVM, a warm-up) beside a stage's
-- first batches or a recovery's catch-up slows them. A run is settled once it has run for
-- :settle_s and its last 5 batches kept up, each within its app's R_max (or without input) and
-- done within the trigger interval, or, caught up or not, once it has run for :settle_max_s: a
-- failover matters more than a slow catch-up.
-- Measured in fresh demos (2026-11-28): three spares built 20 s after their runs started, beside
-- batches whose p95 was 50-70 s under a load average of 22; then, gated on 3 batches within R_max,
-- taxi's spare was built 45 s in, while its batches overran the 4 s trigger (3.7-5.4 s), and
-- for the 80 s it took they ran 7-11 s.
SELECT d.stage_id, d.cores, p.master, d.config -> 'pool' AS pool,
       d.running_at <= now() - make_interval(secs => :settle_s)
       AND (d.running_at <= now() - make_interval(secs => :settle_max_s)
            OR (SELECT count(*) FILTER (WHERE (m.latency_p95_ms IS NULL OR m.latency_p95_ms <= a.r_max_ms)
                                          AND m.batch_duration_ms <= s.trigger_ms)
                FROM (SELECT latency_p95_ms, batch_duration_ms FROM stage_metrics
                      WHERE stage_id = d.stage_id AND ts >= d.running_at
                      ORDER BY ts DESC LIMIT 5) m) = 5) AS settled
FROM deployments d
JOIN pools p ON p.name = d.pool
JOIN stages s ON s.stage_id = d.stage_id
JOIN apps a ON a.name = s.app
WHERE d.role = 'primary' AND d.status = 'running' AND s.health = 'ok'
ORDER BY d.stage_id
