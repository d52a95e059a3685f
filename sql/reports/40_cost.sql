-- Core-hours per app and day: every run that held cores (primary and active-backup secondary
-- runs alike), from its start to its end (or now, while live), times the cores it held at each
-- moment (a live change on a cluster changes them mid-run), clipped to the day. Refused runs
-- never held any.
CREATE FUNCTION reporting.cost_for_day(p_day date)
RETURNS TABLE (day date, app text, runs bigint, core_hours double precision, max_cores bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
WITH runs AS (
    SELECT d.id, s.app, seg.cores,
           tstzrange(seg.lo, GREATEST(seg.lo, COALESCE(seg.hi, run_end.at)))
           * tstzrange(p_day::timestamptz, LEAST((p_day + 1)::timestamptz, now())) AS held
    FROM deployments d JOIN stages s ON s.stage_id = d.stage_id
    CROSS JOIN LATERAL (
        SELECT GREATEST(d.started_at, COALESCE(d.stopped_at,
                        CASE WHEN d.status IN ('starting', 'running', 'stopping') THEN now() END,
                        d.started_at)) AS at
    ) run_end
    -- A run's cores over time: those it started with, then each live change (deployment_scaling).
    CROSS JOIN LATERAL (
        SELECT x.lo, lead(x.lo) OVER (ORDER BY x.lo) AS hi, x.cores
        FROM (
            SELECT d.started_at AS lo,
                   COALESCE((SELECT c.from_cores FROM deployment_scaling c WHERE c.deployment_id = d.id
                             ORDER BY c.at LIMIT 1), d.cores) AS cores
            UNION ALL
            SELECT c.at, c.to_cores FROM deployment_scaling c WHERE c.deployment_id = d.id
        ) x
    ) seg
    WHERE d.status <> 'refused'
      AND d.started_at < (p_day + 1)::timestamptz
      AND (d.stopped_at IS NULL OR d.stopped_at > p_day::timestamptz)
)
SELECT p_day, o.app, count(DISTINCT r.id) FILTER (WHERE NOT isempty(r.held)),
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
