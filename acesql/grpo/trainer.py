"""The ACE-SQL GRPO trainer: one policy, two roles, one optimizer step per rollout.

One step, top to bottom (`GrpoTrainer.step`):

    questions -> N retriever rollouts -> parse + vote -> pruned schema -> N generator rollouts
    -> batch execution (gold cached) -> targets S*(q) read from the pool -> pool update
    -> rewards -> advantages per role (`acesql.grpo.scoring`)
    -> two losses -> two backward passes -> PCGrad -> one optimizer step (grad-norm clip)
    -> log -> checkpoint

- As in the authors' code: the retriever's target S*(q) is taken from the pool *before* this
  step's update, so a retriever sample is never rewarded for a set that only this step's
  generator samples put there; the vote's cutoff is ceil(threshold x N) over all N samples
  and an empty vote leaves the generator an empty schema (`acesql.sql.column_vote`); outputs cut
  off at the token limit, and generator outputs without a closed ```sql block (with reasoning
  on, after `</think>`), earn 0 (`acesql.sql.parsing.format_ok`).
- Old-policy log-probs are *recomputed*: each rollout gets exactly one optimizer step, so the
  policy that sampled is the policy being differentiated, and old = current, detached (ratio 1
  in value, the clipped surrogate's gradient is the policy gradient). The engine's own
  log-probs are not used: a vLLM engine computes them with other kernels and precision.
- The reference policy is a frozen copy of the starting (SFT) model; it is not kept when
  beta is 0.
- Memory: the retriever's gradient is copied once into a buffer, the generator's lands in
  the parameters' `.grad`, and PCGrad writes the combination in place there. One extra
  gradient copy, where the authors' code clones both.
- Metrics are buffered and sent to the tracker when a checkpoint is written: a run killed
  between checkpoints and resumed redoes those steps and logs each step exactly once.
- Checkpoints (`acesql.checkpoint`) go under `out_dir/checkpoints/step-NNNNNN/` (model,
  optimizer, scheduler, RNG states, pool, then `state.json`), atomically; the last two are
  kept, and a run resumes only from a checkpoint with its own fingerprint (`run_fingerprint`).
- With `time_budget_minutes` the progress bar shows the budget's time left, not the ETA of
  steps that will not run.

Where it departs from the paper (each a switch, off by default unless said):
- `skip_flat_groups` leaves groups with equal rewards out of the update (they carry only the
  KL term); the paper keeps them. On in the CPU profile of params.yaml, for time.
- A question whose pool is empty (none of its rollouts ever matched) has no target: every
  retriever sample earns 0 there, so its group is flat.
- `train_layers` trains only the top decoder blocks (a CPU saving; the paper trains all).

Across processes (`dist`, under torchrun / accelerate launch; `acesql.distributed`):
- each process rolls out its contiguous block of the step's questions; rewards and per-role
  advantages stay per question group, on the process that owns the question;
- the pool stays identical everywhere: every process's matched column sets are gathered and
  applied in question order, after each process read its targets from the pool as it stood
  before the step (the one-process order);
- gradients are summed over processes before PCGrad (`acesql.grpo.update`), so one step equals
  the one-process step on the same rollouts; with `sharding: fsdp` the weights, gradients and
  optimizer state are split across processes (FSDP2) and the transformers engine samples from a
  full inference copy refreshed after every step;
- logged numbers are global; MLflow, progress bar, checkpoints' shared files and the final
  model are written by process 0, each process's RNG state by itself; a run resumes only with
  the number of processes that wrote its checkpoint; the validation slice is split and gathered;
- every collective has the job's timeout: a process that dies stops the others with a message.
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from acesql.checkpoint import (
    Checkpoint,
    Checkpoints,
    fingerprint,
    require_free_space,
    save_model,
    saves_bytes,
)
from acesql.data.loaders import Example
from acesql.data.schemas import SchemaCache
from acesql.distributed import SINGLE, Dist, full_state_dict, load_full_state, shard_model
from acesql.errors import ConfigError, DiskSpaceError
from acesql.grpo.plots import curves_figure
from acesql.grpo.pool import EmpiricalPool
from acesql.grpo.rewards import ROLES
from acesql.grpo.rollout import rollout
from acesql.grpo.schedule import generator_weight
from acesql.grpo.scoring import StepScorer
from acesql.grpo.update import DualRoleUpdate
from acesql.models.base_model import load_model, load_policy, load_tokenizer
from acesql.models.engine import open_engine
from acesql.models.freezing import train_top_layers
from acesql.models.prompts import PromptBuilder
from acesql.prm.model import TrajectoryScorer
from acesql.prm.select import ProcessScorer
from acesql.progress import StepBar, history_windows, window_mean
from acesql.sql.batch_executor import BatchExecutor
from acesql.tracking import NullTracker, Tracker

# settings that only pace or log a run: changing them still resumes its checkpoints
PACED = ("time_budget_minutes", "checkpoint_every", "eval_every", "pool_snapshot_every")
STATE_FILE = "state.json"


@dataclass
class RunState:
    step: int = 0
    elapsed_s: float = 0.0
    best_eval: float | None = None
    best_step: int | None = None
    tracker_run_id: str | None = None
    fingerprint: str = ""
    world_size: int = 1  # processes that wrote the checkpoint
    sharding: str = "none"  # and how they held the weights
    history: list[dict] = field(default_factory=list)  # one record per step


class _TimedExecutor:
    """Wraps a BatchExecutor to measure the time the rollout spends executing SQL."""

    def __init__(self, executor):
        self.executor = executor
        self.seconds = 0.0

    def match_many(self, *args, **kwargs):
        t0 = time.monotonic()
        try:
            return self.executor.match_many(*args, **kwargs)
        finally:
            self.seconds += time.monotonic() - t0

    def execute_many(self, *args, **kwargs):
        t0 = time.monotonic()
        try:
            return self.executor.execute_many(*args, **kwargs)
        finally:
            self.seconds += time.monotonic() - t0


def question_order(n_questions: int, per_step: int, epochs: float, seed: int) -> list[list[int]]:
    """The questions of every step: each epoch a fresh shuffle, cut into steps.

    Deterministic in the seed, so a resumed run picks up exactly where it stopped.
    """
    order: list[int] = []
    epoch = 0
    wanted = math.ceil(n_questions * epochs)
    while len(order) < wanted:
        idx = list(range(n_questions))
        random.Random(f"{seed}:{epoch}").shuffle(idx)
        order += idx
        epoch += 1
    order = order[:wanted]
    return [order[i : i + per_step] for i in range(0, len(order), per_step)]


class GrpoTrainer:
    """Joint dual-role GRPO from `model_dir` on `examples`, starting from `pool`."""

    def __init__(
        self,
        model_dir: str | Path,
        examples: list[Example],
        pool: EmpiricalPool,
        out_dir: str | Path,
        cfg,
        *,
        seed: int = 0,
        reasoning: bool = False,
        sample_values: int = 0,
        sql_format: str = "direct",
        eval_examples: list[Example] | None = None,
        validation=None,
        tracker: Tracker | None = None,
        device: str | None = None,
        progress: bool = True,
        engine_factory: Callable | None = None,
        dist: Dist = SINGLE,
    ):

        if not examples:
            raise ValueError("no RL questions: the grpo_data stage kept none (see its metrics)")
        self.cfg, self.seed, self.progress = cfg, seed, progress and dist.is_main
        self.dist = dist
        self.examples = examples
        self.pool = pool
        self.out_dir = Path(out_dir)
        self.checkpoints = Checkpoints(self.out_dir / "checkpoints", state_file=STATE_FILE)
        self.tracker = (tracker if dist.is_main else None) or NullTracker()
        # the policy scored on held-out questions every eval_every steps by `validation`
        # (`acesql.eval.end_to_end.Validation`, given by the stage: the trainer does not
        # import the evaluation above it)
        self.eval_examples = (eval_examples or []) if validation is not None else []
        self.validation = validation
        default = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device or (str(dist.device) if dist.enabled else default))
        torch.manual_seed(seed)
        self.tokenizer = load_tokenizer(model_dir)
        self.prompts = PromptBuilder(self.tokenizer, reasoning, sample_values, sql_format)
        self.schemas = SchemaCache(sample_values)
        self.model, self.ref = load_policy(
            model_dir, str(self.device), cfg.beta > 0, cfg.gradient_checkpointing
        )
        self.steps = question_order(len(examples), cfg.questions_per_step, cfg.epochs, seed)
        if cfg.max_steps:
            self.steps = self.steps[: cfg.max_steps]
        self.total_steps = len(self.steps)
        self.horizon = cfg.schedule_fraction * self.total_steps if cfg.schedule else 0.0
        self._build_update(dist)
        self.engine = self._open_engine(model_dir, engine_factory)
        self.executor = _TimedExecutor(BatchExecutor(timeout_s=cfg.timeout_s))
        self.scoring = StepScorer(
            cfg,
            self.schemas,
            self.prompts,
            self.tokenizer,
            dist=dist,
            process=self._process_scorer(cfg, sql_format),
        )
        self.state = RunState(
            fingerprint=run_fingerprint(model_dir, seed, cfg, examples, pool),
            world_size=dist.world_size,
            sharding=dist.sharding if dist.enabled else "none",
        )
        self._pending: list[dict] = []  # step records not yet sent to the tracker

    def _build_update(self, dist: Dist) -> None:
        """Trainable top layers (sharded when asked), AdamW, warm-up, the dual-role update."""
        cfg = self.cfg
        trainable = train_top_layers(self.model, cfg.train_layers)
        if dist.sharded:  # the parameters become this process's slices (DTensors)
            shard_model(self.model)
            if self.ref is not None:
                shard_model(self.ref)
            trainable = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            trainable, lr=cfg.learning_rate, weight_decay=cfg.weight_decay
        )
        warmup = int(cfg.warmup_ratio * self.total_steps)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda s: min(1.0, (s + 1) / warmup) if warmup else 1.0
        )
        self.update = DualRoleUpdate(
            self.model,
            self.optimizer,
            self.scheduler,
            self.ref,
            clip_eps=cfg.clip_eps,
            beta=cfg.beta,
            grad_clip=cfg.grad_clip,
            pcgrad=cfg.pcgrad,
            granularity=cfg.pcgrad_granularity,
            micro_batch_size=cfg.micro_batch_size,
            pad_id=self.tokenizer.pad_token_id,
            bf16_autocast=cfg.bf16_autocast,
            # a cached prompt and gradient checkpointing do not mix in transformers
            share_prompts=cfg.share_prompts and not cfg.gradient_checkpointing,
            dist=dist,
        )

    def _open_engine(self, model_dir, engine_factory: Callable | None):
        """The rollout engine: the given factory's, or one opened from `generation.engine`."""

        gen = self.cfg.generation
        if engine_factory is not None:
            return engine_factory(self.model, self.tokenizer)
        if gen.engine == "transformers":
            from acesql.models.hf_engine import HFEngine

            # shares the policy's module: new weights are seen without a copy; a sharded
            # policy cannot generate alone (FSDP's gathers need every process in step), so
            # the engine gets a full inference copy, refreshed after every step
            sampler = self.model
            if self.dist.sharded:
                sampler = load_model(model_dir, dtype="float32", device=str(self.device)).eval()
            return HFEngine(
                model=sampler,
                tokenizer=self.tokenizer,
                batch_size=gen.batch_size,
                progress=False,
                bf16_autocast=gen.bf16_autocast,
            )

        return open_engine(gen, model_dir)

    # ------------------------------------------------------------------------- the run

    def train(self) -> dict:
        """Run (or resume) to the last step or the time budget; save the final model."""
        resumed_from = self._resume()
        self._check_room()
        budget = self.cfg.time_budget_minutes * 60 if self.cfg.time_budget_minutes else math.inf
        started = time.monotonic() - self.state.elapsed_s
        stop_reason = "steps"
        bar = StepBar(
            total=self.total_steps,
            initial=self.state.step,
            desc="grpo",
            unit="step",
            disable=not self.progress,
            budget_s=budget - self.state.elapsed_s if budget < math.inf else None,
        )
        try:
            while self.state.step < self.total_steps:
                record = self.step()
                self.state.elapsed_s = time.monotonic() - started
                bar.update()
                bar.set_postfix(
                    r_ret=f"{record['retriever/reward_mean']:.2f}",
                    r_gen=f"{record['generator/reward_mean']:.2f}",
                )
                s = self.state.step
                if self.eval_examples and (s % self.cfg.eval_every == 0 or s == self.total_steps):
                    self._validate(record)
                if s % self.cfg.pool_snapshot_every == 0:
                    self._snapshot_pool()
                out_of_time = self.dist.any(self.state.elapsed_s > budget)  # all stop together
                if s % self.cfg.checkpoint_every == 0 or s == self.total_steps or out_of_time:
                    self.save_checkpoint()
                if out_of_time:
                    stop_reason = "time_budget"
                    break
        finally:
            bar.close()
        self._save_final()
        return self.summary(stop_reason, resumed_from)

    def step(self) -> dict:
        """One GRPO step on the next batch of questions; returns its logged record."""
        cfg = self.cfg
        step = self.state.step + 1
        batch = self.dist.shard([self.examples[i] for i in self.steps[step - 1]])
        lam = generator_weight(step, self.horizon) if cfg.schedule else 1.0
        t0 = time.monotonic()
        self.executor.seconds = 0.0
        gen = cfg.generation
        rollouts = rollout(
            batch,
            self.engine,
            self.prompts,
            self.schemas,
            self.executor,
            n_retriever=cfg.samples,
            n_generator=cfg.samples,
            combine="vote",
            vote_threshold=cfg.vote_threshold,
            temperature=gen.temperature,
            top_p=gen.top_p,
            max_new_tokens=gen.max_new_tokens,
            match_mode=cfg.match_mode,
            seed=self.seed * 100_003 + step,
        )
        t_rollout = time.monotonic() - t0 - self.executor.seconds
        # targets from the pool as it stood before this rollout, then the pool update
        rewards, seqs, scored = self.scoring.score(rollouts, self.pool)

        t1 = time.monotonic()
        update = self.update(seqs, lam)
        t_update = time.monotonic() - t1
        self.engine.update_weights(full_state_dict(self.model) if self.dist.sharded else self.model)
        self.state.step = step

        record = {"step": step, "lambda": lam, "lr": self.scheduler.get_last_lr()[0]}
        for role in ROLES:
            record[f"{role}/reward_mean"] = self._mean([x for q in rewards[role] for x in q])
        record["generator/match_rate"] = self._mean([m for x in rollouts for m in x.matched])
        record["retriever/match_rate"] = scored.pop("retriever/match_rate")
        for role, key in (("retriever", "retriever"), ("generator", "generator")):
            lengths = [len(c.token_ids) for x in rollouts for c in getattr(x, key)]
            record[f"{role}/response_tokens"] = self._mean(lengths)
        record.update(scored)
        record.update(update)
        record["time/rollout_s"] = t_rollout
        record["time/execution_s"] = self.executor.seconds
        record["time/update_s"] = t_update
        record = {k: (round(v, 6) if isinstance(v, float) else v) for k, v in record.items()}
        self.state.history.append(record)
        self._pending.append(record)
        return record

    def _mean(self, values: list[float]) -> float:
        """The mean of `values` over every process's values."""
        total, n = self.dist.sum([sum(values), len(values)])
        return total / n if n else 0.0

    # ------------------------------------------------------------------ set-up

    def _process_scorer(self, cfg, sql_format: str):
        """The frozen score model of `generator_reward: process`, or None."""
        if cfg.generator_reward != "process":
            return None

        if not Path(cfg.prm_model).is_dir():
            raise ConfigError(f"grpo.prm_model: {cfg.prm_model} not found: run the prm stage")
        scorer = TrajectoryScorer.load(cfg.prm_model, device=str(self.device))
        scorer.model.requires_grad_(False)
        process = ProcessScorer(scorer, self.tokenizer, self.executor)
        process.require_format(sql_format)
        return process

    # ------------------------------------------------------------------ evaluation

    def _validate(self, record: dict) -> None:
        rows = self.validation.rows(
            self.dist.shard(self.eval_examples), self.engine, self.prompts, self.executor.executor
        )
        summary = self.validation.summary(
            [row for part in self.dist.gather_objects(rows) for row in part]
        )
        ex = summary["pipeline_ex"]
        record["val/pipeline_ex"] = ex
        record["val/generator_ex"] = summary["generator_ex"]
        record["val/full_schema_ex"] = summary["full_schema_ex"]
        record["val/retriever_recall"] = summary["retriever_recall"]
        if self.state.best_eval is None or ex > self.state.best_eval:
            self.state.best_eval, self.state.best_step = ex, self.state.step
            self._save_model(self.out_dir / "best")

    # ------------------------------------------------------------ checkpoints and outs

    def save_checkpoint(self) -> Path | None:
        """Model, optimizer, scheduler, pool, RNG states, step and history; atomically.

        Process 0 writes the shared files and commits; every other process writes its own RNG
        state (`rng-RANK.pt`) into the same temp folder first. Returns the folder on process 0.
        """
        dist, step = self.dist, self.state.step
        model_state, optimizer_state = self._full_states()
        if dist.is_main:
            self.checkpoints.begin(step)
        dist.barrier()
        tmp = self.checkpoints.staging(step)
        rng = {
            "torch": torch.get_rng_state(),
            "python": random.getstate(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
        }
        if not dist.is_main:
            torch.save(rng, tmp / f"rng-{dist.rank}.pt")
        dist.barrier()
        if not dist.is_main:
            dist.barrier()  # process 0 commits
            return None
        self.model.save_pretrained(tmp / "model", state_dict=model_state, safe_serialization=True)
        torch.save(
            {"optimizer": optimizer_state, "scheduler": self.scheduler.state_dict(), "rng": rng},
            tmp / "trainer.pt",
        )
        self.pool.save(tmp / "pool.json")
        self._flush_metrics()
        path = self.checkpoints.commit(step, dict(self.state.__dict__))
        dist.barrier()
        return path

    def _check_room(self) -> None:
        """Stop before the first step when the disk cannot hold the saves still to come: the
        checkpoints, the final model and, when validating, `best/` (process 0 writes them)."""
        short = None
        if self.dist.is_main:
            every, total = self.cfg.checkpoint_every, self.total_steps
            saves = sum(
                1 for s in range(self.state.step + 1, total + 1) if s % every == 0 or s == total
            )
            models = 2 if self.eval_examples else 1
            need = saves_bytes(self.model, self.checkpoints, saves, models=models)
            try:
                require_free_space(self.out_dir, need, "GRPO")
            except DiskSpaceError as err:
                short = err
        if self.dist.any(short is not None):  # every process stops, not process 0 alone
            raise short or DiskSpaceError("process 0 has too little disk for the saves: see it")

    def _full_states(self) -> tuple[dict | None, dict]:
        """(model state for `save_pretrained`, optimizer state) as one process would hold them;
        gathered from the slices under FSDP (a collective: every process calls it)."""
        if not self.dist.sharded:
            return None, self.optimizer.state_dict()
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return get_state_dict(self.model, self.optimizer, options=options)

    def _resume(self) -> int:
        found = self.checkpoints.latest(self.state.fingerprint)
        if not found:
            return 0
        path, state = found
        layout = (self.state.world_size, self.state.sharding)
        written = (state.get("world_size", 1), state.get("sharding", "none"))
        if written != layout:
            raise ConfigError(
                f"checkpoint {path} was written by {written[0]} processes (sharding "
                f"{written[1]}), this run has {layout[0]} (sharding {layout[1]}): resume as it "
                f"was written, or remove {path.parent}"
            )
        from safetensors.torch import load_file

        weights = {}
        for f in sorted((path / "model").glob("*.safetensors")):
            weights.update(load_file(f, device=str(self.device)))
        trainer = torch.load(path / "trainer.pt", weights_only=False)
        load_full_state(self.model, self.optimizer, weights, trainer["optimizer"], self.dist)
        self.scheduler.load_state_dict(trainer["scheduler"])
        rng = trainer["rng"]
        if not self.dist.is_main:
            rng = torch.load(path / f"rng-{self.dist.rank}.pt", weights_only=False)
        torch.set_rng_state(rng["torch"])
        random.setstate(rng["python"])
        if rng["cuda"] is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(rng["cuda"])
        self.pool = EmpiricalPool.load(path / "pool.json")
        self.state = RunState(**state)
        if self.dist.sharded:
            self.engine.update_weights(full_state_dict(self.model))
        return self.state.step

    def _flush_metrics(self) -> None:
        for record in self._pending:
            metrics = {f"grpo/{k}": v for k, v in record.items() if k != "step"}
            self.tracker.log_metrics(metrics, step=record["step"])
        self._pending = []

    def _snapshot_pool(self) -> None:
        if not self.dist.is_main:
            return
        path = self.out_dir / "pool" / f"step-{self.state.step:06d}.json"
        self.pool.save(path)
        self.tracker.log_artifact(path)

    def _save_model(self, out: Path) -> None:
        """The policy's weights to `out` from process 0 (gathered first under FSDP)."""
        state = self._full_states()[0] if self.dist.sharded else None
        if self.dist.is_main:
            save_model(self.model, self.tokenizer, out, state)
        self.dist.barrier()

    def _save_final(self) -> None:
        self._save_model(self.out_dir)
        if not self.dist.is_main:
            return
        self.pool.save(self.out_dir / "pool.json")
        with (self.out_dir / "steps.jsonl").open("w") as fh:
            for record in self.state.history:
                fh.write(json.dumps(record) + "\n")
        if self.state.history:
            fig = curves_figure(self.state.history)
            fig.savefig(self.out_dir / "curves.png", dpi=110)
            self.tracker.log_figure(fig, "plots/grpo_curves.png")

    def summary(self, stop_reason: str = "steps", resumed_from: int = 0) -> dict:
        h = self.state.history
        first, last, width = history_windows(h)
        return {
            "steps": self.state.step,
            "planned_steps": self.total_steps,
            "stop_reason": stop_reason,
            "questions": len(self.examples),
            "resumed_from_step": resumed_from,
            "train_seconds": round(self.state.elapsed_s, 1),
            "best_val_pipeline_ex": self.state.best_eval,
            "best_step": self.state.best_step,
            "window_steps": width,
            **{
                f"{role}_{what}_{span}": window_mean(rows, f"{role}/{what}")
                for role in ROLES
                for what in ("reward_mean", "match_rate")
                for span, rows in (("first5", first), ("last5", last))
            },
            "mean_conflict_ratio": window_mean(h, "conflict_ratio"),
            "pool": self.pool.stats(),
        }

    def close(self) -> None:
        self.executor.executor.close()
        self.engine.close()


def run_fingerprint(model_dir, seed: int, cfg, examples: list[Example], pool: EmpiricalPool) -> str:
    """What makes two runs the same run: model, seed, settings but `PACED`, questions, pool."""
    data = [f"{ex.db_id}\0{ex.question}\0{ex.sql}" for ex in examples]
    data.append(json.dumps(pool.to_dict(), sort_keys=True))
    settings = cfg.model_dump(mode="json")
    if settings.get("generator_reward") == "outcome":  # runs from before the switch resume
        settings.pop("generator_reward")
        settings.pop("prm_model")
    return fingerprint([str(model_dir), seed], settings, paced=PACED, data=data)


def latest_checkpoint(root: Path, fingerprint: str | None = None) -> Checkpoint | None:
    """The newest complete GRPO checkpoint under `root` (of this very run given `fingerprint`)."""
    return Checkpoints(root, state_file=STATE_FILE).latest(fingerprint)
