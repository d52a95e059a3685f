INSERT INTO apps (name, r_max_ms, maintenance_window, spec)
VALUES (:name, :r_max_ms, CAST(:maintenance_window AS jsonb), CAST(:spec AS jsonb))
ON CONFLICT (name) DO UPDATE
    SET r_max_ms = EXCLUDED.r_max_ms, maintenance_window = EXCLUDED.maintenance_window, spec = EXCLUDED.spec, updated_at = now()
