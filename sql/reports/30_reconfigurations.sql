-- One row per reconfiguration: what changed, by which mechanism, who or what asked (a policy
-- through its Operator Manager request, or a user), the Application Manager's decision, every
-- phase stamp, the measured downtime (the raw output gap, and its excess over the stage's own
-- commit interval), the outcome and the rollback reason. `day` is the day it
-- was requested (server TimeZone). Small tables: a plain view, filters apply directly.
CREATE VIEW reporting.reconfigurations AS
SELECT r.id,
       r.requested_at::date                              AS day,
       r.app, r.stage_id, r.action, r.mechanism,
       r.from_cores, r.target_cores, r.from_pool, r.target_pool, r.target_partitions,
       split_part(r.requested_by, ':', 1)                AS requested_by_kind,   -- policy | user
       NULLIF(substr(r.requested_by, strpos(r.requested_by, ':') + 1), '') AS requested_by_name,
       r.request_id, q.policy AS request_policy, q.reason AS request_reason, q.gain AS request_gain,
       q.cost_ms AS request_cost_ms, q.created_at AS request_created_at,
       r.decision_id, dc.outcome AS decision_outcome, dc.reason AS decision_reason, dc.policy AS decision_policy,
       dc.decided_by, dc.decided_at, dc.urgent AS decision_urgent,
       r.requested_at, r.stop_requested_at, r.stopped_at, r.state_ready_at, r.restarted_at,
       r.first_batch_done_at, r.caught_up_at, r.finished_at,
       r.downtime_ms, r.downtime_ms / 1000.0            AS downtime_s,
       -- the stage's own commit interval in the minute before, and the gap beyond it: what the
       -- change cost (a live change, or none, shows about one interval of raw gap)
       r.commit_interval_ms,
       GREATEST(0, r.downtime_ms - COALESCE(r.commit_interval_ms, 0)) AS excess_gap_ms,
       GREATEST(0, r.downtime_ms - COALESCE(r.commit_interval_ms, 0)) / 1000.0 AS excess_gap_s,
       r.repartition_ms, r.state_bytes,
       -- whether the change rewrote the state offline (the stage outgrew its key groups, or a
       -- user asked for new state partitions): how often key groups did not suffice
       r.repartition_ms IS NOT NULL                     AS repartitioned,
       r.status, r.outcome, r.rollback_reason,
       r.old_deployment_id, r.new_deployment_id
FROM public.reconfigurations r
LEFT JOIN public.requests q ON q.id = r.request_id
LEFT JOIN public.decisions dc ON dc.id = r.decision_id;
