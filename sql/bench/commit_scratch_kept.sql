-- What survived: the rows, and the highest id.
SELECT count(*), COALESCE(max(id), 0) FROM commit_scratch
