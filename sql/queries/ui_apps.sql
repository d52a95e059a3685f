-- One row per app for the Airflow page: its latency bound, its stages, the last day's failures
-- and the output they cost (failures.downtime_ms: last commit before → first after), and its SLO
-- error budget as the last re-plan stored it (slo_budgets, migration 045; NULL before the first;
-- left_ratio as plan/budget.Budget.left).
SELECT a.name AS app, a.r_max_ms,
       b.slo_target, b.budget_s, b.spent_s, b.short_s, b.long_s, b.short_burn, b.long_burn, b.price, b.rule,
       CASE WHEN b.budget_s > 0 THEN 1 - b.spent_s / b.budget_s WHEN b.budget_s IS NOT NULL THEN 0 END AS left_ratio,
       b.measured_at AS budget_measured_at,
       (SELECT count(*) FROM stages s WHERE s.app = a.name) AS stages,
       count(f.id) AS failures_24h,
       COALESCE(sum(f.downtime_ms), 0) / 1000.0 AS downtime_24h_s,
       count(f.id) FILTER (WHERE f.status = 'recovering') AS failures_open
FROM apps a
LEFT JOIN failures f ON f.app = a.name AND f.detected_at > now() - interval '1 day'
LEFT JOIN slo_budgets b ON b.app = a.name
GROUP BY a.name, a.r_max_ms, b.app
ORDER BY a.name
