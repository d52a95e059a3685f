-- The redundancy manager's state after a period, many stages at once.
INSERT INTO redundancy_states (stage_id, r, direction, last_delta_ms, updated_at, proactive, hold_until)
VALUES (%(stage_id)s, %(r)s, %(direction)s, %(last_delta_ms)s, %(updated_at)s, %(proactive)s, %(hold_until)s)
ON CONFLICT (stage_id) DO UPDATE
    SET r = EXCLUDED.r, direction = EXCLUDED.direction, last_delta_ms = EXCLUDED.last_delta_ms,
        updated_at = EXCLUDED.updated_at, proactive = EXCLUDED.proactive, hold_until = EXCLUDED.hold_until
