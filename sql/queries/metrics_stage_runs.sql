-- The Prometheus exporter's per-run gauges (report/prometheus.py): one row per stage and role, for
-- the latest run of that role while it is live, and for each stage's latest primary run whatever
-- its state (a stopped or failed stage keeps its series, `running` 0, its heartbeat ageing).
-- Backlog: the run's latest batch of the last day; input rate: rows read in the last minute / 60
-- (`streamops status`'s in/s); p95: the latest batch with input in the last minute (none when idle);
-- executors: those the driver's latest heartbeat counted (a cluster pool; none in local mode);
-- source lag: a Kafka stage's records behind the topic's latest offsets at that batch (none for files).
WITH runs AS (
    SELECT DISTINCT ON (d.stage_id, d.role) d.*
    FROM deployments d WHERE d.status <> 'refused'
    ORDER BY d.stage_id, d.role, d.started_at DESC, d.id DESC
)
SELECT s.app, s.name AS stage, r.role, r.status = 'running' AS running, r.cores,
       CAST(h.info ->> 'executors' AS integer) AS executors,  -- live, from the beat; NULL in local mode
       b.backlog_rows, b.backlog_files, CAST(b.source_lag ->> 'records' AS bigint) AS source_lag_records,
       (SELECT sum(m.input_rows) / 60.0 FROM stage_metrics m
        WHERE m.stage_id = r.stage_id AND m.deployment_id = r.id AND m.ts > now() - interval '60 seconds') AS input_rps,
       (SELECT m.latency_p95_ms / 1000.0 FROM stage_metrics m
        WHERE m.stage_id = r.stage_id AND m.deployment_id = r.id AND m.ts > now() - interval '60 seconds'
          AND m.input_rows > 0
        ORDER BY m.ts DESC LIMIT 1) AS latency_p95_s,
       EXTRACT(EPOCH FROM now() - h.beat_at) AS heartbeat_age_s
FROM runs r
JOIN stages s ON s.stage_id = r.stage_id
LEFT JOIN heartbeats h ON h.deployment_id = r.id
LEFT JOIN LATERAL (
    SELECT m.backlog_rows, m.backlog_files, m.source_lag FROM stage_metrics m
    WHERE m.stage_id = r.stage_id AND m.deployment_id = r.id AND m.ts > now() - interval '1 day'
    ORDER BY m.ts DESC LIMIT 1
) b ON true
WHERE r.status IN ('starting', 'running', 'stopping') OR r.role = 'primary'
ORDER BY s.app, s.name, r.role
