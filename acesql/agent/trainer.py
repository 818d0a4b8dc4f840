"""Agentic GRPO: whole trajectories as the group members, the project's clipped loss and KL.

Each step: `tasks_per_step` tasks, `group_size` trajectories each (`run_episodes`, sampled
at `temperature`); a reward per trajectory (`REWARDS`); advantages normalised within each
task's group (`acesql.grpo.advantages.group_advantages`); every turn of a trajectory becomes
one sequence (its prompt, observations included, is context only; its sampled tokens carry
the trajectory's advantage); one update on their token-mean clipped loss with the k3 KL to
the frozen starting model (`DualRoleUpdate.single_role`). The rollout engine shares the
policy's module, so the next step samples from the updated weights.

Reward variants (`REWARDS`, formulas in `acesql.agent.rewards`):
- `binary`: 1 when the submission passes (BIRD-RL's default);
- `partial`: 1 for a pass, else the row F1 of the submission against the solution (query
  tasks; 0 for the others);
- `csmr`: 1 for a pass, else half the mean Column-Set Matching score of the queries the
  trajectory ran and submitted (a dense signal folded into the trajectory's reward, since
  the advantage is per trajectory);
- `atr`: the Aggregated Trajectory Reward over those same step scores, the pass as the final.

Departures from BIRD-RL, said plainly: one update per rollout (no PPO epochs, so the old
policy is the current one); the top `train_layers` blocks train (CPU); no LLM-judge or
rubric rewards; with `skip_flat_groups`, tasks whose trajectories all earned the same reward
are left out, and a step with nothing left makes no update.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path

import torch

from acesql.agent.episode import AgentTask, Trajectory, run_episodes
from acesql.agent.rewards import (
    aggregated_trajectory_reward,
    binary,
    column_set_match,
    partial_correctness,
)
from acesql.errors import ConfigError
from acesql.grpo.advantages import group_advantages
from acesql.grpo.plots import agent_curves_figure
from acesql.grpo.update import ScoredSequence, single_role_training
from acesql.progress import history_windows, window_mean
from acesql.sql.replicas import Replicas
from acesql.tracking import NullTracker, Tracker


def _step_scores(t: Trajectory) -> list[float]:
    scores = [column_set_match(turn.result, t.expected_result) for turn in t.turns if turn.result]
    if t.submission is not None:
        scores.append(1.0 if t.passed else column_set_match(t.submitted_result, t.expected_result))
    return scores


def _csmr(t: Trajectory) -> float:
    if t.passed:
        return 1.0
    scores = _step_scores(t)
    return 0.5 * sum(scores) / len(scores) if scores else 0.0


REWARDS: dict[str, Callable[[Trajectory], float]] = {
    "binary": lambda t: binary(t.passed),
    "partial": lambda t: (
        1.0 if t.passed else partial_correctness(t.submitted_result, t.expected_result)
    ),
    "csmr": _csmr,
    "atr": lambda t: aggregated_trajectory_reward(_step_scores(t), binary(t.passed)),
}


def trajectory_reward(name: str, trajectory: Trajectory) -> float:
    rule = REWARDS.get(name)
    if rule is None:
        raise ConfigError(f"unknown agent reward {name!r}; choose one of {sorted(REWARDS)}")
    return rule(trajectory)


def turn_sequences(
    groups: list[list[Trajectory]], rewards: list[list[float]], tokenize: Callable
) -> list[ScoredSequence]:
    """One sequence per turn, carrying its trajectory's group-normalised advantage."""
    seqs = []
    for group, group_rewards in zip(groups, rewards):
        advantages = group_advantages(group_rewards).tolist()
        for trajectory, advantage in zip(group, advantages):
            for turn in trajectory.turns:
                if turn.completion.token_ids:
                    seqs.append(
                        ScoredSequence(
                            tokenize(turn.prompt), list(turn.completion.token_ids), advantage
                        )
                    )
    return seqs


class AgentGrpoTrainer:
    """GRPO of the SQL agent from `model_dir` on `tasks` (see the module doc)."""

    def __init__(
        self,
        model_dir: str | Path,
        tasks: list[AgentTask],
        replicas: Replicas,
        cfg,
        *,
        seed: int = 0,
        tracker: Tracker | None = None,
        device: str | None = None,
    ):
        from acesql.models.hf_engine import HFEngine

        if not tasks:
            raise ConfigError("no agent tasks to train on")
        trajectory_reward(cfg.reward, Trajectory("check"))  # an unknown name fails here
        self.cfg, self.tasks, self.replicas, self.seed = cfg, tasks, replicas, seed
        self.tracker = tracker or NullTracker()
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        torch.manual_seed(seed)
        self.tokenizer, self.model, self.ref, self.optimizer, self.update = single_role_training(
            model_dir,
            cfg,
            self.device,
            micro_batch_size=cfg.micro_batch_size,
            share_prompts=False,
        )
        self.engine = HFEngine(
            model=self.model, tokenizer=self.tokenizer, batch_size=cfg.batch_size, progress=False
        )
        self.history: list[dict] = []

    def tokenize(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False).input_ids

    def train(self, out_dir: str | Path, progress: Callable[[int], None] | None = None) -> dict:
        """Run the steps (or until the time budget), save the model; return a summary."""
        start = time.monotonic()
        budget = self.cfg.time_budget_minutes
        rng = random.Random(f"{self.seed}:agent_grpo")
        order = list(range(len(self.tasks)))
        stopped = "steps"
        for step in range(self.cfg.steps):
            if budget and time.monotonic() - start > 60 * budget:
                stopped = "time_budget"
                break
            if not order or len(order) < self.cfg.tasks_per_step:
                order = list(range(len(self.tasks)))
                rng.shuffle(order)
            batch = [
                self.tasks[order.pop()] for _ in range(min(self.cfg.tasks_per_step, len(order)))
            ]
            record = self.step(batch, step)
            self.history.append(record)
            self.tracker.log_metrics({f"agent_grpo/{k}": v for k, v in record.items()}, step=step)
            if progress:
                progress(1)
        out_dir = Path(out_dir)
        self.model.save_pretrained(out_dir)
        self.tokenizer.save_pretrained(out_dir)
        if self.history:
            fig = agent_curves_figure(self.history)
            fig.savefig(out_dir / "curves.png", dpi=110)
            self.tracker.log_figure(fig, "plots/agent_curves.png")
        return self.summary(stopped, time.monotonic() - start)

    def step(self, batch: list[AgentTask], step: int) -> dict:
        cfg = self.cfg
        self.model.eval()
        groups = run_episodes(
            self.engine,
            self.tokenizer,
            batch,
            self.replicas,
            n=cfg.group_size,
            max_turns=cfg.max_turns,
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            max_new_tokens=cfg.max_new_tokens,
            seed=self.seed * 100_003 + step * 101,
        )
        self.model.train()
        rewards = [[trajectory_reward(cfg.reward, t) for t in group] for group in groups]
        flat_groups = [len(set(group_rewards)) == 1 for group_rewards in rewards]
        kept = [i for i, flat in enumerate(flat_groups) if not (flat and cfg.skip_flat_groups)]
        seqs = turn_sequences([groups[i] for i in kept], [rewards[i] for i in kept], self.tokenize)
        stats = self.update.single_role(seqs) if seqs else {"updated": 0.0}
        flat = [t for group in groups for t in group]
        return {
            "reward_mean": sum(sum(r) for r in rewards) / len(flat),
            "success": sum(t.passed for t in flat) / len(flat),
            "submitted": sum(t.submission is not None for t in flat) / len(flat),
            "turns_mean": sum(len(t.turns) for t in flat) / len(flat),
            "sequences": len(seqs),
            "flat_groups": sum(flat_groups),
            **stats,
        }

    def summary(self, stopped: str, seconds: float) -> dict:
        first, last, width = history_windows(self.history)
        return {
            "steps": len(self.history),
            "stopped": stopped,
            "train_seconds": round(seconds, 1),
            "window_steps": width,
            "reward_mean_first5": window_mean(first, "reward_mean"),
            "reward_mean_last5": window_mean(last, "reward_mean"),
            "success_first5": window_mean(first, "success"),
            "success_last5": window_mean(last, "success"),
            "history": self.history,
        }
