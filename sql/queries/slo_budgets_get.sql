-- The error budgets the last re-plan stored (budget_pass.py): a stage driver's own Operator
-- Manager prices with its app's instead of counting the seconds again.
SELECT app, slo_target, budget_s, spent_s, short_burn, long_burn, factor, price, rule, measured_at
FROM slo_budgets
WHERE CAST(:app AS text) IS NULL OR app = CAST(:app AS text)
