-- The workloads' outputs, for analysts (streamops_reader). Views run with their owner's rights,
-- so the reader needs SELECT on these only, never on the raw tables.

-- DEBS 2015 query 1 answer: the 10 most frequent routes per 30-minute window, read from the
-- taxi stage's route counts. (Spark cannot sort a streaming aggregate, so the ranking is here.)
CREATE VIEW reporting.taxi_top10_routes AS
SELECT stage_id, window_start, window_end, rank, route, trips
FROM (
    SELECT stage_id,
           (value ->> 'window_start')::timestamptz AS window_start,
           (value ->> 'window_end')::timestamptz   AS window_end,
           value ->> 'route'                       AS route,
           (value ->> 'count')::bigint             AS trips,
           row_number() OVER (PARTITION BY stage_id, value ->> 'window_start'
                              ORDER BY (value ->> 'count')::bigint DESC, value ->> 'route') AS rank
    FROM public.sink_outputs
    WHERE value ? 'route'
) ranked
WHERE rank <= 10;

-- Every stage's current result per output key (word counts, windows, pattern counts, ...).
CREATE VIEW reporting.stage_outputs AS
SELECT stage_id, key, value, event_ts, version, written_at FROM public.sink_outputs;

-- Input lines that were not records, and why (docs/input.md). The exact bytes stay in the raw
-- table; `raw` shows invalid UTF-8 and NUL as U+FFFD.
CREATE VIEW reporting.quarantine AS
SELECT stage_id, deployment_id, batch_id, source_file, reason_kind, reason, raw, raw_size, quarantined_at
FROM public.quarantine;
