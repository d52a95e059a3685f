INSERT INTO operator_state (stage_id, prestaged) VALUES (%(stage_id)s, %(prestaged)s)
ON CONFLICT (stage_id) DO UPDATE SET prestaged = EXCLUDED.prestaged, updated_at = now()
