-- What each stage's changes have cost (plan/cost.py): every finished reconfiguration's output
-- gap and catch-up, by mechanism, and every recovered failure's output gap (a restart from the
-- checkpoint: what a pause-resume costs without the repartition). Newest first.
(SELECT stage_id, action, mechanism, COALESCE(state_bytes, 0) AS state_bytes, downtime_ms,
        COALESCE(EXTRACT(EPOCH FROM caught_up_at - first_batch_done_at) * 1000, 0) AS catch_up_ms,
        finished_at AS at
 FROM reconfigurations
 WHERE status = 'done' AND downtime_ms IS NOT NULL
 ORDER BY finished_at DESC
 LIMIT 5000)
UNION ALL
(SELECT stage_id, 'restart', 'recovery', 0, downtime_ms, 0, closed_at
 FROM failures
 WHERE status = 'recovered' AND downtime_ms IS NOT NULL
 ORDER BY closed_at DESC
 LIMIT 5000)
ORDER BY at DESC
