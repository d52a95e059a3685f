-- Stage s's latest admitted primary run.
SELECT * FROM deployments WHERE stage_id = :s AND role = 'primary' AND status <> 'refused'
ORDER BY started_at DESC LIMIT 1
