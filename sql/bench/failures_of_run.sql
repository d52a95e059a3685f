-- A run's failures once recovered (or given up).
SELECT * FROM failures WHERE deployment_id = :d AND status <> 'recovering'
