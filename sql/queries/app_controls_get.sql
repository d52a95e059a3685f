SELECT app, tokens, window_start, window_actions FROM app_control WHERE app = ANY(CAST(:apps AS text[]))
