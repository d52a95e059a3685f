-- A team's views (apps.yaml `views:`) are readable by the analysts' role, as the platform's are
-- (sql/reports/90_grants.sql); without the role (no CREATEROLE) there is nothing to grant.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'streamops_reader') THEN
        GRANT SELECT ON ALL TABLES IN SCHEMA reporting TO streamops_reader;
    END IF;
END $$
