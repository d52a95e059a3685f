"""The benchmarks: each module is a script (`python bench/<name>.py --help`, or `streamops bench
<name>`); bench/harness.py is what they share (scratch site, result file, summaries, table)."""
