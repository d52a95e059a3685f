SELECT ensure_stage_metrics_partitions(:d, 1)
