-- Batches a run committed with output.
SELECT count(*) FROM sink_commits WHERE deployment_id = :d AND rows > 0
