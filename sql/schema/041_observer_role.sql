-- streamops_observer: the Streams page, /metrics and `streamops status` (store/observe.py) read
-- as it, so a hole in one of them can neither write nor read more than they show (issue 44).
-- SELECT on the tables their queries read and nothing else: of quarantine, not the records'
-- text (`raw`), only what the counts need. A new query on another table needs a grant here
-- (tests/integration/test_least_privilege.py fails without it). The role is cluster-wide and
-- created as in sql/reports/90_grants.sql; without CREATEROLE it is an administrator's to create.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'streamops_observer') THEN
        BEGIN
            CREATE ROLE streamops_observer LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT;
        EXCEPTION WHEN insufficient_privilege OR duplicate_object THEN
            RAISE NOTICE 'streamops_observer not created: %', SQLERRM;
        END;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'streamops_observer') THEN
        BEGIN  -- its sessions read only, whatever its client asks first
            ALTER ROLE streamops_observer SET default_transaction_read_only = on;
            ALTER ROLE streamops_observer SET statement_timeout = '60s';
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE NOTICE 'streamops_observer settings not set: %', SQLERRM;
        END;
        GRANT SELECT ON apps, stages, deployments, heartbeats, stage_metrics, failures, failures_pruned,
                        failure_gaps_pruned, reconfigurations, requests, batch_failures, input_anomalies,
                        reports TO streamops_observer;
        GRANT SELECT (stage_id, reason_kind, quarantined_at) ON quarantine TO streamops_observer;
    END IF;
END $$;
