-- GX query asset (suite sink_outputs): a stage's sink_outputs rows last written on :day. The value
-- is jsonb, so the count is extracted here for GX to check (NULL for outputs without a count).
SELECT o.stage_id, o.key, CAST(o.value ->> 'count' AS bigint) AS count, o.version, o.batch_id, o.written_at
FROM sink_outputs o
WHERE o.stage_id = :stage_id
  AND o.written_at >= CAST(:day AS date)::timestamptz AND o.written_at < (CAST(:day AS date) + 1)::timestamptz
