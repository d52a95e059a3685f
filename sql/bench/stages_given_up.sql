SELECT stage_id FROM stages WHERE health = 'failed'
