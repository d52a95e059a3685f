-- An upgrade (issue 43): the running stage gets new code or a new job spec through the same
-- grant, window and mechanism path as a scale-out; its cores and pool stay.
ALTER TABLE reconfigurations DROP CONSTRAINT reconfigurations_action_check;
ALTER TABLE reconfigurations ADD CONSTRAINT reconfigurations_action_check
    CHECK (action IN ('scale_out', 'scale_in', 'migrate', 'upgrade'));
