-- A stage's wanted replica count.
SELECT replicas FROM stages WHERE stage_id = :stage_id
