-- The Prometheus exporter's per-stage gauges: replicas live (primary and 'replica-N' runs that are
-- running) and wanted, and whether the watchdog gave up on the stage.
SELECT s.app, s.name AS stage, s.replicas AS replicas_wanted, s.health = 'failed' AS given_up,
       (SELECT count(*) FROM deployments d
        WHERE d.stage_id = s.stage_id AND d.status = 'running'
          AND (d.role = 'primary' OR d.role LIKE 'replica-%')) AS replicas
FROM stages s
ORDER BY s.app, s.name
