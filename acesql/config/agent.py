"""Sections of the SQL agent's curriculum: the imitation stages (`reasoning_sft`, `agent_sft`)
and the RL stages (`reasoning_grpo`, `agent_grpo`); `Params` gives the reasoning stages their
one-turn defaults."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from acesql.config.section import Section
from acesql.config.training import SftSection


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
    skip_flat_groups: bool = Field(
        False,
        description="Leave out of the update tasks whose trajectories all earned the same "
        "reward (advantage 0; they only add the small KL term), and make no update in a step "
        "where none is left: AdamW would still move every weight by about the learning rate "
        "on that near-zero gradient. The paper keeps them.",
    )
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
