-- A person's reconfiguration that never started (its stage stayed busy): cancelled with the reason,
-- so that it does not run later unasked. Only while still pending: one claimed meanwhile is its
-- executor's.
UPDATE reconfigurations SET status = 'cancelled', outcome = :outcome, finished_at = now()
WHERE id = :id AND status = 'pending'
RETURNING id
