-- The redundancy manager's current r for a stage (NULL before its first period).
SELECT r FROM redundancy_states WHERE stage_id = :stage_id
