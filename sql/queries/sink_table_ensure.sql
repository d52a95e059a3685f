-- A stage's typed results view (033_typed_sinks.sql): checked, and created when :apply.
SELECT sinks_ensure_view(:view, :stage_id, CAST(:columns AS jsonb), :apply)
