-- Failures recorded after id `after_id`, oldest first, at most `lim`: what the failure-events
-- trigger (orchestrate/failure_events.py) turns into asset events for the watchdog DAG.
SELECT id, stage_id, app, role, kind, detected_by, detected_at
FROM failures
WHERE id > :after_id
ORDER BY id
LIMIT :lim
