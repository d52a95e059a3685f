-- A failure ends with the first output after it: MTTR from the failure, output gap from the last
-- commit before it. `at` is that first output; NULL means the stage's first commit after the failure.
UPDATE failures f SET status = 'recovered', closed_at = now(), recovered_at = r.at,
       mttr_ms = EXTRACT(EPOCH FROM r.at - f.failed_at) * 1000,
       downtime_ms = EXTRACT(EPOCH FROM r.at - COALESCE(f.last_commit_at, f.failed_at)) * 1000,
       recovery_deployment_id = COALESCE(CAST(:deployment_id AS bigint), f.recovery_deployment_id)
FROM (SELECT x.id, COALESCE(CAST(:at AS timestamptz),
                            (SELECT min(c.committed_at) FROM sink_commits c
                             WHERE c.stage_id = x.stage_id AND c.committed_at > x.failed_at),
                            now()) AS at
      FROM failures x WHERE x.id = :id) r
WHERE f.id = r.id AND f.status = 'recovering'
RETURNING f.mttr_ms, f.downtime_ms
