# Run once by the postgres image on an empty data directory, as POSTGRES_USER (postgres, the
# superuser; the image sources this file): the roles of plugins/streamops/store/roles.py that the
# services log in as, and who owns what. streamops, the control plane's role, owns the streamops
# database and so every object its migrations create, and is no superuser: a hole in a task or a
# driver cannot read another database, write files or run programs as the server. Airflow's
# metadata database is its own role's. The read-only roles get here what a non-superuser's
# migrations cannot give them (their session settings); grants come from the migrations
# (airflow-init). Passwords reach psql on stdin, never on a command line, and a failing statement
# is not logged with its text. On an existing pg-data volume, run it by hand:
#   docker compose exec -e CONTROL_DB_PASSWORD -e OBSERVER_DB_PASSWORD -e AIRFLOW_DB_PASSWORD postgres \
#       sh /docker-entrypoint-initdb.d/20-roles.sh
for pw in "${CONTROL_DB_PASSWORD:?see docker/env.example}" "${OBSERVER_DB_PASSWORD:?see docker/env.example}" \
          "${AIRFLOW_DB_PASSWORD:?see docker/env.example}"; do
    case "$pw" in *[!A-Za-z0-9_-]*) echo "CONTROL_DB_PASSWORD, OBSERVER_DB_PASSWORD, AIRFLOW_DB_PASSWORD:" \
                                         "letters, digits, - and _ only" >&2
                                    return 1 2>/dev/null || exit 1 ;; esac
done
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" <<EOSQL
SET log_min_error_statement = panic;
CREATE ROLE streamops LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS PASSWORD '$CONTROL_DB_PASSWORD';
ALTER DATABASE $POSTGRES_DB OWNER TO streamops;
-- lock waits name the other session's query (store/db.py), as a superuser's would
GRANT pg_read_all_stats TO streamops;
CREATE ROLE streamops_observer LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT PASSWORD '$OBSERVER_DB_PASSWORD';
ALTER ROLE streamops_observer SET default_transaction_read_only = on;
ALTER ROLE streamops_observer SET statement_timeout = '60s';
CREATE ROLE streamops_reader LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT;
ALTER ROLE streamops_reader SET statement_timeout = '60s';
CREATE ROLE streamops_airflow LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT PASSWORD '$AIRFLOW_DB_PASSWORD';
CREATE DATABASE airflow OWNER streamops_airflow;
EOSQL
# public is pg_database_owner's: streamops, as the owner, uses its rights; a NOINHERIT owner
# (streamops_airflow) does not, so it is granted outright.
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname airflow <<EOSQL
GRANT USAGE, CREATE ON SCHEMA public TO streamops_airflow;
EOSQL
