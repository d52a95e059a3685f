-- The earliest instant any stage's window reaches back to (its window_s, else the default).
SELECT CAST(:now AS timestamptz) - make_interval(secs => COALESCE(max(
           COALESCE((spec -> 'policy' -> 'params' ->> 'window_s')::float8, :window_s)), :window_s))
FROM stages
WHERE CAST(:app AS text) IS NULL OR app = CAST(:app AS text)
