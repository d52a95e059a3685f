INSERT INTO staged_checkpoints (stage_id, source, path, as_of_batch, partitions)
VALUES (:stage_id, :source, :path, :as_of_batch, :partitions)
RETURNING *
