-- The active backup's secondary becomes the stage's primary once the old primary has stopped.
UPDATE deployments SET role = 'primary' WHERE id = :id AND role = 'secondary'
