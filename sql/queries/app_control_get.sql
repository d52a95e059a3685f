SELECT tokens, window_start, window_actions FROM app_control WHERE app = :app
