-- The apps a re-plan covers: those synced into the database (deployed at least once).
SELECT name FROM apps ORDER BY name
