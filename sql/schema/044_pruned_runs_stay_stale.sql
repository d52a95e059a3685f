-- A pruned run stays stale. runs_retention (040) deletes the rows of runs that ended over
-- keep_days ago and were replaced, and run_is_current (020) found no row for such a run and so
-- called it current: a driver paused for longer than that (SIGSTOP, a suspended VM) would wake and
-- commit beside its successor. The id of every deleted run is kept here (one bigint a run: a few
-- a day), by a trigger, so any path that deletes runs is covered, and a run named here is stale.
-- A missing row alone cannot say it: tests' and tools' own run ids have no row and stay current.
-- This also replaces the run_is_current of a reverted 042 where that had been applied.
CREATE TABLE deployments_pruned (id bigint PRIMARY KEY);

CREATE FUNCTION deployments_keep_pruned() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO deployments_pruned (id) SELECT id FROM gone ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;

CREATE TRIGGER deployments_pruned_kept AFTER DELETE ON deployments
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION deployments_keep_pruned();

CREATE OR REPLACE FUNCTION run_is_current(run bigint) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT run IS NULL OR run = 0 OR (
        NOT EXISTS (SELECT 1 FROM deployments_pruned p WHERE p.id = run)
        AND NOT EXISTS (
            SELECT 1 FROM deployments d JOIN deployments n ON n.stage_id = d.stage_id AND n.role = d.role
            WHERE d.id = run AND n.id > d.id AND n.status <> 'refused'))
$$;
