-- What a new deployment of a stage is sized by (plan/start_size, execute/start_inputs): the
-- stage's latest primary run that reported batches, over the last :window_s seconds of them.
-- arrived_rows: rows taken by every batch after the window's first, plus what the backlog grew
-- by (rows that arrived and waited), over span_s: the input rate. busy_core_s: batch time × the
-- batch's cores, the denominator of DS2's true rate per core. rows_per_file: the latest batch's
-- backlog in rows over its backlog in files (the driver's own estimate; NULL for Kafka).
WITH last AS (
    SELECT m.deployment_id, m.ts
    FROM stage_metrics m JOIN deployments d ON d.id = m.deployment_id AND d.role = 'primary'
    WHERE m.stage_id = :stage_id
    ORDER BY m.ts DESC
    LIMIT 1
),
win AS (
    SELECT m.ts, m.input_rows, m.batch_duration_ms, m.cores, m.backlog_rows, m.backlog_files
    FROM stage_metrics m JOIN last l ON m.deployment_id = l.deployment_id
    WHERE m.stage_id = :stage_id AND m.ts > l.ts - make_interval(secs => :window_s) AND m.ts <= l.ts
),
ends AS (
    SELECT (SELECT w.backlog_rows FROM win w ORDER BY w.ts LIMIT 1) AS first_backlog,
           (SELECT w.backlog_rows FROM win w ORDER BY w.ts DESC LIMIT 1) AS last_backlog,
           (SELECT w.backlog_files FROM win w ORDER BY w.ts DESC LIMIT 1) AS last_backlog_files
)
SELECT count(*) AS batches,
       COALESCE(EXTRACT(EPOCH FROM max(w.ts) - min(w.ts)), 0)::float8 AS span_s,
       (COALESCE(sum(w.input_rows), 0) - COALESCE((SELECT x.input_rows FROM win x ORDER BY x.ts LIMIT 1), 0)
        + COALESCE(e.last_backlog - e.first_backlog, 0))::float8 AS arrived_rows,
       COALESCE(sum(w.input_rows), 0)::float8 AS input_rows,
       COALESCE(sum(w.batch_duration_ms / 1000.0 * COALESCE(w.cores, 1)), 0)::float8 AS busy_core_s,
       CASE WHEN e.last_backlog_files > 0 AND e.last_backlog > 0
            THEN e.last_backlog::float8 / e.last_backlog_files END AS rows_per_file,
       EXTRACT(EPOCH FROM now() - max(w.ts))::float8 AS age_s
FROM win w CROSS JOIN ends e
GROUP BY e.first_backlog, e.last_backlog, e.last_backlog_files
