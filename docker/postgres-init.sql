-- Run once by the postgres image on an empty data directory: Airflow's metadata database beside
-- streamops' own (POSTGRES_DB).
CREATE DATABASE airflow OWNER streamops;
