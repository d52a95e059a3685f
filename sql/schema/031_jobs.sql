-- A stage runs a team's own job (issue 43): `stages.job` is its import path (`module:function`),
-- not one of a closed list of workloads. What the platform needs to know of the query it learns
-- from the query itself: each run records its stateful operators (from the query's progress),
-- so a mechanism's choice reads what the query does, not what its name suggests.
ALTER TABLE stages RENAME COLUMN workload TO job;
ALTER TABLE deployments ADD COLUMN state_operators jsonb;
COMMENT ON COLUMN deployments.state_operators IS
    'the run''s stateful operators, from its first progress: [{"operator": "stateStoreSave", "partitions": 4}], '
    '[] for a stateless query, NULL until the run has made progress';
