-- A login role of the embedded cluster (store/roles.py), created with its password before the
-- first migration, which grants it what it needs (sql/reports/90_grants.sql, schema/041).
CREATE ROLE {role} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT PASSWORD %(password)s
