# syntax=docker/dockerfile:1
# The GPU image: the `gpu` work pool's process worker on a GPU machine, and the image of the
# flow-run jobs a Kubernetes `gpu` pool starts (infra/k8s/gpu-base-job-template.json).
# Build from the repository root:
#   docker build -f infra/docker/gpu-worker.Dockerfile -t acesql-gpu-worker .
#
# Two virtual environments, because vLLM pins versions that clash with the default install's
# Prefect: vllm 0.33.0 requires fastapi<0.137 where Prefect 3.9.1 requires fastapi>=0.139, and
# it pins torch 2.14.0 and transformers<5.21 where constraints.txt has 2.13.0 and 5.24.0.
#   /opt/venv  the project as the default install has it (Prefect, DVC, MLflow, torch,
#              accelerate): the worker and the pipeline flow run here; first on PATH.
#   /opt/vllm  vLLM with the project's library and its dependencies less Prefect and DVC
#              (acesql imports neither): stages whose rollout engine is `vllm` run here.
FROM nvidia/cuda:13.0.1-runtime-ubuntu24.04

# Ubuntu 24.04's Python is 3.12 (the project needs 3.11 or later); git: DVC works in a checkout.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv git ca-certificates \
    && rm -rf /var/lib/apt/lists/*

# DL3064 takes TOKENIZERS_PARALLELISM for a secret (it has TOKEN in its name)
# hadolint ignore=DL3064
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1 \
    PREFECT_SERVER_ANALYTICS_ENABLED=false \
    MLFLOW_DISABLE_TELEMETRY=true \
    DO_NOT_TRACK=1 \
    VLLM_NO_USAGE_STATS=1 \
    TOKENIZERS_PARALLELISM=false

WORKDIR /opt/acesql
COPY pyproject.toml constraints.txt README.md ./
COPY acesql ./acesql

# torch 2.13.0 from PyPI is the CUDA 13 build and brings its CUDA libraries as wheels
RUN python3 -m venv /opt/venv \
    && /opt/venv/bin/pip install torch==2.13.0 \
    && /opt/venv/bin/pip install -c constraints.txt .

# The requirements are read from pyproject.toml (its dependencies less prefect and dvc, plus the
# `vllm` extra) so this environment follows the project's; vLLM picks its own torch.
ARG VLLM_VERSION=0.33.0
RUN python3 -m venv /opt/vllm \
    && /opt/vllm/bin/python -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; print(*[d for d in p["dependencies"] if not d.startswith(("prefect", "dvc"))], *p["optional-dependencies"]["vllm"], sep="\n")' > /tmp/vllm-requirements.txt \
    && /opt/vllm/bin/pip install -r /tmp/vllm-requirements.txt "vllm==${VLLM_VERSION}" \
    && /opt/vllm/bin/pip install --no-deps . \
    && rm /tmp/vllm-requirements.txt

ENV PATH=/opt/venv/bin:$PATH

# A numeric user, so Kubernetes' runAsNonRoot can check it (the base image's `ubuntu` user has
# uid 1000). The home is open to any user (sticky, as /tmp): docker-compose.yml runs the worker
# as the checkout owner's uid.
RUN useradd --create-home --uid 10001 acesql \
    && chmod 1777 /home/acesql
USER 10001
WORKDIR /home/acesql

CMD ["prefect", "worker", "start", "--pool", "gpu", "--type", "process", "--with-healthcheck"]
