-- A run whose deployment row retention pruned (sql/schema/040) is not current: retention keeps
-- each stage's latest run per role, so a pruned run was replaced long ago. 020's function found
-- no row, so no newer run, and called it current: a driver that woke after a month of SIGSTOP
-- would have written beside its successor. A NULL or 0 run (a test's or a tool's own write)
-- stays unfenced.
CREATE OR REPLACE FUNCTION run_is_current(run bigint) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT run IS NULL OR run = 0 OR (
        EXISTS (SELECT 1 FROM deployments WHERE id = run)
        AND NOT EXISTS (
            SELECT 1 FROM deployments d JOIN deployments n ON n.stage_id = d.stage_id AND n.role = d.role
            WHERE d.id = run AND n.id > d.id AND n.status <> 'refused'))
$$;
