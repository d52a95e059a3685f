-- What an earlier attempt of this batch by this run staged (a failed try, a retried task).
DELETE FROM sink_staging WHERE stage_id = :stage_id AND deployment_id = :deployment_id AND batch_id = :batch_id
