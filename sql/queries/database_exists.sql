-- psycopg2 parameter style: run on a raw connection in autocommit (store/embedded.py).
SELECT 1 FROM pg_database WHERE datname = %(name)s
