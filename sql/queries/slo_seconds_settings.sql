-- Before slo_seconds.sql, for the rest of the re-plan's transaction: no JIT. The query's plan
-- costs over jit_above_cost (more so under windows_tuning.sql's enable_sort = off), and compiling
-- it took 2.2–3.4 s of a 3.5 s statement whose work took 60 ms (EXPLAIN ANALYZE, 2026-11-28), as
-- sql/reports/10_sla.sql found for the report's.
SET LOCAL jit = off
