-- What the re-plan knows of each stage of :apps when it grants (plan.change.StageNow): its live
-- primary's cores, pool and partitions, whether a reconfiguration of it is pending or running,
-- and when it last settled: its run's start or its last change's end (a cancelled one changed
-- nothing), whichever is later.
SELECT s.stage_id, d.cores, d.pool, d.state_partitions,
       EXISTS (SELECT 1 FROM reconfigurations r
               WHERE r.stage_id = s.stage_id AND r.status IN ('pending', 'running')) AS in_flight,
       GREATEST(COALESCE(d.running_at, d.started_at),
                (SELECT max(r.finished_at) FROM reconfigurations r
                 WHERE r.stage_id = s.stage_id AND r.status <> 'cancelled')) AS settled_at
FROM stages s
LEFT JOIN LATERAL (
    SELECT cores, pool, state_partitions, running_at, started_at FROM deployments
    WHERE stage_id = s.stage_id AND role = 'primary' AND status IN ('starting', 'running')
    ORDER BY started_at DESC LIMIT 1
) d ON true
WHERE s.app = ANY(CAST(:apps AS text[]))
