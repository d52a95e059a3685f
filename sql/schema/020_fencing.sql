-- Fencing. A run's epoch is its deployment id (ids only grow): it is current until a newer run of
-- its stage and role is admitted. Every state-changing write of a run (heartbeat, metrics, sink
-- rows and commits, the quarantine, its `running` report) is refused once it is stale, and the
-- driver exits when it sees that: a driver that wakes after it was replaced (SIGSTOP, a VM
-- pause, a network cut) writes nothing beside its successor. A NULL or 0 run is a test's or a
-- tool's own write, not a driver's: never fenced.
CREATE FUNCTION run_is_current(run bigint) RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT run IS NULL OR run = 0 OR NOT EXISTS (
        SELECT 1 FROM deployments d JOIN deployments n ON n.stage_id = d.stage_id AND n.role = d.role
        WHERE d.id = run AND n.id > d.id AND n.status <> 'refused')
$$;
CREATE INDEX deployments_stage_role_id ON deployments (stage_id, role, id);
