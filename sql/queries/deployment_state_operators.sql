-- The run's stateful operators, learned from its first progress (031_jobs.sql); once per run.
UPDATE deployments SET state_operators = CAST(:operators AS jsonb)
WHERE id = :deployment_id AND state_operators IS NULL
