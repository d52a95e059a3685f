DELETE FROM sink_outputs WHERE stage_id = :s
