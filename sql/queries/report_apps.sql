-- What the report needs of each app besides the reporting views: its Application Manager options
-- (β) and its SLO target (apps.yaml `slo_target`; NULL in specs synced before it existed).
SELECT name AS app, r_max_ms, spec -> 'control' AS control,
       CAST(spec ->> 'slo_target' AS double precision) AS slo_target
FROM apps
WHERE CAST(:app AS text) IS NULL OR name = CAST(:app AS text)
ORDER BY name
