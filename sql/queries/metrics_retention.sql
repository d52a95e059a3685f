SELECT action, target, detail
FROM stage_metrics_retention(CAST(:keep_days AS integer), CAST(:today AS date), CAST(:ahead_days AS integer))
