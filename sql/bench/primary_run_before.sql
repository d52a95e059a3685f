-- Stage s's primary run started last before t (a reconfiguration's old run, when unlinked).
SELECT * FROM deployments WHERE stage_id = :s AND role = 'primary' AND status <> 'refused' AND started_at < :t
ORDER BY started_at DESC LIMIT 1
