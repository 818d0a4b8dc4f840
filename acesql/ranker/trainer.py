"""GRPO of the ranker role for position consistency (R3-SQL's ranker training).

Each step takes `pairs_per_step` pairs (`acesql.ranker.pairs`: a correct and a wrong
candidate of one question). A group member is one answer to each of the pair's two prompts
(the correct query as A, then as B), each the first token sampled at `temperature` from the
policy's next-token distribution (one forward per prompt gives all `samples` members). Its
reward is `consistency_reward`: 1 only when it picks the correct query in both orders, so a
judge that follows a position earns nothing. Advantages are normalised within the pair's
group (`acesql.grpo.advantages.group_advantages`); each member gives two one-token sequences
with its advantage, and one update takes their token-mean clipped loss with the k3 KL to the
frozen starting model (`DualRoleUpdate.single_role`, prompts shared across a group).

Held-out pairs are judged greedily, before training and every `eval_every` steps, from the
answer letters' probabilities (`judge_pairs`): consistent accuracy (both orders right),
averaged accuracy (the two orders averaged, as `LetterJudge` ranks at test time) and the
position bias (mean P(A) over both orders, minus 0.5).

The model continues from `ranker.model` (by default the GRPO model) and is saved as a new
folder: one model in three roles, as R3-SQL trains one policy, while the GRPO model stays
for comparison. Departures, said plainly: one update per rollout (the old policy is the
current one); the top `train_layers` blocks train (CPU); groups whose members all earned the
same reward are skipped when `beta` is 0 (they carry no gradient).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path

import torch

from acesql.checkpoint import Checkpoints, fingerprint, save_model
from acesql.errors import ConfigError
from acesql.grpo.advantages import group_advantages
from acesql.grpo.update import ScoredSequence, single_role_training
from acesql.progress import history_windows, window_mean
from acesql.ranker.judge import letter_id, next_token_logprobs
from acesql.ranker.pairs import RankerPair
from acesql.tracking import NullTracker, Tracker


def consistency_reward(first: int, second: int, letter_a: int, letter_b: int) -> float:
    """1 when the answer to the correct-query-first prompt is A and to the correct-query-second
    prompt is B, else 0 (any other token, or one position chosen twice).

    >>> a, b = 1, 2
    >>> [consistency_reward(f, s, a, b) for f, s in ((a, b), (a, a), (b, b), (7, b))]
    [1.0, 0.0, 0.0, 0.0]
    """
    return float(first == letter_a and second == letter_b)


def judge_pairs(
    model, tokenizer, pairs: list[RankerPair], letters: tuple[int, int], batch_size: int = 8
) -> dict:
    """Greedy judgments of `pairs` (see the module doc): consistent and averaged accuracy,
    position bias, over the number of pairs judged."""
    if not pairs:
        return {"pairs": 0}
    prompts = [p for pair in pairs for p in (pair.right_first, pair.right_second)]
    logp = next_token_logprobs(model, tokenizer, prompts, batch_size)[:, list(letters)]
    p_a = torch.softmax(logp, dim=-1)[:, 0].view(-1, 2)  # P(A) renormalised over A, B
    first, second = p_a[:, 0], p_a[:, 1]  # right answers: A, then B
    return {
        "pairs": len(pairs),
        "consistent_accuracy": round(((first > 0.5) & (second < 0.5)).float().mean().item(), 4),
        "averaged_accuracy": round((0.5 * (first + 1 - second) > 0.5).float().mean().item(), 4),
        "position_bias": round(p_a.mean().item() - 0.5, 4),
    }


class RankerTrainer:
    """GRPO of the ranker role from `model_dir` on `pairs` (see the module doc)."""

    def __init__(
        self,
        model_dir: str | Path,
        pairs: list[RankerPair],
        cfg,
        *,
        held_out: list[RankerPair] = (),
        seed: int = 0,
        tracker: Tracker | None = None,
        device: str | None = None,
    ):
        if not pairs:
            raise ConfigError(
                "no ranker pairs to train on: ranker_data found no question with both a "
                "correct and a wrong candidate (see its metrics: skipped reasons)"
            )
        self.cfg, self.pairs, self.held_out, self.seed = cfg, pairs, list(held_out), seed
        self.model_dir = Path(model_dir)
        self.tracker = tracker or NullTracker()
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        torch.manual_seed(seed)
        self.tokenizer, self.model, self.ref, self.optimizer, self.update = single_role_training(
            model_dir, cfg, self.device, micro_batch_size=cfg.samples, share_prompts=True
        )
        self.letters = (letter_id(self.tokenizer, "A"), letter_id(self.tokenizer, "B"))
        self.history: list[dict] = []
        self.evaluations: list[dict] = []

    def fingerprint(self) -> str:
        settings = self.cfg.model_dump(mode="json")
        data = [p.right_first + p.right_second for p in self.pairs]
        return fingerprint(
            [str(self.model_dir.resolve()), self.seed],
            settings,
            paced=("time_budget_minutes", "checkpoint_every", "eval_every"),
            data=data,
        )

    def train(self, out_dir: str | Path, progress: Callable[[int], None] | None = None) -> dict:
        """Run the steps (or until the time budget), resuming this run's latest checkpoint;
        save the model; return a summary."""
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        cfg, start = self.cfg, time.monotonic()
        ckpts = Checkpoints(out_dir / "checkpoints", keep=1)
        run = self.fingerprint()
        first_step = self._resume(ckpts.latest(run))
        if first_step == 0:
            self._evaluate(0)
        if progress and first_step:
            progress(first_step)
        stopped = "steps"
        for step in range(first_step, cfg.steps):
            if cfg.time_budget_minutes and time.monotonic() - start > 60 * cfg.time_budget_minutes:
                stopped = "time_budget"
                break
            record = self.step(self._batch(step), step)
            self.history.append(record)
            self.tracker.log_metrics({f"ranker/{k}": v for k, v in record.items()}, step=step)
            done = step + 1
            if cfg.eval_every and done % cfg.eval_every == 0 and done < cfg.steps:
                self._evaluate(done)
            if cfg.checkpoint_every and done % cfg.checkpoint_every == 0 and done < cfg.steps:
                self._checkpoint(ckpts, done, run)
            if progress:
                progress(1)
        self._evaluate(len(self.history))
        save_model(self.model, self.tokenizer, out_dir)
        return self.summary(stopped, time.monotonic() - start)

    def step(self, batch: list[RankerPair], step: int) -> dict:
        cfg = self.cfg
        prompts = [p for pair in batch for p in (pair.right_first, pair.right_second)]
        self.model.eval()
        logp = next_token_logprobs(self.model, self.tokenizer, prompts, cfg.samples)
        gen = torch.Generator().manual_seed(self.seed * 100_003 + step)
        probs = torch.softmax(logp.float().cpu() / cfg.temperature, dim=-1)
        tokens = torch.multinomial(probs, cfg.samples, replacement=True, generator=gen).tolist()
        self.model.train()
        seqs, rewards, signal = [], [], 0
        for k, pair in enumerate(batch):
            first, second = tokens[2 * k], tokens[2 * k + 1]
            group = [consistency_reward(f, s, *self.letters) for f, s in zip(first, second)]
            rewards += group
            advantages = group_advantages(group).tolist()
            if cfg.beta == 0 and not any(advantages):
                continue
            signal += 1
            ids = [self._ids(pair.right_first), self._ids(pair.right_second)]
            for f, s, a in zip(first, second, advantages):
                seqs += [ScoredSequence(ids[0], [f], a), ScoredSequence(ids[1], [s], a)]
        stats = self.update.single_role(seqs) if seqs else {"updated": 0.0}
        letters = [t for row in tokens for t in row]
        return {
            "reward_mean": sum(rewards) / len(rewards),
            "letter_rate": sum(t in self.letters for t in letters) / len(letters),
            "groups_with_signal": signal,
            **stats,
        }

    def summary(self, stopped: str, seconds: float) -> dict:
        first, last, width = history_windows(self.history)
        before = self.evaluations[0] if self.evaluations else {}
        after = self.evaluations[-1] if self.evaluations else {}
        return {
            "steps": len(self.history),
            "stopped": stopped,
            "train_pairs": len(self.pairs),
            "train_seconds": round(seconds, 1),
            "window_steps": width,
            "reward_mean_first5": window_mean(first, "reward_mean"),
            "reward_mean_last5": window_mean(last, "reward_mean"),
            **{f"held_out_before/{k}": v for k, v in before.items() if k != "step"},
            **{f"held_out_after/{k}": v for k, v in after.items() if k != "step"},
            "history": self.history,
            "evaluations": self.evaluations,
        }

    # ------------------------------------------------------------------ internals
    def _ids(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False).input_ids

    def _batch(self, step: int) -> list[RankerPair]:
        """Step `step`'s pairs: epochs over a shuffled order, a fresh shuffle per epoch."""
        size = min(self.cfg.pairs_per_step, len(self.pairs))
        start = step * size
        epoch, offset = divmod(start, len(self.pairs))
        order = list(range(len(self.pairs)))
        random.Random(f"{self.seed}:ranker:{epoch}").shuffle(order)
        picked = order[offset : offset + size]
        if len(picked) < size:  # the epoch ran out: finish from the next one's order
            nxt = list(range(len(self.pairs)))
            random.Random(f"{self.seed}:ranker:{epoch + 1}").shuffle(nxt)
            picked += [i for i in nxt if i not in picked][: size - len(picked)]
        return [self.pairs[i] for i in picked]

    def _evaluate(self, step: int) -> None:
        if not self.held_out:
            return
        self.model.eval()
        scores = judge_pairs(self.model, self.tokenizer, self.held_out, self.letters)
        self.model.train()
        self.evaluations.append({"step": step, **scores})
        self.tracker.log_metrics({f"ranker/held_out/{k}": v for k, v in scores.items()}, step=step)

    def _checkpoint(self, ckpts: Checkpoints, step: int, run: str) -> None:
        def write(folder: Path) -> None:
            state = {k: v for k, v in self.model.state_dict().items()}
            torch.save(state, folder / "model.pt")
            torch.save(self.optimizer.state_dict(), folder / "optimizer.pt")

        state = {
            "fingerprint": run,
            "step": step,
            "history": self.history,
            "evaluations": self.evaluations,
        }
        ckpts.save(step, state, write)

    def _resume(self, found) -> int:
        if found is None:
            return 0
        path, state = found
        self.model.load_state_dict(torch.load(path / "model.pt", map_location=self.device))
        self.optimizer.load_state_dict(torch.load(path / "optimizer.pt", map_location=self.device))
        self.history, self.evaluations = state["history"], state["evaluations"]
        return int(state["step"])
