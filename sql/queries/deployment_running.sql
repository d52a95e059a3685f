UPDATE deployments
SET status = 'running', running_at = now(), driver_id = :driver_id, pid = :pid, host = :host, ui_url = :ui_url
WHERE id = :id AND status IN ('starting', 'running') AND run_is_current(id)
