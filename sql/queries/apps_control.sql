SELECT name, r_max_ms, maintenance_window, spec -> 'control' AS control FROM apps
WHERE CAST(:app AS text) IS NULL OR name = CAST(:app AS text)
ORDER BY name
