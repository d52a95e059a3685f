-- Take a pending reconfiguration for execution. Exactly one caller gets the row.
-- Mechanism: the caller's, else the row's, else `prestaged` when the control loop staged a copy
-- at the alarming level (POLICIES.md §5, [001]), else `pause_resume`.
UPDATE reconfigurations r SET status = 'running', mechanism = COALESCE(
    :mechanism, r.mechanism,
    CASE WHEN EXISTS (SELECT 1 FROM staged_checkpoints s WHERE s.stage_id = r.stage_id AND s.status = 'ready')
         THEN 'prestaged' ELSE 'pause_resume' END)
WHERE r.id = :id AND r.status = 'pending'
RETURNING *
