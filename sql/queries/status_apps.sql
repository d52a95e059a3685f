-- One row per app for `streamops status`: its bound and its SLO error budget as the last
-- re-plan stored it (slo_budgets, migration 045; NULL before the first). left_ratio as
-- plan/budget.Budget.left: the share of the day's budget not spent (negative: overspent).
SELECT a.name AS app, a.r_max_ms,
       COALESCE(b.slo_target, CAST(a.spec ->> 'slo_target' AS double precision)) AS slo_target,
       b.budget_s, b.spent_s, b.short_s, b.long_s, b.short_burn, b.long_burn, b.factor, b.price, b.rule,
       CASE WHEN b.budget_s > 0 THEN 1 - b.spent_s / b.budget_s WHEN b.budget_s IS NOT NULL THEN 0 END AS left_ratio,
       b.measured_at, EXTRACT(EPOCH FROM now() - b.measured_at) AS budget_age_s
FROM apps a
LEFT JOIN slo_budgets b ON b.app = a.name
ORDER BY a.name
