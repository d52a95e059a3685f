-- One row per registered stage: its latest run, latest batch metrics, heartbeat age and quarantine
-- count (last 24 h); for an HA stage also its live replicas and which one leads (the least input
-- left to read).
WITH latest_run AS (  -- the primary's line (or an active backup's); replicas are counted below
    SELECT DISTINCT ON (stage_id) * FROM deployments WHERE role NOT LIKE 'replica-%'
    ORDER BY stage_id, started_at DESC, id DESC
),
replica_backlog AS (
    SELECT DISTINCT ON (d.id) d.stage_id, d.role, m.backlog_rows, m.ts
    FROM deployments d LEFT JOIN stage_metrics m ON m.deployment_id = d.id AND m.ts > now() - interval '5 minutes'
    WHERE d.status = 'running' AND (d.role = 'primary' OR d.role LIKE 'replica-%')
    ORDER BY d.id, m.ts DESC NULLS LAST
),
replicas AS (
    SELECT stage_id, count(*) AS live_replicas,
           (array_agg(role ORDER BY backlog_rows ASC NULLS LAST, ts DESC NULLS LAST))[1] AS leader
    FROM replica_backlog GROUP BY stage_id
),
latest_batch AS (
    SELECT DISTINCT ON (m.stage_id) m.*
    FROM stage_metrics m JOIN latest_run r ON r.id = m.deployment_id
    WHERE m.ts > now() - interval '1 day'
    ORDER BY m.stage_id, m.ts DESC
),
latest_input AS (  -- latency only of batches that read input: an idle stage is not slow
    SELECT DISTINCT ON (m.stage_id) m.stage_id, m.latency_p95_ms
    FROM stage_metrics m JOIN latest_run r ON r.id = m.deployment_id
    WHERE m.ts > now() - interval '60 seconds' AND m.input_rows > 0
    ORDER BY m.stage_id, m.ts DESC
),
recent AS (  -- rates over the last minute are steadier than one batch's; replicas read the same input
    SELECT m.stage_id, sum(m.input_rows) / 60.0 AS in_rps, sum(m.output_rows) / 60.0 AS out_rps
    FROM stage_metrics m JOIN deployments d ON d.id = m.deployment_id
    WHERE m.ts > now() - interval '60 seconds' AND d.role NOT LIKE 'replica-%' GROUP BY m.stage_id
),
q AS (  -- the last 24 h (quarantine_time): the whole table is 90 days of lines, read on every refresh
    SELECT stage_id, count(*) AS quarantined FROM quarantine
    WHERE quarantined_at > now() - interval '1 day' GROUP BY stage_id
),
plan AS (  -- what the control loop has in store for the stage: a planned change, else a deferred one
    SELECT DISTINCT ON (stage_id) stage_id, label FROM (
        SELECT stage_id, 1 AS prio, requested_at AS at,
               action || '→' || COALESCE(target_cores::text, target_pool) || ' ' || status AS label
        FROM reconfigurations WHERE status IN ('pending', 'running')
        UNION ALL
        SELECT r.stage_id, 2, r.refreshed_at,
               r.action || '→' || COALESCE(r.target_cores::text, r.target_pool) || ' deferred'
        FROM requests r WHERE r.status = 'deferred'
    ) x ORDER BY stage_id, prio, at DESC
),
last_change AS (  -- the newest finished change of the last day, and why it was made (a policy's reason)
    SELECT DISTINCT ON (c.stage_id) c.stage_id,
           format('%s %s→%s %s %s %s', c.action, COALESCE(c.from_cores::text, c.from_pool),
                  COALESCE(c.target_cores::text, c.target_pool), COALESCE(c.mechanism, ''), c.status,
                  to_char(c.finished_at, 'HH24:MI')) AS label,
           COALESCE(rq.reason, c.requested_by) AS reason
    FROM reconfigurations c LEFT JOIN requests rq ON rq.id = c.request_id
    WHERE c.finished_at > now() - interval '1 day'
    ORDER BY c.stage_id, c.finished_at DESC
)
SELECT s.stage_id, s.app, s.job, COALESCE(r.pool, s.pool) AS pool,  -- where the run is (a migration moves it)
       COALESCE(r.status, 'never started') AS status,
       r.id AS deployment_id, r.pid,
       -- the live run's Spark UI; NULL when the run is over (its UI went with it), the pool has
       -- spark_ui: false, or the run is older than schema 029
       CASE WHEN r.status IN ('starting', 'running', 'stopping') THEN r.ui_url END AS ui_url,
       COALESCE(r.cores, s.cores) AS cores,
       COALESCE(r.state_partitions, s.state_partitions) AS partitions,
       rc.in_rps, rc.out_rps,
       b.batch_id, li.latency_p95_ms, b.backlog_files, b.backlog_rows, b.batch_duration_ms,
       EXTRACT(EPOCH FROM now() - h.beat_at) AS heartbeat_age_s,
       CAST(h.info ->> 'quarantine_backlog_files' AS integer) AS quarantine_backlog_files,
       CAST(h.info ->> 'executors' AS integer) AS executors,  -- NULL in local mode
       COALESCE(q.quarantined, 0) AS quarantined,
       pl.label AS plan,
       lc.label AS last_change, lc.reason AS last_change_reason,
       r.stop_reason,
       s.health, s.health_reason,
       s.replicas, COALESCE(rp.live_replicas, 0) AS live_replicas, rp.leader,
       cs.bytes AS checkpoint_bytes, cs.disk_bytes AS checkpoint_disk_bytes,  -- measured by the supervisor
       cs.measured_at AS checkpoint_measured_at,
       (SELECT count(*) FROM failures f WHERE f.stage_id = s.stage_id AND f.detected_at > now() - interval '1 day') AS failures_24h,
       (SELECT string_agg(CASE WHEN bf.quarantined_files IS NULL
                               THEN format('batch %s quarantined whole: %s', bf.batch_id, bf.error)
                               ELSE format('batch %s: %s of its %s file(s) quarantined: %s', bf.batch_id,
                                           cardinality(bf.quarantined_files), cardinality(bf.files), bf.error) END,
                          '; ' ORDER BY bf.batch_id)
        FROM batch_failures bf WHERE bf.stage_id = s.stage_id AND bf.status = 'quarantined'
        AND bf.quarantined_at > now() - interval '1 day') AS poison_24h,
       (SELECT string_agg(format('%s %s', CASE ia.kind WHEN 'subdirectory' THEN 'sub-directory not read:'
                                                      ELSE 'changed after it was read, not fully counted:' END, ia.path),
                          '; ' ORDER BY ia.path)
        FROM input_anomalies ia WHERE ia.stage_id = s.stage_id
        AND ia.updated_at > now() - interval '1 day') AS input_24h
FROM stages s
LEFT JOIN latest_run r ON r.stage_id = s.stage_id
LEFT JOIN latest_batch b ON b.stage_id = s.stage_id
LEFT JOIN latest_input li ON li.stage_id = s.stage_id
LEFT JOIN recent rc ON rc.stage_id = s.stage_id
LEFT JOIN heartbeats h ON h.deployment_id = r.id
LEFT JOIN q ON q.stage_id = s.stage_id
LEFT JOIN plan pl ON pl.stage_id = s.stage_id
LEFT JOIN last_change lc ON lc.stage_id = s.stage_id
LEFT JOIN replicas rp ON rp.stage_id = s.stage_id
LEFT JOIN checkpoint_sizes cs ON cs.stage_id = s.stage_id
ORDER BY s.app, s.stage_id
