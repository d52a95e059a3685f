SELECT count(*) FROM sink_commits WHERE rows > 0
