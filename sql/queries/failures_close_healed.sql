-- Failures closed at the stage's first commit after they began, by any run: the embedded
-- cluster's (its master or a worker died and was restarted; the run went on) and the embedded
-- Kafka broker's (`broker_lost`, execute/broker_heal.py), after the heal, which
-- is when they were recorded; and output gaps (execute/gaps.py), after the last commit they are
-- backdated to, so that their downtime is the gap.
WITH healed AS (
    SELECT f.id,
           (SELECT min(c.committed_at) FROM sink_commits c
            WHERE c.stage_id = f.stage_id
              AND c.committed_at > CASE WHEN f.kind = 'output_gap' THEN f.failed_at ELSE f.detected_at END) AS at
    FROM failures f
    WHERE f.status = 'recovering' AND f.kind IN ('master_lost', 'worker_lost', 'broker_lost', 'output_gap')
)
UPDATE failures f SET status = 'recovered', closed_at = now(), recovered_at = h.at,
       mttr_ms = EXTRACT(EPOCH FROM h.at - f.failed_at) * 1000,
       downtime_ms = EXTRACT(EPOCH FROM h.at - COALESCE(f.last_commit_at, f.failed_at)) * 1000,
       recovery_deployment_id = f.deployment_id
FROM healed h
WHERE f.id = h.id AND h.at IS NOT NULL AND f.status = 'recovering'
RETURNING f.id, f.stage_id, f.role, f.kind, f.mttr_ms
