-- Every live stage's recent window, aggregated in one set-based pass (no query per stage).
-- The window is the last window_s seconds before :now, minus the stabilization period after
-- the run started; span_s says how much of the window that leaves. A stage's policy params
-- may set window_s and stabilization_s; :window_s and :stab_s are the defaults.
WITH live AS (
    SELECT DISTINCT ON (d.stage_id)
           d.stage_id, d.id AS deployment_id, d.pool, d.cores, d.state_partitions,
           COALESCE(d.running_at, d.started_at) AS running_at
    FROM deployments d
    WHERE d.status = 'running' AND d.role = 'primary'
    ORDER BY d.stage_id, d.started_at DESC
),
params AS (
    SELECT l.*, s.app, s.min_cores, s.max_cores, s.spec -> 'policy' AS policy,
           COALESCE((s.spec -> 'policy' -> 'params' ->> 'window_s')::float8, :window_s) AS window_s,
           COALESCE((s.spec -> 'policy' -> 'params' ->> 'stabilization_s')::float8, :stab_s) AS stab_s
    FROM live l JOIN stages s USING (stage_id)
    WHERE (CAST(:app AS text) IS NULL OR s.app = CAST(:app AS text))
      AND (CAST(:stage AS text) IS NULL OR s.stage_id = CAST(:stage AS text))
),
bounds AS (
    SELECT p.*, GREATEST(CAST(:now AS timestamptz) - make_interval(secs => p.window_s),
                         p.running_at + make_interval(secs => p.stab_s)) AS since
    FROM params p
)
SELECT b.stage_id, b.app, b.pool, b.cores, b.min_cores, b.max_cores, b.state_partitions, b.policy,
       GREATEST(0, EXTRACT(EPOCH FROM CAST(:now AS timestamptz) - b.since))::float8 AS span_s,
       count(m.ts)                                                     AS batches,
       COALESCE(sum(m.input_rows), 0)                                  AS input_rows,
       COALESCE(sum(m.batch_duration_ms), 0)::float8                   AS busy_ms,
       COALESCE((array_agg(m.backlog_rows ORDER BY m.ts DESC))[1], 0)::float8 AS backlog_rows,
       COALESCE(regr_slope(m.backlog_rows, EXTRACT(EPOCH FROM m.ts)), 0)::float8 AS backlog_growth_rps,
       max(m.latency_p95_ms)                                           AS latency_p95_ms,
       avg(m.latency_p95_ms)                                           AS latency_avg_p95_ms,
       COALESCE(avg(m.state_bytes), 0)::float8                         AS state_bytes
FROM bounds b
LEFT JOIN stage_metrics m
       ON m.stage_id = b.stage_id AND m.deployment_id = b.deployment_id
      AND m.ts > b.since AND m.ts <= CAST(:now AS timestamptz)
      -- a constant bound as well, so that PostgreSQL prunes the daily partitions
      AND m.ts > CAST(:now AS timestamptz) - make_interval(secs => :max_window_s)
GROUP BY b.stage_id, b.app, b.pool, b.cores, b.min_cores, b.max_cores, b.state_partitions, b.policy, b.since
