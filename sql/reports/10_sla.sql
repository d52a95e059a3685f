-- SLA per app and day.
--
-- The app's response time at a 1-second window w is the sum over its stages of each stage's
-- p95 latency (the critical path of a chain, as control.app_response_ms computes it). A batch
-- speaks for its stage in the windows from the one nearest its start (`reporting.first_window`)
-- for its trigger interval, or for its duration when it overran the trigger (Spark starts the
-- next batch as soon as it ends), up to the one the next batch starts in (`hold_windows`); a
-- stage with a sub-second trigger has several batches in the window they started in and counts
-- with their mean. A window counts as measured when every stage of the app
-- that reported that day has a batch speaking for it; unmeasured time (the app down, stopped,
-- starting) counts neither as within nor as above R_max. Until issue 48, an overrunning batch
-- spoke for its trigger interval only: a demo's taxi stage, whose batches took 3.2-3.7 s
-- (median) on a 4 s trigger, had 260 s of 30 minutes unmeasured, counted as not within R_max.
-- The p90 of a batch is interpolated between its p50 and p95 (a batch reports no p90); a
-- window is violated when the sum of its stages' p90 exceeds R_max, as in [002] and the
-- simulator (sim/report.py).
--
-- Several runs of a stage (replicas 'replica-N' beside the primary, an active backup's
-- 'secondary' overlap, an old and a new run meeting in one window) each write their own batches
-- (stage_metrics.deployment_id) to the same version-guarded sink, whose output is that of the run
-- ahead. So a stage's figure in a window is its fastest run's: each run's mean (by trigger
-- weight) of its batches speaking for the window, then the lowest of them, the p95 and the p90
-- each (as ha_windows_daily takes the lowest p90, 60_ha.sql); the stage speaks for the window
-- as fully as its most complete run. Batches and batches_within count every run's batches.
-- Stages with one run that day go through the one-pass aggregate of `starts`, unchanged; the
-- others through `multi_windows`, grouped per stage and window (costlier: see docs/reporting.md).
CREATE FUNCTION reporting.sla_for_day(p_day date)
RETURNS TABLE (
    day date, app text, r_max_ms integer, observed_s double precision, measured_s bigint,
    seconds_within_rmax bigint, share_within_rmax double precision,
    batches bigint, batches_within_slo bigint, share_batches_within_slo double precision,
    violated_windows bigint,
    response_p50_ms double precision, response_p95_ms double precision, response_p99_ms double precision)
LANGUAGE plpgsql STABLE PARALLEL SAFE SECURITY DEFINER
SET search_path = pg_catalog, public
SET work_mem = '256MB'  -- the per-second hash aggregate (apps × 86 400 groups) stays in memory;
                        -- that of stages with several runs (stages × 86 400) spills beyond ~20 of them
SET jit = off           -- compiling costs more than it saves at this size
SET enable_sort = off   -- hash aggregates: the planner cannot estimate groups of per-second expressions
SET enable_incremental_sort = off
-- The day's scan, join and first aggregate run in parallel workers, each pre-aggregating its share
-- (measured 7.0 s -> 5.9 s at 100 stages on 2 cores). The planner would not choose it: it
-- estimates as many per-second groups as rows, so shipping partial groups looks costly.
SET parallel_setup_cost = 0
SET parallel_tuple_cost = 0
AS $$
#variable_conflict use_column
DECLARE
    -- Plain variables become constants in the query's plan: the planner prunes stage_metrics to
    -- the day's partition, and evaluates the casts once instead of once per row.
    day_from constant timestamptz := p_day::timestamptz;
    day_to constant timestamptz := (p_day + 1)::timestamptz;
    epoch0 constant float8 := date_part('epoch', p_day::timestamptz);
    -- The stages with more than one run (any role, not refused) overlapping the day; a stage's
    -- place in this array is its number in `multi_windows`. A constant too, so that the day's
    -- scan can filter on it in parallel workers (a subquery per stage there would keep the
    -- joins and the first aggregate out of them).
    multi_stages text[];
BEGIN
    multi_stages := ARRAY(
        SELECT s.stage_id FROM stages s
        WHERE (SELECT count(*) FROM deployments d
               WHERE d.stage_id = s.stage_id AND d.status <> 'refused' AND d.started_at < day_to
                 AND (d.stopped_at IS NULL OR d.stopped_at > day_from)) > 1
        ORDER BY s.stage_id);
    RETURN QUERY
    WITH obs AS (
        SELECT o.app, o.r_max_ms, o.obs_from, o.obs_to, o.observed_s,
               floor(date_part('epoch', o.obs_from) - epoch0)::int AS from_sec,
               ceil(date_part('epoch', o.obs_to) - epoch0)::int AS to_sec
        FROM reporting.observed_for_day(p_day) o
    ),
    st AS MATERIALIZED (
        -- from the tables themselves (not `obs`), so that the planner knows how few rows these are;
        -- sno: the stage's number among those with several runs (NULL: one run)
        SELECT s.stage_id, s.app, s.trigger_ms, a.r_max_ms, array_position(multi_stages, s.stage_id) AS sno,
               GREATEST(day_from, a.created_at) AS obs_from, LEAST(day_to, now()) AS obs_to
        FROM stages s JOIN apps a ON a.name = s.app
        WHERE a.created_at < day_to AND day_from < now()
    ),
    params AS MATERIALIZED (
        -- per app: its bound, its observed seconds, and how many stages reported while observed
        -- (an index probe each)
        SELECT o.app, o.r_max_ms, o.from_sec, o.to_sec,
               (SELECT count(*) FROM st
                WHERE st.app = o.app
                  AND EXISTS (SELECT 1 FROM stage_metrics m
                              WHERE m.stage_id = st.stage_id AND m.ts >= st.obs_from AND m.ts < st.obs_to)) AS n_stages
        FROM obs o
    ),
    starts AS (
        -- One pass over the day's partition: per app, second a batch started in, and hold (how
        -- many windows a batch speaks for), the weighted sums. Few groups: a hash aggregate.
        -- Stages with one run that day only: the others' runs are told apart in `multi_windows`.
        SELECT st.app, reporting.first_window(m.ts, epoch0, COALESCE(m.trigger_interval_ms, st.trigger_ms), m.batch_duration_ms) AS sec,
               reporting.hold_windows(m.ts, COALESCE(m.trigger_interval_ms, st.trigger_ms), m.batch_duration_ms) AS hold_s,
               sum(m.latency_p95_ms * w.wt) AS p95,
               sum(COALESCE(m.latency_p50_ms + (m.latency_p95_ms - m.latency_p50_ms) * float8 '0.8888888888888889',
                            m.latency_p95_ms) * w.wt) AS p90,
               sum(w.wt) AS stages,
               count(*) AS batches,
               count(*) FILTER (WHERE m.latency_p95_ms <= st.r_max_ms) AS batches_within
        FROM stage_metrics m
        -- the tables again rather than `st`: a CTE scan would keep this out of parallel workers
        JOIN (SELECT s.stage_id, s.app, s.trigger_ms, a.r_max_ms, GREATEST(day_from, a.created_at) AS obs_from
              FROM stages s JOIN apps a ON a.name = s.app
              WHERE s.stage_id <> ALL (multi_stages)) st ON st.stage_id = m.stage_id
        CROSS JOIN LATERAL (SELECT LEAST(float8 '1', GREATEST(COALESCE(m.trigger_interval_ms, st.trigger_ms), m.batch_duration_ms) / float8 '1000') AS wt) w
        WHERE m.ts >= day_from AND m.ts < day_to
          AND m.ts >= st.obs_from AND m.ts < LEAST(day_to, now())
        GROUP BY 1, 2, 3
    ),
    multi_windows AS (
        -- Stages with several runs that day (their rows only), per stage and window. Where no run
        -- has two batches speaking for the window, a run's mean is its batch's figure and the
        -- stage's is the lowest batch's: `one_each` (a bit per run, deployment_id mod 64, in a mask;
        -- two runs that share a bit only take the exact way below). The set-returning function in
        -- the target list costs less than a lateral one per row.
        SELECT y.sno, y.w,
               min(y.p95) AS p95, min(y.p90) AS p90, max(y.wt) AS wt, max(y.hold_s) AS max_hold_s,
               count(*) = bit_count(bit_or(y.run_bit)::bit(64)) AS one_each,
               count(*) FILTER (WHERE y.w = y.sec) AS batches,
               count(*) FILTER (WHERE y.w = y.sec AND y.p95 <= y.r_max_ms) AS batches_within
        FROM (
            SELECT st.sno, st.r_max_ms, x.sec, x.hold_s, x.wt, m.latency_p95_ms AS p95, x.p90,
                   int8 '1' << (COALESCE(m.deployment_id, 0) & 63)::int AS run_bit,
                   generate_series(x.sec, x.sec + x.hold_s - 1) AS w
            FROM stage_metrics m
            -- the tables, not `st`, as in `starts`
            JOIN (SELECT s.stage_id, array_position(multi_stages, s.stage_id) AS sno, s.trigger_ms, a.r_max_ms,
                         GREATEST(day_from, a.created_at) AS obs_from
                  FROM stages s JOIN apps a ON a.name = s.app
                  WHERE s.stage_id = ANY (multi_stages)) st ON st.stage_id = m.stage_id
            CROSS JOIN LATERAL (
                SELECT reporting.first_window(m.ts, epoch0, COALESCE(m.trigger_interval_ms, st.trigger_ms), m.batch_duration_ms) AS sec,
                       reporting.hold_windows(m.ts, COALESCE(m.trigger_interval_ms, st.trigger_ms), m.batch_duration_ms) AS hold_s,
                       LEAST(float8 '1', GREATEST(COALESCE(m.trigger_interval_ms, st.trigger_ms), m.batch_duration_ms) / float8 '1000') AS wt,
                       COALESCE(m.latency_p50_ms + (m.latency_p95_ms - m.latency_p50_ms) * float8 '0.8888888888888889',
                                m.latency_p95_ms) AS p90
            ) x
            WHERE m.ts >= day_from AND m.ts < day_to
              AND m.ts >= st.obs_from AND m.ts < LEAST(day_to, now())
        ) y
        GROUP BY y.sno, y.w
    ),
    per_window AS (
        -- spread each group over the windows its batches speak for (sums commute with this), and
        -- add the stages with several runs, each as its fastest run
        SELECT g.app, g.w,
               sum(g.p95) AS response_ms, sum(g.p90) AS p90_ms, sum(g.stages) AS stages,
               sum(g.batches) AS batches, sum(g.batches_within) AS batches_within
        FROM (
            SELECT g.app, g.sec + k AS w, g.p95, g.p90, g.stages,
                   CASE WHEN k = 0 THEN g.batches END AS batches,
                   CASE WHEN k = 0 THEN g.batches_within END AS batches_within
            FROM starts g
            CROSS JOIN LATERAL generate_series(0, g.hold_s - 1) k
            UNION ALL
            SELECT z.app, z.w,
                   CASE WHEN z.one_each THEN z.p95 ELSE z.exact[1] END,
                   CASE WHEN z.one_each THEN z.p90 ELSE z.exact[2] END,
                   CASE WHEN z.one_each THEN z.wt ELSE z.exact[3] END,
                   z.batches, z.batches_within
            FROM (
                SELECT st.app, mw.w, mw.one_each, mw.p95, mw.p90, mw.wt, mw.batches, mw.batches_within,
                       -- A window where a run has several batches (a sub-second trigger, a batch
                       -- overrunning its trigger): each run's mean by trigger weight, and its weight,
                       -- from the batches speaking for the window (an index probe: they started in
                       -- the max_hold_s seconds up to it); the lowest mean, the largest weight. The
                       -- subquery runs for these windows only.
                       CASE WHEN NOT mw.one_each THEN (
                           SELECT ARRAY[min(r.p95), min(r.p90), max(r.wt)]
                           FROM (
                               SELECT sum(x.p95 * x.wt) / NULLIF(sum(x.wt), 0) AS p95,
                                      sum(x.p90 * x.wt) / NULLIF(sum(x.wt), 0) AS p90, sum(x.wt) AS wt
                               FROM stage_metrics m
                               CROSS JOIN LATERAL (
                                   SELECT reporting.first_window(m.ts, epoch0, COALESCE(m.trigger_interval_ms, st.trigger_ms), m.batch_duration_ms) AS sec,
                                          reporting.hold_windows(m.ts, COALESCE(m.trigger_interval_ms, st.trigger_ms), m.batch_duration_ms) AS hold_s,
                                          LEAST(float8 '1', GREATEST(COALESCE(m.trigger_interval_ms, st.trigger_ms), m.batch_duration_ms) / float8 '1000') AS wt,
                                          m.latency_p95_ms AS p95,
                                          COALESCE(m.latency_p50_ms + (m.latency_p95_ms - m.latency_p50_ms) * float8 '0.8888888888888889',
                                                   m.latency_p95_ms) AS p90
                               ) x
                               WHERE m.stage_id = st.stage_id AND m.ts >= day_from AND m.ts < day_to
                                 AND m.ts >= GREATEST(st.obs_from, day_from + make_interval(secs => mw.w - mw.max_hold_s))
                                 AND m.ts < LEAST(st.obs_to, day_from + make_interval(secs => mw.w + 1))
                                 AND x.sec <= mw.w AND x.sec + x.hold_s > mw.w
                               GROUP BY m.deployment_id
                           ) r) END AS exact
                FROM multi_windows mw
                JOIN st ON st.sno = mw.sno
                OFFSET 0  -- evaluate `exact` once per row, not once per use above
            ) z
        ) g
        GROUP BY 1, 2
    ),
    windows AS (
        SELECT pw.app,
               sum(pw.batches)::bigint                                          AS batches,
               sum(pw.batches_within)::bigint                                   AS batches_within,
               count(*) FILTER (WHERE ok)                                       AS measured_s,
               count(*) FILTER (WHERE ok AND COALESCE(pw.response_ms, 0) <= p.r_max_ms) AS within_s,
               count(*) FILTER (WHERE ok AND pw.p90_ms > p.r_max_ms)           AS violated,
               percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (ORDER BY pw.response_ms)
                   FILTER (WHERE ok)                                            AS pct
        FROM per_window pw
        JOIN params p ON p.app = pw.app
        -- measured: every stage that reported has a batch speaking for this window (float sums)
        CROSS JOIN LATERAL (SELECT pw.stages > p.n_stages - 0.001 AND pw.w >= p.from_sec AND pw.w < p.to_sec AS ok) x
        GROUP BY pw.app
    )
    SELECT p_day, o.app, o.r_max_ms, o.observed_s,
           COALESCE(w.measured_s, 0), COALESCE(w.within_s, 0), COALESCE(w.within_s, 0) / o.observed_s,
           COALESCE(w.batches, 0), COALESCE(w.batches_within, 0), w.batches_within::float8 / NULLIF(w.batches, 0),
           COALESCE(w.violated, 0), w.pct[1], w.pct[2], w.pct[3]
    FROM obs o
    LEFT JOIN windows w ON w.app = o.app
    ORDER BY o.app;
END $$;

CREATE VIEW reporting.sla_daily AS
SELECT d.day, s.app, s.r_max_ms, s.observed_s, s.measured_s, s.seconds_within_rmax, s.share_within_rmax,
       s.batches, s.batches_within_slo, s.share_batches_within_slo, s.violated_windows,
       s.response_p50_ms, s.response_p95_ms, s.response_p99_ms
FROM reporting.days d
CROSS JOIN LATERAL reporting.sla_for_day(d.day) s;
