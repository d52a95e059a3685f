-- The stage's own rhythm: the longest gap between its commits in the minute up to t.
SELECT COALESCE(max(EXTRACT(EPOCH FROM committed_at - prev)), 0)
FROM (SELECT committed_at, lag(committed_at) OVER (ORDER BY committed_at) AS prev FROM sink_commits
      WHERE stage_id = :s AND committed_at BETWEEN :t - interval '60 seconds' AND :t) c
