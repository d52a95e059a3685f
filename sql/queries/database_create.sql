-- The name placeholder is filled in with psycopg2.sql.Identifier (an identifier cannot be a bind
-- parameter); CREATE DATABASE cannot run inside a transaction, so the connection is in autocommit.
CREATE DATABASE {name}
