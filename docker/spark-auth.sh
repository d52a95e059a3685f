#!/bin/sh
# Spark's shared-secret authentication for the command it runs (docker/compose.yaml: the master,
# the workers, and the Airflow scheduler, whose tasks start the stage drivers): writes
# $SPARK_CONF_DIR/spark-defaults.conf, readable by this user only, from SPARK_AUTH_SECRET, then
# execs the command without the secret in its environment. Masters, workers and spark-submit all
# read that file. Not -Dspark.authenticate.secret=… in SPARK_*_OPTS: a command line is visible
# to every user of the host (ps). Standalone Spark takes the secret from its conf only (a secret
# file is for Kubernetes only). Every RPC is also encrypted, with the embedded cluster's settings
# (plugins/streamops/spark_cluster.py, RPC_CRYPTO): AES-GCM, key exchange version 2, and no
# fallback to unencrypted SASL, so a process without them is refused.
set -eu
: "${SPARK_AUTH_SECRET:?is unset or empty: see docker/env.example}"
: "${SPARK_CONF_DIR:?is not set}"
case "$SPARK_AUTH_SECRET" in
    *[!A-Za-z0-9._~+/=-]*)
        echo "spark-auth: SPARK_AUTH_SECRET may hold only [A-Za-z0-9._~+/=-] (openssl rand -hex 32)" >&2
        exit 2 ;;
esac
umask 077
mkdir -p "$SPARK_CONF_DIR"
conf="$SPARK_CONF_DIR/spark-defaults.conf"
printf 'spark.authenticate true\nspark.authenticate.secret %s\n' "$SPARK_AUTH_SECRET" > "$conf.tmp"
printf '%s\n' 'spark.network.crypto.enabled true' 'spark.network.crypto.authEngineVersion 2' \
    'spark.network.crypto.cipher AES/GCM/NoPadding' 'spark.network.crypto.saslFallback false' >> "$conf.tmp"
mv "$conf.tmp" "$conf"
unset SPARK_AUTH_SECRET
exec "$@"
