-- Downtime per app and day: output gaps caused by reconfigurations and by failures, clipped to
-- the app's observed time of the day, so a gap across midnight is split between both days.
--
-- A reconfiguration's gap is the `downtime_ms` its mechanism measured (the longest gap between
-- output commits), placed so that it ends at the new run's first output (first_batch_done_at,
-- else the last phase stamp). A failure's gap runs from the stage's last output before it
-- (last_commit_at, else failed_at): a recovered failure with a measured downtime_ms lasts that
-- long (failure_recovered.sql: to the first commit after it by any other run, so it ends at
-- recovered_at without replicas, and at a surviving replica's next commit with them); another
-- recovered one ends at recovered_at; an unrecovered one lasts until now. A given-up failure ends
-- at the first commit of a later run of its stage (failures_close_given_up.sql), else now.
-- Gaps of several stages of an app that overlap count once; so does a failure during a
-- reconfiguration. Failures (count, MTTR) belong to the day they happened (failed_at).
CREATE FUNCTION reporting.downtime_for_day(p_day date)
RETURNS TABLE (
    day date, app text, observed_s double precision,
    downtime_s double precision, downtime_reconfig_s double precision, downtime_failure_s double precision,
    availability double precision, reconfigurations bigint, failures bigint, failures_recovered bigint,
    mttr_s double precision)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
WITH obs AS (
    SELECT * FROM reporting.observed_for_day(p_day)
),
gaps AS (
    SELECT r.app, 'reconfig' AS cause,
           tstzrange(e.end_at - make_interval(secs => r.downtime_ms / 1000.0), e.end_at) AS gap
    FROM reconfigurations r
    CROSS JOIN LATERAL (SELECT COALESCE(r.first_batch_done_at, r.caught_up_at, r.finished_at, r.restarted_at,
                                        r.stopped_at, r.requested_at) AS end_at) e
    WHERE r.downtime_ms > 0
    UNION ALL
    SELECT f.app, 'failure',
           CASE WHEN f.recovered_at IS NOT NULL AND f.downtime_ms IS NOT NULL
                THEN tstzrange(s.lc, s.lc + make_interval(secs => GREATEST(f.downtime_ms, 0) / 1000.0))
                ELSE tstzrange(s.lc, GREATEST(s.lc, COALESCE(f.recovered_at, now())))
           END
    FROM failures f
    CROSS JOIN LATERAL (SELECT COALESCE(f.last_commit_at, f.failed_at) AS lc) s
),
clipped AS (
    SELECT g.app, g.cause, g.gap * tstzrange(o.obs_from, o.obs_to) AS gap
    FROM gaps g JOIN obs o ON o.app = g.app
    WHERE g.gap && tstzrange(o.obs_from, o.obs_to)
),
down AS (
    SELECT app,
           reporting.union_seconds(range_agg(gap)) AS total_s,
           reporting.union_seconds(range_agg(gap) FILTER (WHERE cause = 'reconfig')) AS reconfig_s,
           reporting.union_seconds(range_agg(gap) FILTER (WHERE cause = 'failure')) AS failure_s
    FROM clipped GROUP BY app
),
reconf AS (
    SELECT r.app, count(*) AS n
    FROM reconfigurations r JOIN obs o ON o.app = r.app
    WHERE r.requested_at >= o.obs_from AND r.requested_at < o.obs_to AND r.status <> 'cancelled'
    GROUP BY r.app
),
fail AS (
    SELECT f.app, count(*) AS n, count(*) FILTER (WHERE f.status = 'recovered') AS recovered,
           avg(COALESCE(f.mttr_ms, EXTRACT(EPOCH FROM f.recovered_at - f.failed_at) * 1000))
               FILTER (WHERE f.status = 'recovered') / 1000.0 AS mttr_s
    FROM failures f JOIN obs o ON o.app = f.app
    WHERE f.failed_at >= o.obs_from AND f.failed_at < o.obs_to
    GROUP BY f.app
)
SELECT p_day, o.app, o.observed_s,
       COALESCE(d.total_s, 0), COALESCE(d.reconfig_s, 0), COALESCE(d.failure_s, 0),
       1.0 - COALESCE(d.total_s, 0) / o.observed_s,
       COALESCE(r.n, 0), COALESCE(f.n, 0), COALESCE(f.recovered, 0), f.mttr_s
FROM obs o
LEFT JOIN down d ON d.app = o.app
LEFT JOIN reconf r ON r.app = o.app
LEFT JOIN fail f ON f.app = o.app
$$;

CREATE VIEW reporting.downtime_daily AS
SELECT d.day, t.app, t.observed_s, t.downtime_s, t.downtime_reconfig_s, t.downtime_failure_s, t.availability,
       t.reconfigurations, t.failures, t.failures_recovered, t.mttr_s
FROM reporting.days d
CROSS JOIN LATERAL reporting.downtime_for_day(d.day) t;
