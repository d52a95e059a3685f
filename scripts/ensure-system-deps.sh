#!/usr/bin/env bash
# Java 17 (Spark, the Kafka broker), Maven (make venv fetches the Kafka jars with it) and the
# PostgreSQL server binaries (embedded cluster); Chromium and its
# ChromeDriver for the browser tests (the report's screenshot, the Airflow UI). Installs them with
# apt-get when missing and we are root; otherwise says what to install. Chromium alone missing
# only warns: nothing but those tests needs it.
set -euo pipefail
missing=()
command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
command -v mvn >/dev/null 2>&1 || missing+=(maven)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 || [ -n "${STREAMOPS_DATABASE_URL:-}" ] || missing+=(postgresql)
optional=()
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || optional+=(chromium)
command -v chromedriver >/dev/null 2>&1 || optional+=(chromium-driver)
[ $((${#missing[@]} + ${#optional[@]})) -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing ${missing[*]} ${optional[*]} with apt-get"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" "${optional[@]}" >/dev/null
elif [ ${#missing[@]} -gt 0 ]; then
    echo "missing: ${missing[*]} ${optional[*]}. Install them (apt-get install ${missing[*]} ${optional[*]}), or set STREAMOPS_DATABASE_URL to an existing PostgreSQL (maven: make venv fetches the Kafka jars with it)." >&2
    exit 1
else
    echo "warning: ${optional[*]} missing (apt-get install ${optional[*]}); the browser tests need them" >&2
fi
