-- Stages that get a warm spare driver from the supervisor: a running primary on a local pool.
-- One spare per stage, whichever of its replicas fails first takes it (they share their cores).
SELECT d.stage_id, d.cores
FROM deployments d
JOIN pools p ON p.name = d.pool
JOIN stages s ON s.stage_id = d.stage_id
WHERE d.role = 'primary' AND d.status = 'running' AND p.master LIKE 'local%' AND s.health = 'ok'
ORDER BY d.stage_id
