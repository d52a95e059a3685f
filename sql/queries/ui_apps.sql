-- One row per app for the Airflow page: its latency bound, its stages, and the last day's
-- failures and the output they cost (failures.downtime_ms: last commit before → first after).
SELECT a.name AS app, a.r_max_ms,
       (SELECT count(*) FROM stages s WHERE s.app = a.name) AS stages,
       count(f.id) AS failures_24h,
       COALESCE(sum(f.downtime_ms), 0) / 1000.0 AS downtime_24h_s,
       count(f.id) FILTER (WHERE f.status = 'recovering') AS failures_open
FROM apps a
LEFT JOIN failures f ON f.app = a.name AND f.detected_at > now() - interval '1 day'
GROUP BY a.name, a.r_max_ms
ORDER BY a.name
