-- A job's results by name, typed (issue 43): `sink.table: T` gives analysts `sinks.T`, a view over
-- the stage's rows in sink_outputs with one column per output column of the job, cast to its
-- type. A view, not a second copy: it is exactly what the idempotent upsert committed, with no
-- second write to keep in step. The schema `sinks` is the platform's, kept across the `reporting`
-- schema's re-creations; the reader role may read it (views run with their owner's rights).
CREATE SCHEMA IF NOT EXISTS sinks;

DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'streamops_reader') THEN
        GRANT USAGE ON SCHEMA sinks TO streamops_reader;
        ALTER DEFAULT PRIVILEGES IN SCHEMA sinks GRANT SELECT ON TABLES TO streamops_reader;
    END IF;
END $$;

-- Check (p_apply false) or create (true) sinks.<p_view> for stage p_stage with p_columns, a JSON
-- array of {"name", "type"} (PostgreSQL type names as information_schema spells them). An
-- existing view with other columns is an error naming the first column that differs: analysts'
-- queries depend on it, so a job that changes its output must change its table's name too.
CREATE FUNCTION sinks_ensure_view(p_view text, p_stage text, p_columns jsonb, p_apply boolean)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    want text[];
    have text[];
    owner_stage text;
    i integer;
    sel text := '';
    c jsonb;
BEGIN
    IF p_view !~ '^[a-z_][a-z0-9_]{0,62}$' THEN
        RAISE EXCEPTION 'sink.table %: a table name is lower-case letters, digits and _', p_view;
    END IF;
    SELECT array_agg(x->>'name' || ' ' || (x->>'type') ORDER BY ord) INTO want
    FROM jsonb_array_elements(p_columns) WITH ORDINALITY AS t(x, ord);
    SELECT array_agg(column_name || ' ' || data_type ORDER BY ordinal_position) INTO have
    FROM information_schema.columns
    WHERE table_schema = 'sinks' AND table_name = p_view
      AND column_name NOT IN ('stage_id', 'written_at');
    IF have IS NOT NULL THEN
        SELECT obj_description(format('sinks.%I', p_view)::regclass, 'pg_class') INTO owner_stage;
        IF owner_stage IS DISTINCT FROM p_stage THEN
            RAISE EXCEPTION 'sink.table %: sinks.% holds stage %''s results; pick another name', p_view, p_view,
                owner_stage;
        END IF;
        FOR i IN 1 .. greatest(cardinality(have), cardinality(want)) LOOP
            IF have[i] IS DISTINCT FROM want[i] THEN
                RAISE EXCEPTION 'sink.table %: column % differs: the table has %, the job writes %', p_view, i,
                    coalesce(have[i], 'nothing'), coalesce(want[i], 'nothing');
            END IF;
        END LOOP;
        RETURN 'unchanged';
    END IF;
    IF NOT p_apply THEN
        RETURN 'new';
    END IF;
    FOR c IN SELECT x FROM jsonb_array_elements(p_columns) AS t(x) LOOP
        sel := sel || CASE WHEN c->>'type' = 'jsonb' THEN format('value -> %L AS %I, ', c->>'name', c->>'name')
                      ELSE format('CAST(value ->> %L AS %s) AS %I, ', c->>'name', c->>'type', c->>'name') END;
    END LOOP;
    EXECUTE format('CREATE VIEW sinks.%I AS SELECT stage_id, %s written_at FROM public.sink_outputs '
                   'WHERE stage_id = %L', p_view, sel, p_stage);
    EXECUTE format('COMMENT ON VIEW sinks.%I IS %L', p_view, p_stage);
    RETURN 'created';
END $$;
