-- The embedded cluster's read-only role, created with its password before the first migration;
-- sql/reports/90_grants.sql gives it SELECT on `reporting` and its statement timeout.
CREATE ROLE {role} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT PASSWORD %(password)s
