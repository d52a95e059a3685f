UPDATE reconfigurations
SET status = :status, outcome = :outcome, rollback_reason = :rollback_reason, downtime_ms = :downtime_ms,
    finished_at = now()
WHERE id = :id
