-- A scratch database (store/scratch.py), its sessions ended. The name placeholder is filled in
-- with psycopg2.sql.Identifier; DROP DATABASE cannot run inside a transaction (autocommit).
DROP DATABASE IF EXISTS {name} WITH (FORCE)
