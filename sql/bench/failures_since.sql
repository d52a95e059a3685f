SELECT stage_id, kind, status, mttr_ms, downtime_ms FROM failures WHERE detected_at >= :a
