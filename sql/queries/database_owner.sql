-- psycopg2 parameter style: the owner of database %(name)s, or no row.
SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = %(name)s
