-- The final word on a run. Only a live run changes, so a late report never rewrites history.
UPDATE deployments
SET status = :status, stopped_at = now(), stop_reason = :reason, exit_code = COALESCE(:exit_code, exit_code)
WHERE id = :id AND status IN ('starting', 'running', 'stopping')
