-- A database outage the supervisor lived through (its polls failed from :since, its last good one,
-- to :until): an `output_gap` failure for each stage whose primary run was running across it, had
-- input (it committed within its limit before the outage, its beat says input waits, or it wrote
-- rows within its limit after the return: they were waiting) and has
-- committed nothing for longer than its limit after its last commit before the outage: until its
-- first commit after, or now. Not where a failure or a reconfiguration of the stage covers the gap
-- already. Closed at that first commit by failures_close_healed.sql.
INSERT INTO failures (stage_id, app, deployment_id, role, kind, detail, failed_at, last_commit_at, detected_by)
SELECT d.stage_id, s.app, d.id, d.role, 'output_gap', :detail, lc.at, lc.at, :detected_by
FROM (SELECT DISTINCT ON (stage_id) * FROM deployments
      WHERE role = 'primary' AND status <> 'refused'
      ORDER BY stage_id, started_at DESC, id DESC) d
JOIN stages s ON s.stage_id = d.stage_id
LEFT JOIN heartbeats h ON h.deployment_id = d.id
CROSS JOIN LATERAL (SELECT max(c.committed_at) AS at FROM sink_commits c
                    WHERE c.stage_id = d.stage_id AND c.committed_at <= CAST(:since AS timestamptz)) lc
CROSS JOIN LATERAL (SELECT COALESCE(min(c.committed_at), now()) AS at FROM sink_commits c
                    WHERE c.stage_id = d.stage_id AND c.committed_at > CAST(:since AS timestamptz)) nc
CROSS JOIN LATERAL (SELECT make_interval(secs => GREATEST(
                        3 * COALESCE(CAST(d.config -> 'spec' ->> 'trigger_interval_ms' AS float8), 1000) / 1000,
                        CAST(:floor_s AS float8))) AS lim) l
WHERE d.status = 'running' AND d.running_at <= lc.at  -- it had committed: a starting run is its starter's
  AND nc.at - lc.at > l.lim
  AND (lc.at >= CAST(:since AS timestamptz) - l.lim OR COALESCE(CAST(h.info ->> 'backlog_files' AS bigint), 0) > 0
       OR EXISTS (SELECT 1 FROM sink_commits c
                  WHERE c.stage_id = d.stage_id AND c.rows > 0 AND c.committed_at > CAST(:since AS timestamptz)
                    AND c.committed_at <= CAST(:until AS timestamptz) + l.lim))
  AND NOT EXISTS (SELECT 1 FROM failures f
                  WHERE f.stage_id = d.stage_id
                    AND tstzrange(COALESCE(f.last_commit_at, f.failed_at),
                              GREATEST(COALESCE(f.last_commit_at, f.failed_at), COALESCE(f.recovered_at, f.closed_at)))
                        && tstzrange(lc.at, nc.at))
  AND NOT EXISTS (SELECT 1 FROM reconfigurations r
                  WHERE r.stage_id = d.stage_id AND tstzrange(r.requested_at, GREATEST(r.requested_at, r.finished_at)) && tstzrange(lc.at, nc.at))
ON CONFLICT (stage_id, role) WHERE status = 'recovering' DO NOTHING
RETURNING id, stage_id
