-- Database {name} and every object in it become {owner}'s (Airflow's metadata, made by the
-- superuser before its own role existed): its migrations alter their tables. REASSIGN OWNED
-- cannot do it: the bootstrap superuser's system objects are not movable. Run inside {name}.
ALTER DATABASE {name} OWNER TO {owner};
-- public is pg_database_owner's, whose rights a NOINHERIT owner does not use: said outright.
GRANT USAGE, CREATE ON SCHEMA public TO {owner};
DO $$
DECLARE
    stmt text;
BEGIN
    FOR stmt IN
        SELECT format('ALTER %s %s OWNER TO %I',
                      CASE c.relkind WHEN 'S' THEN 'SEQUENCE' WHEN 'v' THEN 'VIEW'
                                     WHEN 'm' THEN 'MATERIALIZED VIEW' ELSE 'TABLE' END,
                      c.oid::regclass, {owner_name})
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_%'
          AND c.relkind IN ('r', 'p', 'v', 'm', 'S') AND pg_get_userbyid(c.relowner) <> {owner_name}
          -- a serial's sequence follows its table
          AND NOT (c.relkind = 'S' AND EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = c.oid
                                               AND d.classid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')))
        UNION ALL
        SELECT format('ALTER TYPE %s OWNER TO %I', t.oid::regtype, {owner_name})
        FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace
        WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_%'
          AND t.typtype IN ('e', 'd') AND pg_get_userbyid(t.typowner) <> {owner_name}
        UNION ALL
        SELECT format('ALTER ROUTINE %s OWNER TO %I', p.oid::regprocedure, {owner_name})
        FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_%'
          AND pg_get_userbyid(p.proowner) <> {owner_name}
    LOOP
        EXECUTE stmt;
    END LOOP;
END $$
