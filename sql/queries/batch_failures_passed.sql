-- Batches that failed and then committed after all (a retry worked).
UPDATE batch_failures SET status = 'passed'
WHERE stage_id = :stage_id AND role = :role AND query = :query AND status = 'retrying' AND batch_id <= :committed
