-- Stamp one phase of a reconfiguration, once (a retried step keeps the first time), at `at` (when
-- the phase happened, e.g. the first batch's commit) or now.
UPDATE reconfigurations SET
    stop_requested_at   = CASE WHEN :phase = 'stop_requested'   THEN COALESCE(stop_requested_at, COALESCE(CAST(:at AS timestamptz), now()))   ELSE stop_requested_at END,
    stopped_at          = CASE WHEN :phase = 'stopped'          THEN COALESCE(stopped_at, COALESCE(CAST(:at AS timestamptz), now()))          ELSE stopped_at END,
    state_ready_at      = CASE WHEN :phase = 'state_ready'      THEN COALESCE(state_ready_at, COALESCE(CAST(:at AS timestamptz), now()))      ELSE state_ready_at END,
    restarted_at        = CASE WHEN :phase = 'restarted'        THEN COALESCE(restarted_at, COALESCE(CAST(:at AS timestamptz), now()))        ELSE restarted_at END,
    first_batch_done_at = CASE WHEN :phase = 'first_batch_done' THEN COALESCE(first_batch_done_at, COALESCE(CAST(:at AS timestamptz), now())) ELSE first_batch_done_at END,
    caught_up_at        = CASE WHEN :phase = 'caught_up'        THEN COALESCE(caught_up_at, COALESCE(CAST(:at AS timestamptz), now()))        ELSE caught_up_at END,
    scale_requested_at  = CASE WHEN :phase = 'scale_requested'  THEN COALESCE(scale_requested_at, COALESCE(CAST(:at AS timestamptz), now()))  ELSE scale_requested_at END,
    executors_ready_at  = CASE WHEN :phase = 'executors_ready'  THEN COALESCE(executors_ready_at, COALESCE(CAST(:at AS timestamptz), now()))  ELSE executors_ready_at END
WHERE id = :id
