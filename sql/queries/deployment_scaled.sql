-- A live run now holds `to_cores`: admission counts them from here on; the change is kept for cost.
WITH d AS (
    UPDATE deployments SET cores = :to_cores
    WHERE id = :deployment_id AND status IN ('starting', 'running', 'stopping')
    RETURNING id
)
INSERT INTO deployment_scaling (deployment_id, from_cores, to_cores, reconfiguration_id)
SELECT id, :from_cores, :to_cores, :reconfiguration_id FROM d
RETURNING id
