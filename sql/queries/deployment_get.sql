SELECT d.*, p.master FROM deployments d JOIN pools p ON p.name = d.pool WHERE d.id = :id
