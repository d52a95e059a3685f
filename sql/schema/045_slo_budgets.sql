-- Each app's SLO error budget as the last re-plan measured it (issue 46 item 2: the price of a
-- second above R_max follows the budget instead of a fixed slo_price). The re-plan's operator
-- pass (budget_pass.py) counts the seconds from stage_metrics (sql/queries/slo_seconds.sql),
-- plan/budget.py turns them into the budget and mpc's price, and the row is upserted each cycle;
-- a stage driver's own Operator Manager reads it instead of counting again, and the next
-- re-plan counts only the day's seconds since `settled_to`. `streamops status`,
-- the Streams page and /metrics (streamops_slo_*) read the row, never stage_metrics.
CREATE TABLE slo_budgets (
    app          text PRIMARY KEY REFERENCES apps (name) ON DELETE CASCADE,
    slo_target   double precision NOT NULL,  -- the share of seconds within R_max (apps.yaml slo_target)
    budget_s     double precision NOT NULL,  -- seconds above R_max the period (the UTC day) allows
    spent_s      double precision NOT NULL,  -- seconds above R_max so far today
    short_s      double precision NOT NULL,  -- the burn windows' lengths (plan/budget.windows)
    long_s       double precision NOT NULL,
    short_burn   double precision NOT NULL,  -- each window's share above R_max over (1 - slo_target)
    long_burn    double precision NOT NULL,
    factor       double precision NOT NULL,  -- price / the base price
    price        double precision NOT NULL,  -- core-seconds per second above R_max, the app's (mpc's)
    rule         text NOT NULL,              -- which of plan/budget.py's rules set it
    measured_at  timestamptz NOT NULL,       -- the re-plan's :now
    -- The day's seconds before settled_to (today, UTC), counted once and kept: the next cycle
    -- counts only the seconds since then (slo_seconds.sql), not the whole day again.
    settled_to          timestamptz NOT NULL,
    settled_measured_s  bigint NOT NULL,
    settled_above_s     bigint NOT NULL
);

-- streamops_observer (041) reads what status, the Streams page and /metrics show.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'streamops_observer') THEN
        GRANT SELECT ON slo_budgets TO streamops_observer;
    END IF;
END $$;
