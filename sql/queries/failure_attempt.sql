UPDATE failures SET attempts = attempts + 1 WHERE id = :id
