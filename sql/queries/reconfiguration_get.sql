SELECT * FROM reconfigurations WHERE id = :id
