-- The run a gate validates: its stage, app, start and the stage's sink spec (from the run's own config
-- snapshot when present, else the registry row).
SELECT d.id, d.stage_id, s.app, d.started_at, d.status,
       COALESCE(d.config -> 'spec' -> 'sink', s.spec -> 'sink') AS sink
FROM deployments d JOIN stages s USING (stage_id)
WHERE d.id = CAST(:deployment_id AS bigint)
