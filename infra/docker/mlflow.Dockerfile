# syntax=docker/dockerfile:1
# The MLflow tracking server of infra/docker-compose.yml, at the MLflow version the project
# pins (constraints.txt), with the Postgres driver its backend store needs and boto3 for the
# S3 artifact store. Build from the repository root.
FROM python:3.11-slim

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    PYTHONUNBUFFERED=1 \
    MLFLOW_DISABLE_TELEMETRY=true \
    DO_NOT_TRACK=1

COPY constraints.txt /tmp/constraints.txt
RUN pip install -c /tmp/constraints.txt mlflow boto3 psycopg2-binary==2.9.13 \
    && rm /tmp/constraints.txt

RUN useradd --create-home --uid 10001 mlflow
USER 10001
WORKDIR /home/mlflow
EXPOSE 5000

CMD ["mlflow", "server", "--host", "0.0.0.0", "--port", "5000"]
