-- Each app's error budget as the re-plan just measured it (budget_pass.py), many apps at once.
INSERT INTO slo_budgets (app, slo_target, budget_s, spent_s, short_s, long_s, short_burn, long_burn, factor, price,
                         rule, measured_at, settled_to, settled_measured_s, settled_above_s)
VALUES (%(app)s, %(slo_target)s, %(budget_s)s, %(spent_s)s, %(short_s)s, %(long_s)s, %(short_burn)s, %(long_burn)s,
        %(factor)s, %(price)s, %(rule)s, %(measured_at)s, %(settled_to)s, %(settled_measured_s)s,
        %(settled_above_s)s)
ON CONFLICT (app) DO UPDATE
    SET slo_target = EXCLUDED.slo_target, budget_s = EXCLUDED.budget_s, spent_s = EXCLUDED.spent_s,
        short_s = EXCLUDED.short_s, long_s = EXCLUDED.long_s, short_burn = EXCLUDED.short_burn,
        long_burn = EXCLUDED.long_burn, factor = EXCLUDED.factor, price = EXCLUDED.price, rule = EXCLUDED.rule,
        measured_at = EXCLUDED.measured_at, settled_to = EXCLUDED.settled_to,
        settled_measured_s = EXCLUDED.settled_measured_s, settled_above_s = EXCLUDED.settled_above_s
    WHERE slo_budgets.measured_at <= EXCLUDED.measured_at  -- an older cycle finishing late does not undo a newer one
