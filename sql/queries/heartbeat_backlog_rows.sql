-- A run's backlog in records as its driver last reported it (a Kafka stage's lag); NULL before its first progress.
SELECT CAST(info ->> 'backlog_rows' AS bigint) FROM heartbeats WHERE deployment_id = :deployment_id
