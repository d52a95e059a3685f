-- The input rate (rows/s) per bucket of the stages that forecast their input (policy param
-- `forecast`, docs/policies.md §4.1), in one set-based pass over all of them. Each stage asks
-- for its own bucket size and span: :stages, :bucket_s, :since and :until are parallel arrays
-- (since/until in epoch seconds, multiples of the bucket). Buckets are aligned to the epoch:
-- bucket k covers [k·bucket_s, (k+1)·bucket_s); a bucket without batches is absent (the stage
-- was down or not deployed: the caller interpolates it). Primary runs only: a replica reads the
-- same input again.
WITH ask AS (
    SELECT a.stage_id, a.bucket_s, to_timestamp(a.since) AS since, to_timestamp(a.until) AS until
    FROM unnest(CAST(:stages AS text[]), CAST(:bucket_s AS float8[]), CAST(:since AS float8[]),
                CAST(:until AS float8[])) AS a(stage_id, bucket_s, since, until)
)
SELECT a.stage_id,
       floor(date_part('epoch', m.ts) / a.bucket_s)::bigint AS bucket,
       sum(m.input_rows)::float8 / a.bucket_s               AS rate
FROM ask a
JOIN stage_metrics m ON m.stage_id = a.stage_id AND m.ts >= a.since AND m.ts < a.until
LEFT JOIN deployments d ON d.id = m.deployment_id
WHERE COALESCE(d.role, 'primary') = 'primary'
GROUP BY a.stage_id, a.bucket_s, 2
ORDER BY 1, 2
