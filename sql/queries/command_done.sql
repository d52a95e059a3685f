UPDATE stage_commands SET done_at = now(), outcome = :outcome WHERE id = :id
