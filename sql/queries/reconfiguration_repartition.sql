UPDATE reconfigurations SET repartition_ms = :ms WHERE id = :id
