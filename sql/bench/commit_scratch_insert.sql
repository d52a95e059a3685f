-- One autocommitted single-row insert (psycopg2 parameters).
INSERT INTO commit_scratch (id) VALUES (%(id)s)
