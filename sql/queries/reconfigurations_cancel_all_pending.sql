-- The platform goes down (`streamops down`): every reconfiguration not yet started is cancelled
-- with the reason, so that none runs after the next start, unasked. Claimed ones are their
-- executor's (a dead executor's `running` row is rolled back by resume).
UPDATE reconfigurations SET status = 'cancelled', outcome = :outcome, finished_at = now()
WHERE status = 'pending'
RETURNING id, stage_id, action, target_cores, target_pool
