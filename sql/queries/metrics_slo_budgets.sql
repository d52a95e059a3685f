-- The exporter's per-app SLO gauges: each app's error budget as the last re-plan stored it
-- (slo_budgets, migration 045; no row before the first). left_ratio as plan/budget.Budget.left.
SELECT b.app, b.slo_target, b.budget_s, b.spent_s, b.short_burn, b.long_burn, b.price,
       CASE WHEN b.budget_s > 0 THEN 1 - b.spent_s / b.budget_s ELSE 0 END AS left_ratio,
       EXTRACT(EPOCH FROM now() - b.measured_at) AS age_s
FROM slo_budgets b
ORDER BY b.app
