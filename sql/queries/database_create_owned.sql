-- Identifiers filled in with psycopg2.sql.Identifier; CREATE DATABASE runs in autocommit.
CREATE DATABASE {name} OWNER {owner}
