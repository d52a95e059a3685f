-- Every live HA stage under the redundancy manager: its options, wanted replicas, saved state,
-- the app's R_max, and the tail latency of its output over the manager's period. The tail is the
-- p90 over 1-second windows ([002]) of the best replica's p95 in each: the sink shows the output
-- of whichever replica is ahead, so the stage is as slow as its fastest replica. The window is
-- the period, and at least 10 s (ten windows, so that a p90 means something).
-- The proactive rule's Outlook (plan.redundancy): the failures of the stage's primary in the last
-- hour (when they failed, epoch seconds; the rule counts those within its fault window) with the
-- mean output gap they caused, and the stage's mean time to recovery, what a new replica's start
-- takes (NULL without a recovered failure).
WITH ha AS (
    SELECT s.stage_id, s.app, s.replicas, s.spec -> 'redundancy' AS redundancy, a.r_max_ms,
           COALESCE((s.spec -> 'redundancy' ->> 'period_s')::float8, CAST(:period_s AS float8)) AS period_s
    FROM stages s JOIN apps a ON a.name = s.app
    WHERE s.health = 'ok' AND jsonb_typeof(s.spec -> 'redundancy') = 'object'
      AND COALESCE((s.spec -> 'redundancy' ->> 'enabled')::boolean, CAST(:enabled AS boolean))
      AND EXISTS (SELECT 1 FROM deployments d WHERE d.stage_id = s.stage_id AND d.role = 'primary'
                  AND d.status = 'running')
),
seconds AS (
    SELECT m.stage_id, date_trunc('second', m.ts) AS sec, min(m.latency_p95_ms) AS best_p95
    FROM stage_metrics m JOIN ha USING (stage_id)
    WHERE m.ts > CAST(:now AS timestamptz) - make_interval(secs => GREATEST(ha.period_s, 10))
      AND m.ts <= CAST(:now AS timestamptz) AND m.latency_p95_ms IS NOT NULL
    GROUP BY m.stage_id, date_trunc('second', m.ts)
)
SELECT ha.*, st.r, st.direction, st.last_delta_ms, st.updated_at, st.proactive, st.hold_until,
       (SELECT percentile_cont(0.9) WITHIN GROUP (ORDER BY x.best_p95) FROM seconds x
        WHERE x.stage_id = ha.stage_id) AS tail_ms,
       f.fault_times_s, f.stop_ms, f.mttr_ms
FROM ha
LEFT JOIN redundancy_states st USING (stage_id)
LEFT JOIN LATERAL (
    SELECT array_agg(extract(epoch FROM x.failed_at)::float8 ORDER BY x.failed_at)
               FILTER (WHERE x.failed_at > CAST(:now AS timestamptz) - interval '1 hour') AS fault_times_s,
           avg(x.downtime_ms) FILTER (WHERE x.failed_at > CAST(:now AS timestamptz) - interval '1 hour') AS stop_ms,
           avg(x.mttr_ms) AS mttr_ms
    FROM failures x
    LEFT JOIN deployments d ON d.id = x.deployment_id
    WHERE x.stage_id = ha.stage_id AND COALESCE(d.role, 'primary') = 'primary'
      AND x.failed_at <= CAST(:now AS timestamptz)
) f ON true
ORDER BY ha.stage_id
