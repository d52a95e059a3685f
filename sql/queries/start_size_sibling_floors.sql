-- The cores.initial of the pool's other stages that have no live primary run: a start sized
-- above its own floor leaves them the room to start at theirs (a deploy starts an app's stages
-- one by one, and a pool may hold several apps' stages).
SELECT COALESCE(sum(s.cores), 0) FROM stages s
WHERE s.pool = :pool AND s.stage_id <> :stage_id
  AND NOT EXISTS (SELECT 1 FROM deployments d
                  WHERE d.stage_id = s.stage_id AND d.role = 'primary'
                    AND d.status IN ('starting', 'running', 'stopping'))
