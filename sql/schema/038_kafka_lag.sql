-- A Kafka stage's source per batch (agent/kafka_lag.py): the lag in records (also backlog_rows),
-- the end offset of each partition ("topic/partition" → offset) and Spark's own
-- avg/maxOffsetsBehindLatest. NULL for a file source.
ALTER TABLE stage_metrics ADD COLUMN source_lag jsonb;
