"""ACE-SQL's reinforcement-learning pieces: rewards, advantages, loss, PCGrad, schedule, pool.

Each is a pure function or a small class, tested against hand-computed numbers; the GRPO
trainer (`acesql.grpo.trainer`) puts them together.
"""

from acesql.grpo.advantages import group_advantages
from acesql.grpo.loss import LossStats, grpo_loss, k3_kl
from acesql.grpo.pcgrad import PcgradStats, pcgrad, pcgrad_
from acesql.grpo.pool import EmpiricalPool, replay
from acesql.grpo.rewards import (
    dense_retriever_reward,
    generator_reward,
    length_penalty,
    retriever_reward,
)
from acesql.grpo.schedule import generator_weight, schedule_horizon

__all__ = [
    "EmpiricalPool",
    "LossStats",
    "PcgradStats",
    "dense_retriever_reward",
    "generator_reward",
    "generator_weight",
    "grpo_loss",
    "group_advantages",
    "k3_kl",
    "length_penalty",
    "pcgrad",
    "pcgrad_",
    "replay",
    "retriever_reward",
    "schedule_horizon",
]
