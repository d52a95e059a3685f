-- The seconds an app's error budget is counted in (budget_pass.py → plan/budget.py), per app of
-- :apps: seconds measured and seconds above R_max in three windows that end at :now: the short
-- and the long burn window (:short_s, :long_s, parallel to :apps; they may reach into yesterday)
-- and the period, the UTC day so far (the day the nightly report judges). No window reaches
-- before the app's apps.created_at; the second :now is in, not over yet, is in none.
--
-- As in sql/reports/10_sla.sql: the app's response in a 1-second window is the sum over its
-- stages of the p95 latency of the batch speaking for that second. A batch speaks for the
-- seconds from the one it started in for its trigger interval (COALESCE(trigger_interval_ms,
-- stages.trigger_ms), rounded up to whole seconds, at most an hour). A second is measured when
-- every stage that reported in the window (spoke for a second of it) has a batch speaking for
-- it, and above when measured and the sum exceeds apps.r_max_ms. A batch without input (p95
-- NULL) speaks for its seconds with 0, as there.
-- Simplified, since this runs every re-plan cycle: where several batches of a stage speak for
-- one second (several runs: replicas, an active backup's overlap, an old and a new run; a
-- sub-second trigger; a batch that started late), the stage's figure is the lowest of their p95
-- (the fastest run's, batch by batch), where 10_sla.sql takes each run's mean by trigger weight
-- and then the lowest. A batch that started before the earliest window speaks for it only if it
-- started within its stage's registered trigger (stages.trigger_ms) of it.
--
-- Cost: one scan of the windows' batches (the day's partition so far, and yesterday's last hour
-- after midnight), one row per stage and second. Measured on a full day (the last second of
-- it) of 1 s batches, the embedded PostgreSQL 15 on the 2-core machine, in the re-plan's
-- transaction (windows_tuning.sql's work_mem, hash aggregates): see docs/policies.md §14.3.
-- MEASURED_FIGURE
WITH params AS (
    SELECT p.app, p.short_s, p.long_s
    FROM unnest(CAST(:apps AS text[]), CAST(:short_s AS float8[]), CAST(:long_s AS float8[])) AS p(app, short_s, long_s)
),
clock AS MATERIALIZED (
    SELECT x.day_from, date_part('epoch', x.day_from) AS day_epoch,
           floor(date_part('epoch', CAST(:now AS timestamptz) - x.day_from))::int AS now_sec
    FROM (SELECT date_trunc('day', CAST(:now AS timestamptz), 'UTC') AS day_from) x
),
bounds AS MATERIALIZED (
    -- per app, the first second of each window, in seconds since 00:00 UTC (negative: yesterday)
    SELECT a.name AS app, a.r_max_ms,
           GREATEST(c.now_sec - ceil(p.short_s)::int, x.created_sec) AS short_from,
           GREATEST(c.now_sec - ceil(p.long_s)::int, x.created_sec) AS long_from,
           GREATEST(0, x.created_sec) AS period_from,
           LEAST(c.now_sec - ceil(p.long_s)::int, 0) AS first_sec,  -- the earliest of the three, created or not
           c.now_sec
    FROM params p
    JOIN apps a ON a.name = p.app
    CROSS JOIN clock c
    CROSS JOIN LATERAL (SELECT floor(date_part('epoch', a.created_at) - c.day_epoch)::int AS created_sec) x
),
batches AS MATERIALIZED (
    -- the batches that may speak for a second of a window: one range of the (ts) index
    SELECT b.app, m.stage_id, b.first_sec, b.now_sec,
           floor(date_part('epoch', m.ts) - c.day_epoch)::int AS sec,
           LEAST(3600, ceil(COALESCE(m.trigger_interval_ms, s.trigger_ms) / float8 '1000'))::int AS hold_s,
           COALESCE(m.latency_p95_ms, 0) AS p95
    FROM stage_metrics m
    JOIN stages s ON s.stage_id = m.stage_id
    JOIN bounds b ON b.app = s.app
    CROSS JOIN clock c
    WHERE m.ts >= (SELECT min(cc.day_from) + make_interval(secs => min(bb.first_sec) - max(
                              LEAST(3600, ceil(ss.trigger_ms / float8 '1000'))))
                   FROM clock cc CROSS JOIN bounds bb JOIN stages ss ON ss.app = bb.app)
      AND m.ts < CAST(:now AS timestamptz)
),
stage_seconds AS (
    -- per stage and second: the lowest p95 of the batches speaking for it
    SELECT x.app, x.stage_id, x.w, min(x.p95) AS p95
    FROM (SELECT app, stage_id, p95, first_sec, now_sec, generate_series(sec, sec + hold_s - 1) AS w
          FROM batches) x
    WHERE x.w >= x.first_sec AND x.w < x.now_sec
    GROUP BY x.app, x.stage_id, x.w
),
app_seconds AS (
    SELECT app, w, sum(p95) AS response_ms, count(*) AS stages
    FROM stage_seconds
    GROUP BY app, w
),
reported AS (
    -- per app and window: its stages that spoke for a second of it (their last such second)
    SELECT b.app,
           count(*) FILTER (WHERE l.last_w >= b.short_from) AS n_short,
           count(*) FILTER (WHERE l.last_w >= b.long_from) AS n_long,
           count(*) FILTER (WHERE l.last_w >= b.period_from) AS n_period
    FROM bounds b
    JOIN (SELECT app, stage_id, LEAST(max(sec + hold_s), min(now_sec)) - 1 AS last_w
          FROM batches GROUP BY app, stage_id) l ON l.app = b.app
    GROUP BY b.app
)
SELECT b.app,
       count(*) FILTER (WHERE s.w >= b.short_from AND s.stages = r.n_short)                            AS short_measured_s,
       count(*) FILTER (WHERE s.w >= b.short_from AND s.stages = r.n_short AND s.response_ms > b.r_max_ms)  AS short_above_s,
       count(*) FILTER (WHERE s.w >= b.long_from AND s.stages = r.n_long)                              AS long_measured_s,
       count(*) FILTER (WHERE s.w >= b.long_from AND s.stages = r.n_long AND s.response_ms > b.r_max_ms)    AS long_above_s,
       count(*) FILTER (WHERE s.w >= b.period_from AND s.stages = r.n_period)                          AS period_measured_s,
       count(*) FILTER (WHERE s.w >= b.period_from AND s.stages = r.n_period AND s.response_ms > b.r_max_ms) AS period_above_s
FROM bounds b
LEFT JOIN reported r ON r.app = b.app
LEFT JOIN app_seconds s ON s.app = b.app
GROUP BY b.app
ORDER BY b.app
