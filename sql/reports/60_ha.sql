-- High availability (issue 14): what replicas cost, how failures of each cause were recovered,
-- and whether the time with redundancy was better served than the time without. Per app, stage
-- and day; each view is `reporting.days` CROSS JOIN LATERAL its per-day function, like the others,
-- so always filter on `day`.
--
-- Runs by role: 'primary'; 'secondary' (the active backup's overlap during a reconfiguration);
-- 'replica-1', 'replica-2', … (the replica drivers of an HA stage: each a full copy of the stage
-- with its own cores and checkpoint, writing the same version-guarded sink).

-- The number of integer points (1-second windows) in `m`.
CREATE FUNCTION reporting.window_count(m int4multirange)
RETURNS bigint LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT COALESCE(sum(upper(r) - lower(r)), 0)::bigint FROM unnest(m) r
$$;

-- 1. Replica-hours beside core-hours, per app, stage and day.
--
-- A run holds its cores from its start to its end (or now, while live), clipped to the day, as in
-- reporting.cost_for_day: every role counts (primary, active-backup secondary, replica-N), refused
-- runs never held any, and a live change of cores (deployment_scaling) is charged from its moment.
-- So `core_hours` includes the replicas' cores, and the stages' core_hours of an app add up to
-- cost_daily.core_hours.
--   replicas            the stage's replica count now (stages.replicas: apps.yaml or the redundancy manager)
--   runs, replica_runs  runs that held cores that day; of them, those with a role 'replica-%'
--   core_hours          Σ cores × hours held, all roles
--   replica_core_hours  the part of core_hours held by 'replica-%' runs
--   run_hours           Σ hours held, all roles (a stage with one run all day: 24)
--   replica_hours       Σ hours held by 'replica-%' runs
--   redundant_hours     ∫ (runs holding cores at that moment − 1)⁺ dt over the day, any role: the hours
--                       of runs beyond the first. Equals replica_hours while the primary is always
--                       there; adds active-backup overlaps and the overlap of a stopping and a
--                       starting run; leaves out a replica's time alone while the primary is down.
--   max_live_runs       the most runs of the stage holding cores at once that day
CREATE FUNCTION reporting.ha_cost_for_day(p_day date)
RETURNS TABLE (day date, app text, stage_id text, replicas integer, runs bigint, replica_runs bigint,
               core_hours double precision, replica_core_hours double precision, run_hours double precision,
               replica_hours double precision, redundant_hours double precision, max_live_runs bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
WITH bounds AS (
    SELECT tstzrange(p_day::timestamptz, GREATEST(p_day::timestamptz, LEAST((p_day + 1)::timestamptz, now()))) AS day_r
),
runs AS (
    SELECT d.id, d.stage_id, d.started_at, d.cores, d.role LIKE 'replica-%' AS is_replica, run_end.at AS ended_at,
           tstzrange(d.started_at, run_end.at) * b.day_r AS held
    FROM deployments d
    CROSS JOIN bounds b
    CROSS JOIN LATERAL (
        SELECT GREATEST(d.started_at, COALESCE(d.stopped_at,
                        CASE WHEN d.status IN ('starting', 'running', 'stopping') THEN now() END,
                        d.started_at)) AS at
    ) run_end
    WHERE d.status <> 'refused'
      AND d.started_at < (p_day + 1)::timestamptz
      AND (d.stopped_at IS NULL OR d.stopped_at > p_day::timestamptz)
),
segs AS (
    -- a run's cores over time: those it started with, then each live change (as in 40_cost)
    SELECT r.stage_id, r.is_replica, seg.cores,
           tstzrange(seg.lo, GREATEST(seg.lo, COALESCE(seg.hi, r.ended_at))) * b.day_r AS held
    FROM runs r
    CROSS JOIN bounds b
    CROSS JOIN LATERAL (
        SELECT x.lo, lead(x.lo) OVER (ORDER BY x.lo) AS hi, x.cores
        FROM (
            SELECT r.started_at AS lo,
                   COALESCE((SELECT c.from_cores FROM deployment_scaling c WHERE c.deployment_id = r.id
                             ORDER BY c.at LIMIT 1), r.cores) AS cores
            UNION ALL
            SELECT c.at, c.to_cores FROM deployment_scaling c WHERE c.deployment_id = r.id
        ) x
    ) seg
),
cores AS (
    SELECT s.stage_id,
           sum(s.cores * EXTRACT(EPOCH FROM upper(s.held) - lower(s.held)))::float8 / 3600.0 AS core_hours,
           COALESCE(sum(s.cores * EXTRACT(EPOCH FROM upper(s.held) - lower(s.held))) FILTER (WHERE s.is_replica), 0)::float8
               / 3600.0 AS replica_core_hours
    FROM segs s WHERE NOT isempty(s.held)
    GROUP BY s.stage_id
),
held AS (
    SELECT r.stage_id, count(*) AS runs, count(*) FILTER (WHERE r.is_replica) AS replica_runs,
           sum(EXTRACT(EPOCH FROM upper(r.held) - lower(r.held)))::float8 / 3600.0 AS run_hours,
           COALESCE(sum(EXTRACT(EPOCH FROM upper(r.held) - lower(r.held))) FILTER (WHERE r.is_replica), 0)::float8
               / 3600.0 AS replica_hours
    FROM runs r WHERE NOT isempty(r.held)
    GROUP BY r.stage_id
),
events AS (
    -- +1 at each start, −1 at each end; several at one instant net out before counting
    SELECT e.stage_id, e.t, sum(e.delta) AS delta
    FROM (SELECT r.stage_id, lower(r.held) AS t, 1 AS delta FROM runs r WHERE NOT isempty(r.held)
          UNION ALL
          SELECT r.stage_id, upper(r.held), -1 FROM runs r WHERE NOT isempty(r.held)) e
    GROUP BY e.stage_id, e.t
),
live AS (
    SELECT e.stage_id, e.t, lead(e.t) OVER w AS t_next, sum(e.delta) OVER w AS n
    FROM events e
    WINDOW w AS (PARTITION BY e.stage_id ORDER BY e.t)
),
overlap AS (
    SELECT l.stage_id,
           COALESCE(sum(EXTRACT(EPOCH FROM l.t_next - l.t) * (l.n - 1)) FILTER (WHERE l.n > 1), 0)::float8 / 3600.0
               AS redundant_hours,
           max(l.n) AS max_live_runs
    FROM live l WHERE l.t_next IS NOT NULL
    GROUP BY l.stage_id
)
SELECT p_day, o.app, s.stage_id, s.replicas,
       COALESCE(h.runs, 0), COALESCE(h.replica_runs, 0),
       COALESCE(c.core_hours, 0), COALESCE(c.replica_core_hours, 0),
       COALESCE(h.run_hours, 0), COALESCE(h.replica_hours, 0),
       COALESCE(v.redundant_hours, 0), COALESCE(v.max_live_runs, 0)::bigint
FROM reporting.observed_for_day(p_day) o
JOIN stages s ON s.app = o.app
LEFT JOIN cores c ON c.stage_id = s.stage_id
LEFT JOIN held h ON h.stage_id = s.stage_id
LEFT JOIN overlap v ON v.stage_id = s.stage_id
ORDER BY o.app, s.stage_id
$$;

CREATE VIEW reporting.ha_cost_daily AS
SELECT d.day, c.app, c.stage_id, c.replicas, c.runs, c.replica_runs, c.core_hours, c.replica_core_hours,
       c.run_hours, c.replica_hours, c.redundant_hours, c.max_live_runs
FROM reporting.days d
CROSS JOIN LATERAL reporting.ha_cost_for_day(d.day) c;

-- 2. Failures and their recovery per app, stage, day and cause.
--
-- A failure belongs to the day it happened (failed_at), within the app's observed time, as in
-- downtime_daily (whose `failures` is the sum of `failures` here). One row per app, stage, cause,
-- kind, fault_kind and detected_by:
--   cause         'real', or 'injected' when the fault injector caused it (failures.fault_id)
--   kind          how the failure showed: dead_pid, stopped, stale_heartbeat, stalled, query_failed,
--                 batch_failed, launch_failed, master_lost, worker_lost (failures.kind)
--   fault_kind    for an injected failure, the injected fault's kind (injected_faults.kind:
--                 driver_kill, executor_kill, heartbeat_cut, db_outage, slow_batch); NULL for real
--                 ones, and for an injected one whose injected_faults row is gone
--   detected_by   'supervisor' (seconds) or 'watchdog' (the DAG, the second line)
--   failures, failures_of_replicas (of them, failures of a 'replica-%' run), recovered (a first
--   output after it), gave_up (its recovered_at, once set, is a later run's repair: not counted
--   as recovered), open (still recovering)
--   mttr_p50_s, mttr_max_s     time to recovery of the recovered ones: failures.mttr_ms (last sign of
--                              life → first output of the recovering run), else recovered_at − failed_at
--   gap_p50_s, gap_max_s       their output gap: failures.downtime_ms (last output before → first
--                              output after, by any run: a failure masked by a surviving replica costs
--                              about one trigger), else recovered_at − last_commit_at
-- Percentiles are continuous (percentile_cont) and NULL without a recovered failure.
CREATE FUNCTION reporting.ha_failures_for_day(p_day date)
RETURNS TABLE (day date, app text, stage_id text, cause text, kind text, fault_kind text, detected_by text,
               failures bigint, failures_of_replicas bigint, recovered bigint, gave_up bigint, open bigint,
               mttr_p50_s double precision, mttr_max_s double precision,
               gap_p50_s double precision, gap_max_s double precision)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
SELECT p_day, f.app, f.stage_id, f.cause, f.kind, i.kind, f.detected_by,
       count(*), count(*) FILTER (WHERE f.role LIKE 'replica-%'),
       count(*) FILTER (WHERE f.status = 'recovered'),
       count(*) FILTER (WHERE f.status = 'gave_up'),
       count(*) FILTER (WHERE f.status = 'recovering'),
       percentile_cont(0.5) WITHIN GROUP (ORDER BY x.mttr_s), max(x.mttr_s),
       percentile_cont(0.5) WITHIN GROUP (ORDER BY x.gap_s), max(x.gap_s)
FROM reporting.observed_for_day(p_day) o
JOIN failures f ON f.app = o.app AND f.failed_at >= o.obs_from AND f.failed_at < o.obs_to
LEFT JOIN injected_faults i ON i.id = f.fault_id
CROSS JOIN LATERAL (
    SELECT CASE WHEN f.status = 'recovered'
                THEN COALESCE(f.mttr_ms, EXTRACT(EPOCH FROM f.recovered_at - f.failed_at) * 1000) / 1000.0 END AS mttr_s,
           CASE WHEN f.status = 'recovered'
                THEN COALESCE(f.downtime_ms, EXTRACT(EPOCH FROM f.recovered_at - COALESCE(f.last_commit_at, f.failed_at))
                              * 1000) / 1000.0 END AS gap_s
) x
GROUP BY f.app, f.stage_id, f.cause, f.kind, i.kind, f.detected_by
ORDER BY f.app, f.stage_id, f.cause, f.kind, i.kind, f.detected_by
$$;

CREATE VIEW reporting.ha_failures_daily AS
SELECT d.day, f.app, f.stage_id, f.cause, f.kind, f.fault_kind, f.detected_by, f.failures, f.failures_of_replicas,
       f.recovered, f.gave_up, f.open, f.mttr_p50_s, f.mttr_max_s, f.gap_p50_s, f.gap_max_s
FROM reporting.days d
CROSS JOIN LATERAL reporting.ha_failures_for_day(d.day) f;

-- 3. Violated 1-second windows with and without redundancy, per app, stage and day.
--
-- Windows are the 1-second windows of sla_daily, per stage. A stage is observed in a window when
-- it was in service during any part of it: as observed_for_day, restricted to the stage (a run of
-- it from its start to its stop, or until now when it has none; a reconfiguration of it under
-- way; a failure of it open), from the app's registration, up to now.
--   measured     a batch of any run of the stage speaks for the window (a batch speaks from the
--                second it started in for its trigger interval, or its duration when it overran
--                the trigger, rounded up to whole seconds, as in sla_daily)
--   stalled      observed and not measured: the output stalled while the stage was in service
--                (down, starting, reconfiguring). sla_daily
--                counts this time as not within R_max; downtime_daily's gaps lie in it.
--   slow         measured, and the stage's p90 response exceeds the app's R_max (sla_daily's
--                violated_windows test, for the stage alone). A run's p90 in a window is the
--                mean (by trigger weight, as sla_daily) of its batches' p90 speaking for it, each
--                interpolated between p50 and p95; with several runs (replicas) the stage's is the
--                lowest of them: the version-guarded sink serves the first replica's output.
--   violated     stalled or slow
--   with redundancy     during the whole window at least 2 runs of the stage were live: running
--                       (from running_at) and neither stopped nor failed (a run's life ends at its
--                       stopped_at, or at the failed_at of a failure of it if earlier). Any role
--                       counts, so an active-backup overlap is redundancy too. Other windows are
--                       without redundancy, including those when the stage had a single run left.
-- Shares are violated / observed windows of each class (NULL with none). For a chain each stage is
-- compared with the whole R_max (as batches_within_slo does), so this is optimistic against
-- sla_daily's app-level windows, which remain the SLO.
CREATE FUNCTION reporting.ha_windows_for_day(p_day date)
RETURNS TABLE (
    day date, app text, stage_id text, r_max_ms integer,
    windows_observed bigint, windows_measured bigint, windows_stalled bigint, windows_slow bigint,
    windows_violated bigint, share_violated double precision,
    windows_with_redundancy bigint, violated_with_redundancy bigint, share_violated_with_redundancy double precision,
    windows_without_redundancy bigint, violated_without_redundancy bigint,
    share_violated_without_redundancy double precision)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, public
SET work_mem = '256MB'
SET jit = off           -- compiling costs more than it saves at this size
SET enable_sort = off   -- hash aggregates: the planner cannot estimate groups of per-minute expressions
SET enable_incremental_sort = off
-- the day's scan runs in parallel workers, as in sla_for_day
SET parallel_setup_cost = 0
SET parallel_tuple_cost = 0
AS $$
#variable_conflict use_column
DECLARE
    -- constants in the query's plan: stage_metrics is pruned to the day's partition
    day_from constant timestamptz := p_day::timestamptz;
    day_to constant timestamptz := (p_day + 1)::timestamptz;
    upto constant timestamptz := LEAST((p_day + 1)::timestamptz, now());
    epoch0 constant float8 := date_part('epoch', p_day::timestamptz);
BEGIN
    RETURN QUERY
    WITH st AS MATERIALIZED (
        SELECT s.stage_id, s.app, s.trigger_ms, a.r_max_ms, GREATEST(day_from, a.created_at) AS lo
        FROM stages s JOIN apps a ON a.name = s.app
        WHERE a.created_at < upto AND day_from < upto
    ),
    service AS (
        -- observed windows: every second touched by the stage's time in service
        SELECT st.stage_id,
               range_agg(int4range(floor(date_part('epoch', lower(c.r)) - epoch0)::int,
                                   ceil(date_part('epoch', upper(c.r)) - epoch0)::int)) AS secs
        FROM st
        CROSS JOIN LATERAL (
            SELECT tstzrange(d.started_at, GREATEST(d.started_at, COALESCE(d.stopped_at, 'infinity'))) AS r
            FROM deployments d
            WHERE d.stage_id = st.stage_id AND d.status <> 'refused'
            UNION ALL
            SELECT tstzrange(c.requested_at, GREATEST(c.requested_at, COALESCE(c.finished_at,
                   CASE WHEN c.status = 'running' THEN 'infinity'::timestamptz ELSE c.requested_at END)))
            FROM reconfigurations c
            WHERE c.stage_id = st.stage_id AND c.status NOT IN ('pending', 'cancelled')
            UNION ALL
            SELECT tstzrange(f.failed_at, GREATEST(f.failed_at, COALESCE(f.recovered_at, 'infinity')))
            FROM failures f
            WHERE f.stage_id = st.stage_id
        ) x
        CROSS JOIN LATERAL (SELECT x.r * tstzrange(st.lo, upto) AS r) c
        WHERE NOT isempty(c.r)
        GROUP BY st.stage_id
    ),
    alive AS (
        SELECT d.stage_id, tstzrange(d.running_at, GREATEST(d.running_at, e.end_at)) * tstzrange(st.lo, upto) AS r
        FROM deployments d
        JOIN st ON st.stage_id = d.stage_id
        CROSS JOIN LATERAL (
            SELECT LEAST(COALESCE(d.stopped_at,
                                  CASE WHEN d.status IN ('starting', 'running', 'stopping') THEN 'infinity'::timestamptz END,
                                  d.running_at),
                         (SELECT min(f.failed_at) FROM failures f WHERE f.deployment_id = d.id AND f.failed_at >= d.running_at))
                   AS end_at
        ) e
        WHERE d.running_at IS NOT NULL AND d.running_at < upto AND d.status <> 'refused'
          AND (d.stopped_at IS NULL OR d.stopped_at > st.lo)
    ),
    events AS (
        SELECT e.stage_id, e.t, sum(e.delta) AS delta
        FROM (SELECT a.stage_id, lower(a.r) AS t, 1 AS delta FROM alive a WHERE NOT isempty(a.r)
              UNION ALL
              SELECT a.stage_id, upper(a.r), -1 FROM alive a WHERE NOT isempty(a.r)) e
        GROUP BY e.stage_id, e.t
    ),
    counted AS (
        SELECT e.stage_id, e.t, lead(e.t) OVER w AS t_next, sum(e.delta) OVER w AS n
        FROM events e
        WINDOW w AS (PARTITION BY e.stage_id ORDER BY e.t)
    ),
    redundant_time AS (
        SELECT c.stage_id, range_agg(tstzrange(c.t, c.t_next)) AS m
        FROM counted c WHERE c.n >= 2 AND c.t_next IS NOT NULL
        GROUP BY c.stage_id
    ),
    redundant AS (
        -- the windows wholly inside: from the first whole second to the last
        SELECT rt.stage_id,
               range_agg(int4range(w.a, GREATEST(w.a, w.b))) AS secs
        FROM redundant_time rt
        CROSS JOIN LATERAL unnest(rt.m) r
        CROSS JOIN LATERAL (SELECT ceil(date_part('epoch', lower(r)) - epoch0)::int AS a,
                                   floor(date_part('epoch', upper(r)) - epoch0)::int AS b) w
        GROUP BY rt.stage_id
    ),
    minutes AS (
        -- One pass over the day's partition (scanned by parallel workers): per stage and minute of
        -- the day, as 60-bit masks, the seconds its batches speak for, those a batch whose p90
        -- exceeds R_max speaks for (`high`), and those a batch within R_max speaks for (`low`). A
        -- hash aggregate of bit_or per minute costs a quarter of a range aggregate per batch.
        SELECT x.stage_id, x.minute,
               bit_or(x.mask) AS measured,
               COALESCE(bit_or(x.mask) FILTER (WHERE x.high), 0) AS high,
               COALESCE(bit_or(x.mask) FILTER (WHERE NOT x.high), 0) AS low,
               max(x.hold_s) AS max_hold_s
        FROM (
            -- the minutes [sec, sec + hold_s) touches (one, at a trigger of a second or a few), and
            -- its bits in each; the set-returning function in the target list costs less than a
            -- lateral one per row
            SELECT y.stage_id, y.hold_s, y.high, y.minute,
                   (int8 '1' << (LEAST(y.sec + y.hold_s, 60 * y.minute + 60) - 60 * y.minute))
                   - (int8 '1' << (GREATEST(y.sec, 60 * y.minute) - 60 * y.minute)) AS mask
            FROM (
                SELECT z.stage_id, z.sec, z.hold_s, z.high,
                       generate_series(z.sec / 60, (z.sec + z.hold_s - 1) / 60) AS minute
                FROM (
                    SELECT m.stage_id,
                           reporting.first_window(m.ts, epoch0, COALESCE(m.trigger_interval_ms, st.trigger_ms), m.batch_duration_ms) AS sec,
                           reporting.hold_windows(m.ts, COALESCE(m.trigger_interval_ms, st.trigger_ms), m.batch_duration_ms) AS hold_s,
                           COALESCE(m.latency_p50_ms + (m.latency_p95_ms - m.latency_p50_ms) * float8 '0.8888888888888889',
                                    m.latency_p95_ms) > st.r_max_ms AS high  -- NULL without latencies: neither
                    FROM stage_metrics m
                    -- the tables, not `st`: a CTE scan would keep this out of parallel workers
                    JOIN (SELECT s.stage_id, s.trigger_ms, a.r_max_ms, GREATEST(day_from, a.created_at) AS lo
                          FROM stages s JOIN apps a ON a.name = s.app) st ON st.stage_id = m.stage_id
                    WHERE m.ts >= day_from AND m.ts < day_to
                      AND m.ts >= st.lo AND m.ts < upto
                ) z
            ) y
        ) x
        GROUP BY x.stage_id, x.minute
    ),
    masks AS (
        -- per stage: the three sets of windows, a full minute as one range
        SELECT mi.stage_id,
               range_agg(r.secs) FILTER (WHERE v.kind = 'measured') AS measured,
               range_agg(r.secs) FILTER (WHERE v.kind = 'high') AS high,
               range_agg(r.secs) FILTER (WHERE v.kind = 'low') AS low,
               max(mi.max_hold_s) AS max_hold_s
        FROM minutes mi
        CROSS JOIN LATERAL (VALUES ('measured', mi.measured), ('high', mi.high), ('low', mi.low)) v (kind, mask)
        CROSS JOIN LATERAL (
            SELECT int4range(60 * mi.minute, 60 * mi.minute + 60) AS secs
            WHERE v.mask = (int8 '1' << 60) - 1
            UNION ALL
            SELECT int4range(60 * mi.minute + k, 60 * mi.minute + k + 1)
            FROM generate_series(0, 59) k
            WHERE v.mask <> (int8 '1' << 60) - 1 AND v.mask & (int8 '1' << k) <> 0
        ) r
        WHERE v.mask <> 0
        GROUP BY mi.stage_id
    ),
    batches AS (
        -- Where every batch speaking for a window exceeds R_max, every run's mean does: the stage
        -- is slow there. Where none does, it is not. Only where both kinds speak (replicas that
        -- disagree, several batches of a run in one window) must the means be computed: `mixed`.
        SELECT b.stage_id, b.measured, b.max_hold_s,
               COALESCE(b.high, '{}') - COALESCE(b.low, '{}') AS slow,
               COALESCE(b.high, '{}') * COALESCE(b.low, '{}') AS mixed
        FROM masks b
    ),
    per_run AS (
        -- each run's mean p90 (by trigger weight) in each mixed window, from the batches that speak
        -- for it, found by index (stage_metrics_stage_ts) between the first and last mixed window
        SELECT m.stage_id, m.deployment_id, x.sec + k AS w,
               sum(x.p90 * x.wt) / NULLIF(sum(x.wt) FILTER (WHERE x.p90 IS NOT NULL), 0) AS p90
        FROM batches b
        JOIN st ON st.stage_id = b.stage_id
        JOIN stage_metrics m
          ON m.stage_id = b.stage_id
         AND m.ts >= GREATEST(st.lo, day_from + make_interval(secs => lower(b.mixed) - b.max_hold_s))
         AND m.ts < LEAST(upto, day_from + make_interval(secs => upper(b.mixed)))
        CROSS JOIN LATERAL (
            SELECT reporting.first_window(m.ts, epoch0, COALESCE(m.trigger_interval_ms, st.trigger_ms), m.batch_duration_ms) AS sec,
                   reporting.hold_windows(m.ts, COALESCE(m.trigger_interval_ms, st.trigger_ms), m.batch_duration_ms) AS hold_s,
                   LEAST(float8 '1', GREATEST(COALESCE(m.trigger_interval_ms, st.trigger_ms), m.batch_duration_ms) / float8 '1000') AS wt,
                   COALESCE(m.latency_p50_ms + (m.latency_p95_ms - m.latency_p50_ms) * float8 '0.8888888888888889',
                            m.latency_p95_ms) AS p90
        ) x
        CROSS JOIN LATERAL generate_series(0, x.hold_s - 1) k
        WHERE NOT isempty(b.mixed) AND m.ts >= day_from AND m.ts < day_to
          AND int4range(x.sec, x.sec + x.hold_s) && b.mixed AND b.mixed @> (x.sec + k)
        GROUP BY m.stage_id, m.deployment_id, x.sec + k
    ),
    slow AS (
        -- the stage's p90 in a window: its fastest run's (the sink serves the first output)
        SELECT b.stage_id, b.slow + COALESCE(mx.secs, '{}') AS secs
        FROM batches b
        LEFT JOIN (
            SELECT p.stage_id, range_agg(int4range(p.w, p.w + 1)) AS secs
            FROM (SELECT r.stage_id, r.w, min(r.p90) AS p90 FROM per_run r GROUP BY r.stage_id, r.w) p
            JOIN st ON st.stage_id = p.stage_id
            WHERE p.p90 > st.r_max_ms
            GROUP BY p.stage_id
        ) mx ON mx.stage_id = b.stage_id
    ),
    sets AS (
        SELECT st.app, st.stage_id, st.r_max_ms, sv.secs AS obs,
               COALESCE(b.measured, '{}') * sv.secs AS meas,
               COALESCE(sl.secs, '{}') * sv.secs AS slow,
               (sv.secs - COALESCE(b.measured, '{}')) + COALESCE(sl.secs, '{}') * sv.secs AS viol,
               COALESCE(rd.secs, '{}') * sv.secs AS red
        FROM st
        JOIN service sv ON sv.stage_id = st.stage_id
        LEFT JOIN batches b ON b.stage_id = st.stage_id
        LEFT JOIN slow sl ON sl.stage_id = st.stage_id
        LEFT JOIN redundant rd ON rd.stage_id = st.stage_id
    ),
    counts AS (
        SELECT s.app, s.stage_id, s.r_max_ms,
               reporting.window_count(s.obs) AS obs_n,
               reporting.window_count(s.meas) AS meas_n,
               reporting.window_count(s.slow) AS slow_n,
               reporting.window_count(s.viol) AS viol_n,
               reporting.window_count(s.red) AS red_n,
               reporting.window_count(s.viol * s.red) AS viol_red_n
        FROM sets s
    )
    SELECT p_day, c.app, c.stage_id, c.r_max_ms,
           c.obs_n, c.meas_n, c.obs_n - c.meas_n, c.slow_n, c.viol_n, c.viol_n::float8 / NULLIF(c.obs_n, 0),
           c.red_n, c.viol_red_n, c.viol_red_n::float8 / NULLIF(c.red_n, 0),
           c.obs_n - c.red_n, c.viol_n - c.viol_red_n, (c.viol_n - c.viol_red_n)::float8 / NULLIF(c.obs_n - c.red_n, 0)
    FROM counts c
    ORDER BY c.app, c.stage_id;
END $$;

CREATE VIEW reporting.ha_windows_daily AS
SELECT d.day, w.app, w.stage_id, w.r_max_ms, w.windows_observed, w.windows_measured, w.windows_stalled,
       w.windows_slow, w.windows_violated, w.share_violated,
       w.windows_with_redundancy, w.violated_with_redundancy, w.share_violated_with_redundancy,
       w.windows_without_redundancy, w.violated_without_redundancy, w.share_violated_without_redundancy
FROM reporting.days d
CROSS JOIN LATERAL reporting.ha_windows_for_day(d.day) w;
