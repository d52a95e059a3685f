# Run once by the postgres image on an empty data directory, as POSTGRES_USER (streamops, the
# superuser; the image sources this file): the roles of plugins/streamops/store/roles.py that the
# other services log in as, and Airflow's metadata database, its own role's. Grants come from
# the migrations (airflow-init). Passwords reach psql on stdin, never on a command line, and a
# failing statement is not logged with its text. On an existing pg-data volume, run it by hand:
#   docker compose exec -e OBSERVER_DB_PASSWORD -e AIRFLOW_DB_PASSWORD postgres sh /docker-entrypoint-initdb.d/20-roles.sh
for pw in "${OBSERVER_DB_PASSWORD:?see docker/env.example}" "${AIRFLOW_DB_PASSWORD:?see docker/env.example}"; do
    case "$pw" in *[!A-Za-z0-9_-]*) echo "OBSERVER_DB_PASSWORD, AIRFLOW_DB_PASSWORD: letters, digits, - and _ only" >&2
                                    return 1 2>/dev/null || exit 1 ;; esac
done
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" <<EOSQL
SET log_min_error_statement = panic;
CREATE ROLE streamops_observer LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT PASSWORD '$OBSERVER_DB_PASSWORD';
CREATE ROLE streamops_airflow LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT PASSWORD '$AIRFLOW_DB_PASSWORD';
CREATE DATABASE airflow OWNER streamops_airflow;
EOSQL
# public is pg_database_owner's, whose rights a NOINHERIT owner does not use: granted outright.
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname airflow <<EOSQL
GRANT USAGE, CREATE ON SCHEMA public TO streamops_airflow;
EOSQL
