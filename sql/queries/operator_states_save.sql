INSERT INTO operator_state (stage_id, prestaged) VALUES %s
ON CONFLICT (stage_id) DO UPDATE SET prestaged = EXCLUDED.prestaged, updated_at = now()
