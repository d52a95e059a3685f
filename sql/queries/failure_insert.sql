-- A failure the watchdog or the supervisor found, written before it acts (persist first, then
-- act). It is 'injected' when the fault injector hit that run in the two minutes before: a kill,
-- a heartbeat cut or a database outage all end as a dead, silent or failed run.
INSERT INTO failures (stage_id, app, deployment_id, role, kind, detail, failed_at, last_commit_at, detected_by,
                      fault_id, cause)
SELECT :stage_id, :app, :deployment_id, :role, :kind, :detail, :failed_at, :last_commit_at, :detected_by,
       f.id, CASE WHEN f.id IS NULL THEN 'real' ELSE 'injected' END
FROM (SELECT 1) one
LEFT JOIN LATERAL (
    SELECT id FROM injected_faults
    WHERE deployment_id = :deployment_id AND injected_at > now() - interval '2 minutes'
    ORDER BY injected_at DESC LIMIT 1
) f ON true
RETURNING id
