SELECT count(*) FROM sink_commits WHERE stage_id = :s AND committed_at > :t
