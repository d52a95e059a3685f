-- The outcome of a reconfiguration still in flight. One finished already (by the executor that
-- held it, or by a recovery that took it over) keeps its outcome: no row back.
UPDATE reconfigurations
SET status = :status, outcome = :outcome, rollback_reason = :rollback_reason, downtime_ms = :downtime_ms,
    commit_interval_ms = :commit_interval_ms, finished_at = now()
WHERE id = :id AND status IN ('pending', 'running')
RETURNING id
