-- psycopg2 parameter style: run on a raw connection (store/embedded.py).
SELECT 1 FROM pg_roles WHERE rolname = %(name)s
