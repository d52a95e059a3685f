-- A Kafka run's source as its driver last reported it: the lag in records and the topic's
-- partitions (NULL before its first batch, and for a file source).
SELECT CAST(info ->> 'backlog_rows' AS bigint) AS backlog_rows,
       CAST(info ->> 'source_partitions' AS integer) AS source_partitions
FROM heartbeats WHERE deployment_id = :deployment_id
