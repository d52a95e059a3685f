-- The longest gap between stage s's commits from its last commit at or before t on.
SELECT max(EXTRACT(EPOCH FROM committed_at - prev))
FROM (SELECT committed_at, lag(committed_at) OVER (ORDER BY committed_at) AS prev FROM sink_commits
      WHERE stage_id = :s
        AND committed_at >= (SELECT max(committed_at) FROM sink_commits WHERE stage_id = :s AND committed_at <= :t)) c
