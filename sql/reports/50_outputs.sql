-- The jobs' outputs, for analysts (streamops_reader). Views run with their owner's rights,
-- so the reader needs SELECT on these only, never on the raw tables.

-- Every stage's current result per output key (as JSON: the job's output row).
CREATE VIEW reporting.stage_outputs AS
SELECT stage_id, key, value, event_ts, version, written_at FROM public.sink_outputs;

-- Input lines that were not records, and why (docs/input.md). The exact bytes stay in the raw
-- table; `raw` shows invalid UTF-8 and NUL as U+FFFD.
CREATE VIEW reporting.quarantine AS
SELECT stage_id, deployment_id, batch_id, source_file, reason_kind, reason, raw, raw_size, quarantined_at
FROM public.quarantine;
