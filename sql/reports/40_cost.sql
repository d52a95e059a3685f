-- Core-hours per app and day: every run that held cores (primary and active-backup secondary
-- runs alike), from its start to its end (or now, while live), times its cores, clipped to
-- the day. Refused runs never held any.
CREATE FUNCTION reporting.cost_for_day(p_day date)
RETURNS TABLE (day date, app text, runs bigint, core_hours double precision, max_cores bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
WITH runs AS (
    SELECT s.app, d.cores,
           tstzrange(d.started_at,
                     GREATEST(d.started_at, COALESCE(d.stopped_at,
                              CASE WHEN d.status IN ('starting', 'running', 'stopping') THEN now() END,
                              d.started_at)))
           * tstzrange(p_day::timestamptz, LEAST((p_day + 1)::timestamptz, now())) AS held
    FROM deployments d JOIN stages s ON s.stage_id = d.stage_id
    WHERE d.status <> 'refused'
      AND d.started_at < (p_day + 1)::timestamptz
      AND (d.stopped_at IS NULL OR d.stopped_at > p_day::timestamptz)
)
SELECT p_day, o.app, count(r.held) FILTER (WHERE NOT isempty(r.held)),
       COALESCE(sum(r.cores * EXTRACT(EPOCH FROM upper(r.held) - lower(r.held))) FILTER (WHERE NOT isempty(r.held)), 0)::float8 / 3600.0,
       (max(r.cores) FILTER (WHERE NOT isempty(r.held)))::bigint
FROM reporting.observed_for_day(p_day) o
LEFT JOIN runs r ON r.app = o.app
GROUP BY o.app
$$;

CREATE VIEW reporting.cost_daily AS
SELECT d.day, c.app, c.runs, c.core_hours, c.max_cores
FROM reporting.days d
CROSS JOIN LATERAL reporting.cost_for_day(d.day) c;
