-- A run's first output commit. After `after` (a change made in the running driver, e.g. executors
-- that registered then), the first commit of a batch that started after it: a batch in flight
-- across the change ran on the executors from before, and its commit is not the change's first
-- batch. Started after = its metrics row's start (ts) is, or it was planned after (its id at least
-- two past the last one committed by then), for a run whose metrics row is late or lost.
SELECT min(c.committed_at) FROM sink_commits c
WHERE c.deployment_id = :deployment_id
  AND (CAST(:after AS timestamptz) IS NULL
       OR (c.committed_at > CAST(:after AS timestamptz)
           AND (c.batch_id >= (SELECT COALESCE(max(b.batch_id), -2) + 2 FROM sink_commits b
                               WHERE b.deployment_id = c.deployment_id AND b.committed_at <= CAST(:after AS timestamptz))
                OR EXISTS (SELECT 1 FROM stage_metrics m
                           WHERE m.stage_id = c.stage_id AND m.deployment_id = c.deployment_id
                             AND m.batch_id = c.batch_id AND m.ts >= CAST(:after AS timestamptz)))))
