SELECT * FROM staged_checkpoints WHERE stage_id = :stage_id AND status = 'ready'
