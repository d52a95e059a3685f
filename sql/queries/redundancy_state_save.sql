-- The redundancy manager's state after a period, many stages at once.
INSERT INTO redundancy_states (stage_id, r, direction, last_delta_ms, updated_at)
VALUES %s
ON CONFLICT (stage_id) DO UPDATE
    SET r = EXCLUDED.r, direction = EXCLUDED.direction, last_delta_ms = EXCLUDED.last_delta_ms,
        updated_at = EXCLUDED.updated_at
