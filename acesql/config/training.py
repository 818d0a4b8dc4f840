"""Sections of the two-role training stages: `sft`, `grpo` (with its length penalty) and
`distributed`, the processes both train with."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from acesql.config.section import MatchMode, Section
from acesql.config.shared import GenerationSection


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


class GrpoSection(Section):
    """The `grpo` stage: joint dual-role GRPO. Defaults are the paper's (GPU runs)."""

    learning_rate: float = Field(1e-6, gt=0, description="AdamW learning rate, constant.")
    warmup_ratio: float = Field(0.05, ge=0, lt=1, description="Share of steps warming up.")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    epochs: float = Field(4.0, gt=0, description="Passes over the grpo_data questions.")
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
        "Reward-SQL's composite, from the frozen score model at prm_model (trained on what "
        "the generator writes: prompt.sql_format equal to its prm_data.sql_format).",
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
