UPDATE batch_failures SET status = 'quarantined', quarantined_rows = :rows, quarantined_at = now(),
                          quarantined_files = CAST(:files AS text[])
WHERE stage_id = :stage_id AND role = :role AND query = :query AND batch_id = :batch_id
