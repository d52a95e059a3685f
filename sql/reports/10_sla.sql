-- SLA per app and day.
--
-- The app's response time at a 1-second window w is the sum over its stages of each stage's
-- p95 latency (the critical path of a chain, as control.app_response_ms computes it). A batch
-- speaks for its stage in the windows from the one it started in for its trigger interval
-- (rounded up to whole seconds); a stage with a sub-second trigger has several batches in a
-- window and counts with their mean. A window counts as measured when every stage of the app
-- that reported that day has a batch speaking for it; unmeasured time (the app down, stopped,
-- or a batch overrunning its trigger) counts neither as within nor as above R_max.
-- The p90 of a batch is interpolated between its p50 and p95 (a batch reports no p90); a
-- window is violated when the sum of its stages' p90 exceeds R_max, as in [002] and the
-- simulator (sim/report.py).
CREATE FUNCTION reporting.sla_for_day(p_day date)
RETURNS TABLE (
    day date, app text, r_max_ms integer, observed_s double precision, measured_s bigint,
    seconds_within_rmax bigint, share_within_rmax double precision,
    batches bigint, batches_within_slo bigint, share_batches_within_slo double precision,
    violated_windows bigint,
    response_p50_ms double precision, response_p95_ms double precision, response_p99_ms double precision)
LANGUAGE plpgsql STABLE PARALLEL SAFE SECURITY DEFINER
SET search_path = pg_catalog, public
SET work_mem = '256MB'  -- the per-second hash aggregate (apps × 86 400 groups) stays in memory
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
BEGIN
    RETURN QUERY
    WITH obs AS (
        SELECT o.app, o.r_max_ms, o.obs_from, o.obs_to, o.observed_s,
               floor(date_part('epoch', o.obs_from) - epoch0)::int AS from_sec,
               ceil(date_part('epoch', o.obs_to) - epoch0)::int AS to_sec
        FROM reporting.observed_for_day(p_day) o
    ),
    st AS MATERIALIZED (
        -- from the tables themselves (not `obs`), so that the planner knows how few rows these are
        SELECT s.stage_id, s.app, s.trigger_ms, a.r_max_ms,
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
        SELECT st.app, floor(date_part('epoch', m.ts) - epoch0)::int AS sec,
               LEAST(3600, ceil(COALESCE(m.trigger_interval_ms, st.trigger_ms) / float8 '1000'))::int AS hold_s,
               sum(m.latency_p95_ms * w.wt) AS p95,
               sum(COALESCE(m.latency_p50_ms + (m.latency_p95_ms - m.latency_p50_ms) * float8 '0.8888888888888889',
                            m.latency_p95_ms) * w.wt) AS p90,
               sum(w.wt) AS stages,
               count(*) AS batches,
               count(*) FILTER (WHERE m.latency_p95_ms <= st.r_max_ms) AS batches_within
        FROM stage_metrics m
        -- the tables again rather than `st`: a CTE scan would keep this out of parallel workers
        JOIN (SELECT s.stage_id, s.app, s.trigger_ms, a.r_max_ms, GREATEST(day_from, a.created_at) AS obs_from
              FROM stages s JOIN apps a ON a.name = s.app) st ON st.stage_id = m.stage_id
        CROSS JOIN LATERAL (SELECT LEAST(float8 '1', COALESCE(m.trigger_interval_ms, st.trigger_ms) / float8 '1000') AS wt) w
        WHERE m.ts >= day_from AND m.ts < day_to
          AND m.ts >= st.obs_from AND m.ts < LEAST(day_to, now())
        GROUP BY 1, 2, 3
    ),
    per_window AS (
        -- spread each group over the windows its batches speak for (sums commute with this)
        SELECT g.app, g.sec + k AS w,
               sum(g.p95) AS response_ms, sum(g.p90) AS p90_ms, sum(g.stages) AS stages,
               sum(g.batches) FILTER (WHERE k = 0) AS batches,
               sum(g.batches_within) FILTER (WHERE k = 0) AS batches_within
        FROM starts g
        CROSS JOIN LATERAL generate_series(0, g.hold_s - 1) k
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
