INSERT INTO app_control (app, tokens, window_start, window_actions, last_cycle_at, last_response_ms)
VALUES (%(app)s, %(tokens)s, %(window_start)s, %(window_actions)s, %(last_cycle_at)s, %(last_response_ms)s)
ON CONFLICT (app) DO UPDATE
    SET tokens = EXCLUDED.tokens, window_start = EXCLUDED.window_start, window_actions = EXCLUDED.window_actions,
        last_cycle_at = EXCLUDED.last_cycle_at, last_response_ms = EXCLUDED.last_response_ms
