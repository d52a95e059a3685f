UPDATE deployments
SET pid = :pid, driver_id = COALESCE(:driver_id, driver_id), log_path = :log_path,
    host = COALESCE(:host, host), pid_started_at = :pid_started_at, ui_url = :ui_url
WHERE id = :id
