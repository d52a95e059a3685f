-- A live run repartitioned its state in its own driver: a restart of this row must not undo it.
UPDATE deployments SET state_partitions = :state_partitions
WHERE id = :deployment_id AND status IN ('starting', 'running', 'stopping')
RETURNING id
