-- Every live stage's recent window, aggregated in one set-based pass (no query per stage).
-- The window is the last window_s seconds before :now, minus the stabilization period after
-- the stage last settled: its run's start, or the end of its last reconfiguration (a live
-- change keeps the run, but the metrics before it describe a configuration that is gone; a
-- cancelled one changed nothing).
-- While a change is pending or running there is no window. span_s says how much of the window
-- that leaves. A stage's policy params may set window_s, stabilization_s and recent_s; :window_s,
-- :stab_s and :recent_s are the defaults. recent_arrival_rps is the rows arriving (processed +
-- the backlog's slope) over the window's last recent_s only: a surge shows in it within seconds.
WITH live AS (
    SELECT DISTINCT ON (d.stage_id)
           d.stage_id, d.id AS deployment_id, d.pool, d.cores, d.state_partitions,
           CASE WHEN EXISTS (SELECT 1 FROM reconfigurations r
                             WHERE r.stage_id = d.stage_id AND r.status IN ('pending', 'running'))
                THEN CAST(:now AS timestamptz)  -- the window starts after the change
                ELSE GREATEST(COALESCE(d.running_at, d.started_at),
                              (SELECT max(r.finished_at) FROM reconfigurations r
                               WHERE r.stage_id = d.stage_id AND r.status <> 'cancelled'))
           END AS settled_at
    FROM deployments d
    WHERE d.status = 'running' AND d.role = 'primary'
    ORDER BY d.stage_id, d.started_at DESC
),
params AS (
    SELECT l.*, s.app, s.min_cores, s.max_cores, s.spec -> 'policy' AS policy,
           CAST(s.spec -> 'source' ->> 'min_partitions' AS integer) AS min_partitions,
           COALESCE((s.spec -> 'policy' -> 'params' ->> 'window_s')::float8, :window_s) AS window_s,
           COALESCE((s.spec -> 'policy' -> 'params' ->> 'stabilization_s')::float8, :stab_s) AS stab_s,
           COALESCE((s.spec -> 'policy' -> 'params' ->> 'recent_s')::float8, :recent_s) AS recent_s
    FROM live l JOIN stages s USING (stage_id)
    WHERE (CAST(:app AS text) IS NULL OR s.app = CAST(:app AS text))
      AND (CAST(:stage AS text) IS NULL OR s.stage_id = CAST(:stage AS text))
),
bounds AS (
    SELECT p.*, GREATEST(CAST(:now AS timestamptz) - make_interval(secs => p.window_s),
                         p.settled_at + make_interval(secs => p.stab_s)) AS since
    FROM params p
),
spans AS (
    SELECT b.*, GREATEST(b.since, CAST(:now AS timestamptz) - make_interval(secs => b.recent_s)) AS recent_since
    FROM bounds b
),
recent AS (
    -- One index-only range scan of stage_metrics_recent over the longest window in use. The
    -- bound is a constant (:floor, from window_floor.sql) so that the planner estimates the
    -- rows and chooses a hash aggregate instead of sorting them.
    SELECT m.stage_id, m.deployment_id, m.ts, m.input_rows, m.batch_duration_ms, m.backlog_rows,
           m.latency_p95_ms, m.state_bytes
    FROM stage_metrics m
    WHERE m.ts > CAST(:floor AS timestamptz) AND m.ts <= CAST(:now AS timestamptz)
),
agg AS (
    SELECT b.stage_id,
           count(*)                                                        AS batches,
           sum(r.input_rows)                                               AS input_rows,
           sum(r.batch_duration_ms)::float8                                AS busy_ms,
           -- the backlog of the latest batch, without sorting: arrays compare element-wise
           (max(ARRAY[date_part('epoch', r.ts), r.backlog_rows::float8]))[2] AS backlog_rows,
           regr_slope(r.backlog_rows, date_part('epoch', r.ts))            AS backlog_growth_rps,
           max(r.latency_p95_ms)                                           AS latency_p95_ms,
           avg(r.latency_p95_ms)                                           AS latency_avg_p95_ms,
           avg(r.state_bytes)::float8                                      AS state_bytes,
           sum(r.input_rows) FILTER (WHERE r.ts > b.recent_since)           AS recent_rows,
           regr_slope(r.backlog_rows, date_part('epoch', r.ts)) FILTER (WHERE r.ts > b.recent_since)
                                                                           AS recent_growth_rps
    FROM spans b
    JOIN recent r ON r.stage_id = b.stage_id AND r.deployment_id = b.deployment_id AND r.ts > b.since
    GROUP BY b.stage_id
)
SELECT b.stage_id, b.app, b.pool, b.cores, b.min_cores, b.max_cores, b.state_partitions, b.policy,
       -- a Kafka stage's partitions, as its driver last reported them (NULL for files)
       b.min_partitions, CAST(h.info ->> 'source_partitions' AS integer) AS source_partitions,
       GREATEST(0, EXTRACT(EPOCH FROM CAST(:now AS timestamptz) - b.since))::float8 AS span_s,
       COALESCE(a.batches, 0) AS batches, COALESCE(a.input_rows, 0) AS input_rows,
       COALESCE(a.busy_ms, 0) AS busy_ms, COALESCE(a.backlog_rows, 0) AS backlog_rows,
       COALESCE(a.backlog_growth_rps, 0)::float8 AS backlog_growth_rps,
       a.latency_p95_ms, a.latency_avg_p95_ms, COALESCE(a.state_bytes, 0) AS state_bytes,
       CASE WHEN a.recent_rows IS NOT NULL AND CAST(:now AS timestamptz) > b.recent_since
            THEN a.recent_rows / EXTRACT(EPOCH FROM CAST(:now AS timestamptz) - b.recent_since)::float8
                 + COALESCE(a.recent_growth_rps, 0)
       END AS recent_arrival_rps
FROM spans b LEFT JOIN agg a USING (stage_id)
LEFT JOIN heartbeats h ON h.deployment_id = b.deployment_id
