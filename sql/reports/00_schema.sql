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

-- Per app: the part of `p_day` it was observed, i.e. registered and already past.
CREATE FUNCTION reporting.observed_for_day(p_day date)
RETURNS TABLE (app text, r_max_ms integer, obs_from timestamptz, obs_to timestamptz, observed_s double precision)
LANGUAGE sql STABLE PARALLEL SAFE SECURITY DEFINER SET search_path = pg_catalog, public
ROWS 10  -- apps are few; the default estimate (1000) makes the planner loop over per-second rows
AS $$
    SELECT a.name, a.r_max_ms, o.obs_from, o.obs_to,
           EXTRACT(EPOCH FROM o.obs_to - o.obs_from)::float8
    FROM apps a,
         LATERAL (SELECT GREATEST(p_day::timestamptz, a.created_at) AS obs_from,
                         LEAST((p_day + 1)::timestamptz, now()) AS obs_to) o
    WHERE o.obs_from < o.obs_to
$$;

-- The length in seconds of the union of `ranges` (overlaps counted once).
CREATE FUNCTION reporting.union_seconds(ranges tstzmultirange)
RETURNS double precision LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT COALESCE(sum(EXTRACT(EPOCH FROM upper(r) - lower(r))), 0)::float8 FROM unnest(ranges) r
$$;
