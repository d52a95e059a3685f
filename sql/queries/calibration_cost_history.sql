-- The simulator's calibration (sim/calibrate.py): what one stage's changes have cost, as
-- cost_history.sql has it for plan/cost.py (every finished reconfiguration's output gap by
-- mechanism, every recovered failure's), with each row's id, so that a replayed change can be
-- left out of the restart cost it is replayed with (a leave-one-out). Oldest first.
(SELECT 'reconfiguration' AS kind, id, stage_id, action, mechanism, COALESCE(state_bytes, 0) AS state_bytes,
        downtime_ms, COALESCE(EXTRACT(EPOCH FROM caught_up_at - first_batch_done_at) * 1000, 0) AS catch_up_ms,
        finished_at AS at
 FROM reconfigurations
 WHERE stage_id = :stage_id AND status = 'done' AND downtime_ms IS NOT NULL)
UNION ALL
(SELECT 'failure', id, stage_id, 'restart', 'recovery', 0, downtime_ms, 0, closed_at
 FROM failures
 WHERE stage_id = :stage_id AND status = 'recovered' AND downtime_ms IS NOT NULL)
ORDER BY at
