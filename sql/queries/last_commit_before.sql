SELECT max(committed_at) FROM sink_commits WHERE stage_id = :stage_id AND committed_at <= CAST(:ts AS timestamptz)
