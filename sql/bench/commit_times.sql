-- Every commit with output before b, as epoch seconds.
SELECT extract(epoch FROM committed_at) AS at_s FROM sink_commits WHERE committed_at < :b AND rows > 0 ORDER BY 1
