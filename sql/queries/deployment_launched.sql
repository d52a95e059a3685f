UPDATE deployments SET pid = :pid, driver_id = COALESCE(:driver_id, driver_id), log_path = :log_path WHERE id = :id
