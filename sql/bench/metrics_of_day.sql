SELECT count(*) FROM stage_metrics WHERE ts >= :d AND ts < :d + 1
