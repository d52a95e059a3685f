SELECT stage_id FROM stages
