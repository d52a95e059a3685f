-- Take a pending reconfiguration for execution. Exactly one caller gets the row.
UPDATE reconfigurations SET status = 'running', mechanism = COALESCE(:mechanism, mechanism, 'pause_resume')
WHERE id = :id AND status = 'pending'
RETURNING *
