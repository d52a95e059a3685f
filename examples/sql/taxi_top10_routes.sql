-- The demo's analyst view, declared in apps.yaml (`views:`) and applied by every registry sync
-- (`streamops deploy`, `streamops start`) into the `reporting` schema, where streamops_reader reads.
-- DEBS 2015 query 1 answer: the 10 most frequent routes per 30-minute window, read from the
-- taxi stage's route counts. (Spark cannot sort a streaming aggregate, so the ranking is here.)
CREATE OR REPLACE VIEW reporting.taxi_top10_routes AS
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

