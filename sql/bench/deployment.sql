SELECT * FROM deployments WHERE id = :i
