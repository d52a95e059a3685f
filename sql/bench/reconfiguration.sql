SELECT * FROM reconfigurations WHERE id = :i
