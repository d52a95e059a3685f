SELECT count(*) FROM stage_metrics
