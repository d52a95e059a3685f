-- The role is filled in with psycopg2.sql.Identifier; the password is interpolated by psycopg2
-- (utility statements take no bind parameters) and stored as a scram-sha-256 verifier.
ALTER ROLE {role} PASSWORD %(password)s
