-- The driver's word that its queries run. A successful start, whoever made it (the CLI, the DAG,
-- a reconfiguration), also puts a given-up stage back under the watchdog: the run the give-up was
-- about is repaired. Only a run of the role that was given up on clears it (a replica's start
-- says nothing of the primary).
WITH d AS (
    UPDATE deployments
    SET status = 'running', running_at = now(), driver_id = :driver_id, pid = :pid, host = :host, ui_url = :ui_url
    WHERE id = :id AND status IN ('starting', 'running') AND run_is_current(id)
    RETURNING stage_id, role
)
UPDATE stages s SET health = 'ok', health_reason = NULL
FROM d
WHERE s.stage_id = d.stage_id AND s.health = 'failed'
  AND d.role = COALESCE((SELECT f.role FROM failures f WHERE f.stage_id = d.stage_id AND f.status = 'gave_up'
                         ORDER BY f.id DESC LIMIT 1), d.role)
