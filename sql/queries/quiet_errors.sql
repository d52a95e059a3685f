-- This session's failing statements are not logged with their text: a role statement carries its
-- password (psycopg2 interpolates it), and the server log is no place for one. Superuser only.
SET log_min_error_statement = panic
