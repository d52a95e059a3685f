SELECT name, r_max_ms FROM apps
