# syntax=docker/dockerfile:1
# The `cpu` work pool's worker: Prefect's process worker with the project installed at the
# versions constraints.txt pins, so flow runs find DVC, MLflow, torch and transformers.
# Build from the repository root (infra/docker-compose.yml does):
#   docker build -f infra/docker/cpu-worker.Dockerfile -t acesql-cpu-worker .
FROM python:3.11-slim

# git: DVC works inside a Git checkout. Its version is the base image's Debian release's.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends git \
    && rm -rf /var/lib/apt/lists/*

# DL3064 takes TOKENIZERS_PARALLELISM for a secret (it has TOKEN in its name)
# hadolint ignore=DL3064
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    PYTHONUNBUFFERED=1 \
    PREFECT_SERVER_ANALYTICS_ENABLED=false \
    MLFLOW_DISABLE_TELEMETRY=true \
    DO_NOT_TRACK=1 \
    TOKENIZERS_PARALLELISM=false

# torch's CPU build first: from PyPI, pip would fetch the CUDA build and gigabytes of GPU libraries
RUN pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu

WORKDIR /opt/acesql
COPY pyproject.toml constraints.txt README.md ./
COPY acesql ./acesql
RUN pip install -c constraints.txt .

# A numeric user, so Kubernetes' runAsNonRoot can check it. The home is open to any
# user (sticky, as /tmp): docker-compose.yml runs the worker as the checkout owner's uid.
RUN useradd --create-home --uid 10001 acesql \
    && chmod 1777 /home/acesql
USER 10001
WORKDIR /home/acesql

CMD ["prefect", "worker", "start", "--pool", "cpu", "--type", "process", "--with-healthcheck"]
