SELECT min(committed_at) FROM sink_commits WHERE deployment_id = :deployment_id
