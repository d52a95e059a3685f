-- Downtime: the longest gap between consecutive output commits of the stage around the action
-- (from the last commit before the stop request to the first commits of the new run), in ms.
WITH c AS (
    SELECT committed_at, lag(committed_at) OVER (ORDER BY committed_at) AS prev
    FROM sink_commits
    WHERE stage_id = :stage_id AND committed_at BETWEEN CAST(:from_ts AS timestamptz) AND CAST(:to_ts AS timestamptz)
)
SELECT COALESCE(max(EXTRACT(EPOCH FROM committed_at - prev) * 1000), 0)::float8 FROM c
