SELECT min(committed_at) FROM sink_commits WHERE deployment_id = :d AND committed_at >= :t
