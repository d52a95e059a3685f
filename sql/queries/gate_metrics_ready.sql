-- Before the data-quality gate: how many metrics rows the new run has written, and how many
-- batches it has committed. The agent writes a batch's metrics row after the sink's commit and
-- asynchronously, so right after catch-up the newest batches may still lack theirs.
-- :since (or NULL): a change made in the running driver counts only the batches after it.
-- outputs: the stage's sink rows written since then, which only the new run writes (an upgrade's
-- gate waits for some: an append-mode job emits nothing until its watermark passes a window).
SELECT (SELECT count(*) FROM stage_metrics m
        WHERE m.stage_id = d.stage_id AND m.deployment_id = d.id
          AND m.ts >= COALESCE(CAST(:since AS timestamptz), d.started_at)) AS metrics,
       (SELECT count(*) FROM sink_commits c
        WHERE c.stage_id = d.stage_id AND c.deployment_id = d.id
          AND c.committed_at >= COALESCE(CAST(:since AS timestamptz), d.started_at)) AS commits,
       (SELECT count(*) FROM sink_outputs o
        WHERE o.stage_id = d.stage_id
          AND o.written_at >= COALESCE(CAST(:since AS timestamptz), d.started_at)) AS outputs
FROM deployments d
WHERE d.id = :deployment_id
