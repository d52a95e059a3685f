SELECT stage_id, prestaged FROM operator_state
