SELECT target, deleted FROM records_retention(CAST(:keep_days AS integer))
