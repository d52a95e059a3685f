SELECT * FROM stage_commands WHERE id = :id
