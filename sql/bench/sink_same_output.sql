-- bench/sink.py: rows stage a holds and b does not, and the other way round (0: the same output).
SELECT count(*) FROM (
    (SELECT key, value, version FROM sink_outputs WHERE stage_id = :a
     EXCEPT ALL SELECT key, value, version FROM sink_outputs WHERE stage_id = :b)
    UNION ALL
    (SELECT key, value, version FROM sink_outputs WHERE stage_id = :b
     EXCEPT ALL SELECT key, value, version FROM sink_outputs WHERE stage_id = :a)) d
