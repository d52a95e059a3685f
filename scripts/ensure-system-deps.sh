#!/usr/bin/env bash
# Java 17 (Spark) and the PostgreSQL server binaries (embedded cluster). Installs them with
# apt-get when missing and we are root; otherwise says what to install.
set -euo pipefail
missing=()
command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 || [ -n "${STREAMOPS_DATABASE_URL:-}" ] || missing+=(postgresql)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing ${missing[*]} with apt-get"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
else
    echo "missing: ${missing[*]}. Install them (apt-get install ${missing[*]}), or set STREAMOPS_DATABASE_URL to an existing PostgreSQL." >&2
    exit 1
fi
