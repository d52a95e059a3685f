SELECT stage_id FROM reconfigurations WHERE status = 'running'
