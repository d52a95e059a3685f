-- What the re-plan knows of each stage of :apps when it grants (plan.change.StageNow): its live
-- primary's cores, pool and partitions (and its pool's master and executor size, from its
-- spec: whether it can scale live), whether a reconfiguration of it is pending or running,
-- and when it last settled: its run's start or its last change's end (a cancelled one changed
-- nothing), whichever is later; and its latest resizing change that took effect or may
-- (plan.stability: a change reversing it within reversal_interval_s is declined).
SELECT s.stage_id, d.cores, d.pool, d.state_partitions,
       d.config -> 'pool' ->> 'master' AS pool_master,
       CAST(d.config -> 'pool' ->> 'executor_cores' AS integer) AS executor_cores,
       lc.action AS last_action, lc.from_cores AS last_from_cores, lc.target_cores AS last_to_cores,
       lc.requested_at AS last_requested_at,
       EXISTS (SELECT 1 FROM reconfigurations r
               WHERE r.stage_id = s.stage_id AND r.status IN ('pending', 'running')) AS in_flight,
       GREATEST(COALESCE(d.running_at, d.started_at),
                (SELECT max(r.finished_at) FROM reconfigurations r
                 WHERE r.stage_id = s.stage_id AND r.status <> 'cancelled')) AS settled_at
FROM stages s
LEFT JOIN LATERAL (
    SELECT cores, pool, state_partitions, config, running_at, started_at FROM deployments
    WHERE stage_id = s.stage_id AND role = 'primary' AND status IN ('starting', 'running')
    ORDER BY started_at DESC LIMIT 1
) d ON true
LEFT JOIN LATERAL (
    SELECT action, from_cores, target_cores, requested_at FROM reconfigurations
    WHERE stage_id = s.stage_id AND action IN ('scale_out', 'scale_in')
      AND status NOT IN ('cancelled', 'failed', 'rolled_back')
    ORDER BY requested_at DESC LIMIT 1
) lc ON true
WHERE s.app = ANY(CAST(:apps AS text[]))
