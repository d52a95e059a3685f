-- A run's last 10 batch durations up to t.
SELECT batch_duration_ms FROM stage_metrics WHERE deployment_id = :d AND ts <= :t ORDER BY ts DESC LIMIT 10
