SELECT count(*) FROM sink_outputs WHERE stage_id = :s
