-- The best p95 latency reported in each 1-second window of [a, b).
SELECT floor(extract(epoch FROM ts)) AS sec, min(latency_p95_ms) AS p95 FROM stage_metrics
WHERE ts >= :a AND ts < :b AND latency_p95_ms IS NOT NULL GROUP BY 1
