-- The `reporting` schema: analysts' contract views over the raw tables. Everything here is
-- re-created by `streamops db up` (store/migrate.py) whenever a file of sql/reports/ changes,
-- so nothing else may live in this schema.
CREATE SCHEMA reporting;

-- Days are calendar days in the server's TimeZone, the same boundaries as the daily
-- stage_metrics partitions (ensure_stage_metrics_partitions casts date → timestamptz too).
-- From the first app's registration to today. A filter on `day` applies to this series, so a
-- view joined laterally to a per-day function computes only the days asked for.
CREATE VIEW reporting.days AS
SELECT g::date AS day
FROM (SELECT min(created_at)::date AS first_day FROM public.apps) f,
     generate_series(f.first_day, current_date, interval '1 day') g;

-- The 1-second windows a batch speaks for: from `first_window` for its trigger interval, or its
-- duration when it overran the trigger (Spark starts the next batch as it ends), up to the one
-- nearest its end, where the next batch's begin, so two batches of a run never share one; 1 for
-- a sub-second trigger, whose batches share the window they started in by weight. Before, an
-- overrunning batch took ceil(duration) windows from the floor of its start and met the next
-- batch in one, where sla_daily summed their p95s: 16 of the 42 s a demo's taxi stage had above
-- R_max in 30 minutes. Inlined; with first_window it costs sla_daily 15-20 % (bench/reporting.py).
CREATE FUNCTION reporting.hold_windows(ts timestamptz, trigger_ms double precision, duration_ms double precision)
RETURNS integer LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN GREATEST(trigger_ms, duration_ms) < 1000 THEN 1
                ELSE LEAST(3600, round(date_part('epoch', ts) + GREATEST(trigger_ms, duration_ms) / 1000)
                                 - round(date_part('epoch', ts)))::int END
$$;

-- The first window (seconds after `epoch0`, a midnight) a batch speaks for: the one nearest its
-- start for a trigger of a second or more, since Spark starts those batches on the trigger's grid
-- of whole seconds a few ms early or late, and the floor of an early start is its predecessor's
-- last window (a demo's taxi stage: 9 seconds "above R_max" in 10 minutes with every batch
-- within it); the one it started in for a sub-second trigger.
CREATE FUNCTION reporting.first_window(ts timestamptz, epoch0 double precision, trigger_ms double precision,
                                       duration_ms double precision)
RETURNS integer LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT (CASE WHEN GREATEST(trigger_ms, duration_ms) < 1000 THEN floor(date_part('epoch', ts) - epoch0)
                 ELSE round(date_part('epoch', ts) - epoch0) END)::int
$$;

-- The length in seconds of the union of `ranges` (overlaps counted once).
CREATE FUNCTION reporting.union_seconds(ranges tstzmultirange)
RETURNS double precision LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT COALESCE(sum(EXTRACT(EPOCH FROM upper(r) - lower(r))), 0)::float8 FROM unnest(ranges) r
$$;

-- Per app: the part of `p_day` it was observed, i.e. in service: registered, already past, and
-- either running (any run of its stages, from its start to its stop; on while the run is live
-- or was lost without a stop), or down for a reconfiguration or a failure (from the request, or
-- the failure, to its end; now while open). Time after an operator stopped all
-- of its stages is not observed: the SLO is not charged for it. obs_from and obs_to are the
-- first and last observed instants of the day, observed_s the seconds in between that were.
CREATE FUNCTION reporting.observed_for_day(p_day date)
RETURNS TABLE (app text, r_max_ms integer, obs_from timestamptz, obs_to timestamptz, observed_s double precision)
LANGUAGE sql STABLE PARALLEL SAFE SECURITY DEFINER SET search_path = pg_catalog, public
ROWS 10  -- apps are few; the default estimate (1000) makes the planner loop over per-second rows
AS $$
    SELECT a.name, a.r_max_ms, lower(sv.service), upper(sv.service), reporting.union_seconds(sv.service)
    FROM apps a
    CROSS JOIN LATERAL (SELECT GREATEST(p_day::timestamptz, a.created_at) AS lo,
                               LEAST((p_day + 1)::timestamptz, now()) AS hi) b
    CROSS JOIN LATERAL (
        SELECT range_agg(x.r) * tstzmultirange(tstzrange(b.lo, b.hi)) AS service
        FROM (
            SELECT tstzrange(lo.at, GREATEST(lo.at, COALESCE(d.stopped_at, 'infinity'))) AS r
            FROM deployments d JOIN stages s ON s.stage_id = d.stage_id
            -- A stage's first run is in service from when it first had input, when no input waited
            -- through its launch: its first batch with input was within R_max, or that batch's oldest
            -- row (commit minus the greatest latency; `ts` is the batch's start) came after the query
            -- started. It is then in service from that row, or from the query's start if the row
            -- came before it. Before that the stage had never served and nothing waited (issue 48
            -- item 10: a fresh demo's 46-90 s launch on 2 cores, and the 7-13 s before the first
            -- input, counted as seconds not within R_max; the first batch's own latency still counts).
            -- Any later run, and a first run that input waited for, is in service from its start:
            -- a restart's gap is downtime.
            LEFT JOIN LATERAL (SELECT m.latency_p95_ms AS p95, LEAST(m.ts, m.ts + make_interval(
                                          secs => (m.batch_duration_ms - m.latency_max_ms) / 1000)) AS oldest
                               FROM stage_metrics m
                               WHERE m.stage_id = d.stage_id AND m.deployment_id = d.id AND m.ts >= d.started_at
                                 AND m.input_rows > 0
                               ORDER BY m.ts LIMIT 1) f ON true
            CROSS JOIN LATERAL (SELECT CASE WHEN d.running_at IS NOT NULL
                    AND NOT EXISTS (SELECT 1 FROM deployments e
                                    WHERE e.stage_id = d.stage_id AND e.id < d.id AND e.status <> 'refused')
                    AND (f.p95 <= a.r_max_ms OR f.oldest >= d.running_at)
                THEN GREATEST(d.started_at, d.running_at, f.oldest) ELSE d.started_at END AS at) lo
            WHERE s.app = a.name AND d.status <> 'refused'
            UNION ALL
            SELECT tstzrange(c.requested_at, GREATEST(c.requested_at, COALESCE(c.finished_at,
                   CASE WHEN c.status = 'running' THEN 'infinity'::timestamptz ELSE c.requested_at END)))
            FROM reconfigurations c
            WHERE c.app = a.name AND c.status NOT IN ('pending', 'cancelled')
            UNION ALL
            -- unrecovered (open, or the watchdog gave up): down, and observed, until now
            SELECT tstzrange(f.failed_at, GREATEST(f.failed_at, COALESCE(f.recovered_at, 'infinity')))
            FROM failures f
            WHERE f.app = a.name
        ) x
        WHERE b.lo < b.hi AND x.r && tstzrange(b.lo, b.hi)
    ) sv
    WHERE b.lo < b.hi AND NOT isempty(sv.service)
$$;
