-- Take a pending reconfiguration for execution. Exactly one caller gets the row. The mechanism
-- is the caller's, else the row's (a user's request), else pause_resume; the executor passes
-- the cost rule's choice (plan.mechanism.choose_mechanism) for a plan that names none.
UPDATE reconfigurations SET status = 'running', mechanism = COALESCE(:mechanism, mechanism, 'pause_resume')
WHERE id = :id AND status = 'pending'
RETURNING *
