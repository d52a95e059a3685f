-- The seconds an app's error budget is counted in (budget_pass.py → plan/budget.py), per app of
-- :apps: seconds measured and seconds above R_max in three windows that end at :now: the short
-- and the long burn window (:short_s, :long_s, parallel to :apps; they may reach into yesterday)
-- and the period, the UTC day so far (the day the nightly report judges). No window reaches
-- before the app's apps.created_at; the second :now is in, not over yet, is in none.
--
-- As in sql/reports/10_sla.sql: the app's response in a 1-second window is the sum over its
-- stages of the p95 latency of the batch speaking for that second. A batch speaks for the
-- seconds from the one it started in for its trigger interval (COALESCE(trigger_interval_ms,
-- stages.trigger_ms)), or for its duration when it overran the trigger (Spark starts the next
-- batch as soon as it ends), rounded up to whole seconds, at most an hour. A second is measured when
-- every stage that reported in the window (spoke for a second of it) has a batch speaking for
-- it, and above when measured and the sum exceeds apps.r_max_ms. A batch without input (p95
-- NULL) speaks for its seconds with 0, as there.
-- Simplified, since this runs every re-plan cycle:
-- - where several batches of a stage speak for one second (several runs: replicas, an active
--   backup's overlap, an old and a new run; a sub-second trigger; a batch that started late),
--   the stage's figure is the lowest of their p95 (the fastest run's, batch by batch), where
--   10_sla.sql takes each run's mean by trigger weight and then the lowest;
-- - the day is counted incrementally: the seconds before slo_budgets.settled_to (today's, from
--   the last cycle) are its settled_measured_s and settled_above_s, kept; this cycle counts the
--   seconds since then (about the long window: settled_to moves to the long window's start),
--   each judged by the stages that reported since settled_to, where 10_sla.sql judges the whole
--   day by every stage that reported that day. Without today's row (the day's first cycle, a
--   re-plan that did not run for a while) it counts the day from 00:00 UTC (or the app's creation).
-- - a batch that started before the earliest second counted speaks for it only if it started
--   within its stage's registered trigger (stages.trigger_ms) of it (an overrunning one: no).
--
-- Cost: one index range of the batches since the earliest second counted, one row per stage
-- and second. Measured 2026-11-28 on the 2-core machine (embedded PostgreSQL 15, load average
-- 5–9 from other work), at 23:59:59 of a day of 1 s batches, in the re-plan's transaction
-- (windows_tuning.sql, then slo_seconds_settings.sql: JIT off), median of 5:
--   3 apps × 3 stages (777 591 rows): 53 ms a cycle (the last hour counted; 81 ms without
--   windows_tuning); 2.0 s when the day's whole 86 400 s are counted (no row for today yet);
--   10 apps × 3 stages (2.6 M rows): 0.23 s a cycle (0.44 s); 13 s for the whole day.
-- The whole day is counted once a day at most: at 00:00 UTC there is nothing to count yet, so
-- it costs that only when a re-plan starts late in a day with no row for it. The incremental
-- count and a recount of the whole day gave the same figures.
WITH params AS (
    SELECT p.app, p.short_s, p.long_s
    FROM unnest(CAST(:apps AS text[]), CAST(:short_s AS float8[]), CAST(:long_s AS float8[])) AS p(app, short_s, long_s)
),
clock AS MATERIALIZED (
    SELECT x.day_from, date_part('epoch', x.day_from) AS day_epoch,
           floor(date_part('epoch', CAST(:now AS timestamptz) - x.day_from))::int AS now_sec
    FROM (SELECT date_trunc('day', CAST(:now AS timestamptz), 'UTC') AS day_from) x
),
app_clock AS (
    -- per app, the first second of each window, in seconds since 00:00 UTC (negative: yesterday),
    -- and where today's settled seconds end
    SELECT a.name AS app, a.r_max_ms, c.now_sec,
           GREATEST(c.now_sec - ceil(p.short_s)::int, x.created_sec) AS short_from,
           GREATEST(c.now_sec - ceil(p.long_s)::int, x.created_sec) AS long_from,
           GREATEST(0, x.created_sec, floor(date_part('epoch', sb.settled_to) - c.day_epoch)::int) AS settled_sec,
           COALESCE(sb.settled_measured_s, 0) AS settled_measured_s, COALESCE(sb.settled_above_s, 0) AS settled_above_s
    FROM params p
    JOIN apps a ON a.name = p.app
    CROSS JOIN clock c
    CROSS JOIN LATERAL (SELECT floor(date_part('epoch', a.created_at) - c.day_epoch)::int AS created_sec) x
    LEFT JOIN slo_budgets sb ON sb.app = a.name AND sb.settled_to >= c.day_from
                            AND sb.settled_to <= CAST(:now AS timestamptz)
),
bounds AS MATERIALIZED (
    SELECT ac.*,
           LEAST(ac.long_from, ac.settled_sec) AS first_sec,  -- the earliest second counted
           GREATEST(ac.settled_sec, LEAST(ac.long_from, ac.now_sec)) AS new_settled_sec  -- settled after this cycle
    FROM app_clock ac
),
st AS MATERIALIZED (
    -- the apps' stages, numbered (integer keys hash cheaper than names below), and the last second
    -- each spoke for: its latest batch's hold (an index probe a stage)
    SELECT s.stage_id, s.app, s.trigger_ms, row_number() OVER (ORDER BY s.stage_id)::int AS sno,
           LEAST(floor(date_part('epoch', l.ts) - c.day_epoch)::int
                 + LEAST(3600, GREATEST(1, ceil(l.trigger_ms / float8 '1000')))::int, c.now_sec) - 1 AS last_w
    FROM bounds b
    JOIN stages s ON s.app = b.app
    CROSS JOIN clock c
    LEFT JOIN LATERAL (
        SELECT m.ts, GREATEST(COALESCE(m.trigger_interval_ms, s.trigger_ms), m.batch_duration_ms) AS trigger_ms
        FROM stage_metrics m
        WHERE m.stage_id = s.stage_id AND m.ts < CAST(:now AS timestamptz)
          AND m.ts >= c.day_from + make_interval(secs => b.first_sec - 3600)
        ORDER BY m.ts DESC LIMIT 1) l ON true
),
stage_seconds AS (
    -- per stage and second: the lowest p95 of the batches speaking for it; the batches are those
    -- since the earliest window's first second, less the stage's trigger
    SELECT x.sno, x.w, min(x.p95) AS p95
    FROM (
        SELECT st.sno, COALESCE(m.latency_p95_ms, 0) AS p95,
               generate_series(t.sec, t.sec + t.hold_s - 1) AS w
        FROM stage_metrics m
        JOIN st ON st.stage_id = m.stage_id
        CROSS JOIN clock c
        CROSS JOIN LATERAL (
            SELECT reporting.first_window(m.ts, c.day_epoch, COALESCE(m.trigger_interval_ms, st.trigger_ms),
                                          m.batch_duration_ms) AS sec,
                   reporting.hold_windows(m.ts, COALESCE(m.trigger_interval_ms, st.trigger_ms),
                                          m.batch_duration_ms) AS hold_s) t
        WHERE m.ts >= (SELECT min(cc.day_from) + make_interval(secs => min(bb.first_sec) - max(
                                  LEAST(3600, ceil(ss.trigger_ms / float8 '1000'))))
                       FROM clock cc CROSS JOIN bounds bb JOIN st ss ON ss.app = bb.app)
          AND m.ts < CAST(:now AS timestamptz)
    ) x
    CROSS JOIN clock c
    WHERE x.w < c.now_sec
    GROUP BY x.sno, x.w
),
app_seconds AS (
    SELECT st.app, s.w, sum(s.p95) AS response_ms, count(*) AS stages
    FROM stage_seconds s
    JOIN st ON st.sno = s.sno
    GROUP BY st.app, s.w
),
reported AS (
    -- per app and window: its stages that spoke for a second of it (the day's: since settled_to)
    SELECT b.app,
           count(*) FILTER (WHERE st.last_w >= b.short_from) AS n_short,
           count(*) FILTER (WHERE st.last_w >= b.long_from) AS n_long,
           count(*) FILTER (WHERE st.last_w >= b.settled_sec) AS n_day
    FROM bounds b
    JOIN st ON st.app = b.app
    GROUP BY b.app
),
counted AS (
    SELECT b.app,
           count(*) FILTER (WHERE s.w >= b.short_from AND s.stages = r.n_short) AS short_measured_s,
           count(*) FILTER (WHERE s.w >= b.short_from AND s.stages = r.n_short AND s.response_ms > b.r_max_ms)
               AS short_above_s,
           count(*) FILTER (WHERE s.w >= b.long_from AND s.stages = r.n_long) AS long_measured_s,
           count(*) FILTER (WHERE s.w >= b.long_from AND s.stages = r.n_long AND s.response_ms > b.r_max_ms)
               AS long_above_s,
           count(*) FILTER (WHERE s.w >= b.settled_sec AND s.stages = r.n_day) AS day_measured_s,
           count(*) FILTER (WHERE s.w >= b.settled_sec AND s.stages = r.n_day AND s.response_ms > b.r_max_ms)
               AS day_above_s,
           count(*) FILTER (WHERE s.w >= b.settled_sec AND s.w < b.new_settled_sec AND s.stages = r.n_day)
               AS settling_measured_s,
           count(*) FILTER (WHERE s.w >= b.settled_sec AND s.w < b.new_settled_sec AND s.stages = r.n_day
                              AND s.response_ms > b.r_max_ms) AS settling_above_s
    FROM bounds b
    LEFT JOIN reported r ON r.app = b.app
    LEFT JOIN app_seconds s ON s.app = b.app
    GROUP BY b.app
)
SELECT b.app, k.short_measured_s, k.short_above_s, k.long_measured_s, k.long_above_s,
       b.settled_measured_s + k.day_measured_s AS period_measured_s,
       b.settled_above_s + k.day_above_s AS period_above_s,
       c.day_from + make_interval(secs => b.new_settled_sec) AS settled_to,
       b.settled_measured_s + k.settling_measured_s AS settled_measured_s,
       b.settled_above_s + k.settling_above_s AS settled_above_s
FROM bounds b
JOIN counted k ON k.app = b.app
CROSS JOIN clock c
