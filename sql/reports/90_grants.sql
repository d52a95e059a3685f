-- streamops_reader: SELECT on the reporting schema and nothing else. Roles are cluster-wide
-- (created once, whichever database migrates first); grants are per database, so they are
-- repeated here for every database this runs in. Without CREATEROLE the role is left to an
-- administrator and only the grants are attempted.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'streamops_reader') THEN
        BEGIN
            CREATE ROLE streamops_reader LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT;
        EXCEPTION WHEN insufficient_privilege OR duplicate_object THEN
            RAISE NOTICE 'streamops_reader not created: %', SQLERRM;
        END;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'streamops_reader') THEN
        -- an analyst's runaway query must not hold the platform's database
        BEGIN
            ALTER ROLE streamops_reader SET statement_timeout = '60s';
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE NOTICE 'streamops_reader statement_timeout not set: %', SQLERRM;
        END;
        GRANT USAGE ON SCHEMA reporting TO streamops_reader;
        GRANT SELECT ON ALL TABLES IN SCHEMA reporting TO streamops_reader;
        -- the jobs' typed result views (sink.table, 033_typed_sinks.sql), now and to come
        GRANT USAGE ON SCHEMA sinks TO streamops_reader;
        GRANT SELECT ON ALL TABLES IN SCHEMA sinks TO streamops_reader;
        ALTER DEFAULT PRIVILEGES IN SCHEMA sinks GRANT SELECT ON TABLES TO streamops_reader;
        -- the views call these SECURITY DEFINER functions; analysts may call them directly too
        GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA reporting TO streamops_reader;
    END IF;
END $$;

-- Functions are executable by PUBLIC by default; the SECURITY DEFINER ones read raw tables,
-- so only the owner and the reader may call them.
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA reporting FROM PUBLIC;

-- The platform's maintenance functions in public (partition creation, retention) are for the
-- owner only: a reader must get "permission denied", not reach a DROP inside them.
REVOKE EXECUTE ON FUNCTION public.stage_metrics_retention(integer, date, integer) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION public.records_retention(integer) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION public.runs_retention(integer) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION public.ensure_stage_metrics_partitions(date, integer) FROM PUBLIC;
