-- The workloads' output views move to the `reporting` schema (sql/reports/50_outputs.sql), where
-- the read-only role streamops_reader can query them: in public it was refused (issue 17).
DROP VIEW IF EXISTS taxi_top10_routes;
