#!/usr/bin/env bash
# Postgres' entrypoint runs this once, when the data volume is new: a role and a database of
# its own for Prefect and for MLflow, with the passwords infra/.env gives them.
set -euo pipefail

create_database() {
    psql --username "$POSTGRES_USER" --dbname postgres --set ON_ERROR_STOP=1 \
        --set name="$1" --set password="$2" <<'SQL'
CREATE ROLE :"name" LOGIN PASSWORD :'password';
CREATE DATABASE :"name" OWNER :"name";
SQL
}

create_database prefect "$PREFECT_DB_PASSWORD"
create_database mlflow "$MLFLOW_DB_PASSWORD"
