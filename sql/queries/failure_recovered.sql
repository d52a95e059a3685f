-- A failure ends with the first output of the run that recovered it: MTTR runs from the failure
-- to that output (`at`; NULL means the stage's first commit after the failure). The output gap
-- runs from the stage's last commit before the failure to its first commit after it by any
-- other run: with replicas, a surviving replica's next commit ends it, so a masked failure
-- costs about one trigger interval of output.
UPDATE failures f SET status = 'recovered', closed_at = now(), recovered_at = r.at,
       mttr_ms = EXTRACT(EPOCH FROM r.at - f.failed_at) * 1000,
       downtime_ms = EXTRACT(EPOCH FROM LEAST(r.at, COALESCE(r.other, r.at))
                                        - COALESCE(f.last_commit_at, f.failed_at)) * 1000,
       recovery_deployment_id = COALESCE(CAST(:deployment_id AS bigint), f.recovery_deployment_id)
FROM (SELECT x.id,
             COALESCE(CAST(:at AS timestamptz),
                      (SELECT min(c.committed_at) FROM sink_commits c
                       WHERE c.stage_id = x.stage_id AND c.committed_at > x.failed_at),
                      now()) AS at,
             (SELECT min(c.committed_at) FROM sink_commits c
              WHERE c.stage_id = x.stage_id AND c.committed_at > x.failed_at
                AND c.deployment_id IS DISTINCT FROM x.deployment_id) AS other
      FROM failures x WHERE x.id = :id) r
WHERE f.id = r.id AND f.status = 'recovering'
RETURNING f.mttr_ms, f.downtime_ms
