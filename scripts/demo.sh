#!/usr/bin/env bash
# `make demo`: database, Airflow, the demo apps deployed through the streamops_deploy DAG, their
# generators, then a live status table. Re-plan, maintenance window and watchdog run on schedule.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
t0=$(date +%s)

streamops db up
streamops airflow up
echo "Airflow up $(( $(date +%s) - t0 ))s after \`make demo\` started"

# Deploys run as Airflow DAG runs (in parallel; the JVM start is the slow part).
for app in taxi hibench; do
    streamops airflow trigger streamops_deploy --conf "{\"app\": \"$app\"}"
done
streamops gen taxi.top10 --background --duration 86400 --seed 1 --garbage 0.002 \
    --trace "ramp:start_rate=100,doubling_s=300,max_rate=3000"
streamops gen hibench.wordcount --background --duration 86400 --seed 2 --garbage 0.002 \
    --trace "diurnal:base=200,peak=800,period_s=600"

echo "waiting for the first metrics row …"
python - "$t0" <<'PY'
import sys, time
from sqlalchemy import text
from streamops.store import db
t0, deadline = float(sys.argv[1]), time.time() + 240
while time.time() < deadline:
    with db.engine().connect() as c:
        n = c.execute(text("SELECT count(DISTINCT stage_id) FROM stage_metrics WHERE ts > now() - interval '5 minutes'")).scalar()
    if n:
        print(f"first metrics row {time.time() - t0:.0f}s after `make demo` started ({n} stage(s) reporting)")
        break
    time.sleep(1)
else:
    sys.exit("no metrics after 4 minutes: see .streamops/logs/")
PY
echo
echo "database: $(streamops db status | tail -1)   (psql it, or query stage_metrics)"
streamops airflow logins
echo "Ctrl-C leaves the status view; the stages keep running until 'make demo-stop'."
streamops status --watch || true
