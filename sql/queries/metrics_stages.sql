-- The Prometheus exporter's per-stage gauges: replicas live (primary and 'replica-N' runs that are
-- running) and wanted, whether the watchdog gave up on the stage, and its checkpoint's size as the
-- supervisor last measured it (checkpoint_sizes; NULL before a measurement).
SELECT s.app, s.name AS stage, s.replicas AS replicas_wanted, s.health = 'failed' AS given_up,
       (SELECT count(*) FROM deployments d
        WHERE d.stage_id = s.stage_id AND d.status = 'running'
          AND (d.role = 'primary' OR d.role LIKE 'replica-%')) AS replicas,
       cs.bytes AS checkpoint_bytes
FROM stages s
LEFT JOIN checkpoint_sizes cs ON cs.stage_id = s.stage_id
ORDER BY s.app, s.name
