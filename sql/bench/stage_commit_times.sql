-- Every commit of stage s before b, as epoch seconds.
SELECT extract(epoch FROM committed_at) AS at_s FROM sink_commits WHERE stage_id = :s AND committed_at < :b ORDER BY 1
