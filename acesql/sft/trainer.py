"""Mixed SFT of both roles in one run: loss on response tokens only, through accelerate.

    result = train_sft(model_dir, records, out_dir, params.sft, tracker, seed=params.base.seed)

`config` is the `sft` section of params.yaml (`acesql.config.SftSection`); the seed is `base`'s.

- fp32 weights; with `bf16_autocast` the forward runs under bf16 autocast (CPU and GPU;
  `auto`: where the hardware has bf16, `acesql.models.precision`).
  Pure bf16 AdamW barely moves a small model's loss on CPU: weights stay fp32.
- Sequences are bucketed by length (less padding), batches shuffled, seeded.
- Every `checkpoint_every` optimizer steps a checkpoint is written atomically under
  `out_dir/checkpoints/` (`acesql.checkpoint`: accelerate's state plus `trainer_state.json`);
  a killed run started again resumes from the newest complete one of the same run (weights,
  optimizer, scheduler, data position, elapsed time). The last two are kept.
- `time_budget_minutes` ends training early, cleanly: the model trained so far is saved; the
  progress bar then shows the budget's time left, not the ETA of steps that will not run.
  `max_steps` ends it after that many optimizer steps, the schedule unchanged: what a time
  budget does on a quiet machine, but the same steps on a busy one.
- Multi-GPU: run the stage under `accelerate launch` (see infra/); the loop is the same.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from acesql.checkpoint import Checkpoints, fingerprint, require_free_space, save_model, saves_bytes
from acesql.config import SftSection
from acesql.errors import DiskSpaceError
from acesql.models.base_model import load_model, load_tokenizer
from acesql.models.freezing import train_top_layers
from acesql.models.logits import IGNORE, response_loss
from acesql.models.precision import bf16_autocast_enabled
from acesql.progress import StepBar
from acesql.tracking import NullTracker, Tracker

# settings that only pace or log a run: changing them still resumes its checkpoints
PACED = ("time_budget_minutes", "max_steps", "checkpoint_every", "log_every")


def tokenize_records(tokenizer, records: list[dict], max_length: int) -> tuple[list[dict], int]:
    """Token ids and labels (prompt masked) per record; returns (items, n dropped too long)."""
    eos = tokenizer.eos_token_id
    items, dropped = [], 0
    for rec in records:
        prompt = tokenizer(rec["prompt"], add_special_tokens=False).input_ids
        response = tokenizer(rec["response"], add_special_tokens=False).input_ids + [eos]
        if len(prompt) + len(response) > max_length:
            dropped += 1
            continue
        items.append(
            {
                "input_ids": prompt + response,
                "labels": [IGNORE] * len(prompt) + response,
                "role": rec["role"],
            }
        )
    return items, dropped


def make_batches(items: list[dict], batch_size: int, seed: int, epoch: int) -> list[list[int]]:
    """Indices of each micro-batch: shuffled, bucketed by length, batches shuffled again."""
    rng = random.Random(f"{seed}:{epoch}")
    order = list(range(len(items)))
    rng.shuffle(order)
    bucket = batch_size * 32
    batches = []
    for start in range(0, len(order), bucket):
        chunk = sorted(order[start : start + bucket], key=lambda i: len(items[i]["input_ids"]))
        batches += [chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size)]
    rng.shuffle(batches)
    return batches


def collate(items: list[dict], pad_id: int) -> dict:
    width = max(len(it["input_ids"]) for it in items)
    ids = torch.full((len(items), width), pad_id, dtype=torch.long)
    labels = torch.full((len(items), width), IGNORE, dtype=torch.long)
    mask = torch.zeros((len(items), width), dtype=torch.long)
    for row, it in enumerate(items):
        n = len(it["input_ids"])
        ids[row, :n] = torch.tensor(it["input_ids"])
        labels[row, :n] = torch.tensor(it["labels"])
        mask[row, :n] = 1
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


@dataclass
class _Run:
    """One training run's moving parts, set up by `_prepare`."""

    accelerator: object
    autocast: object
    model: object
    optimizer: object
    scheduler: object
    state: dict
    total_steps: int
    resumed_from: int


def train_sft(
    model_dir,
    records: list[dict],
    out_dir,
    config: SftSection,
    tracker: Tracker | None = None,
    device: str | None = None,
    *,
    seed: int = 0,
) -> dict:
    """Fine-tune the model at `model_dir` on `records`; save it to `out_dir`; return a summary."""

    tracker = tracker or NullTracker()
    out_dir = Path(out_dir)
    ckpts = Checkpoints(out_dir / "checkpoints", state_file="trainer_state.json")
    torch.manual_seed(seed)
    tokenizer = load_tokenizer(model_dir)
    items, too_long = tokenize_records(tokenizer, records, config.max_length)
    if not items:
        raise ValueError("no SFT record fits sft.max_length; raise it or shorten the prompts")
    run = _prepare(model_dir, records, len(items), config, device, seed, ckpts)
    _check_room(run, config, ckpts, out_dir)
    stop_reason = _train(run, items, tokenizer.pad_token_id, config, seed, tracker, ckpts)
    run.accelerator.wait_for_everyone()
    _save_model(run.accelerator, run.model, tokenizer, out_dir)
    state = run.state
    summary = {
        "steps": state["step"],
        "planned_steps": run.total_steps,
        "stop_reason": stop_reason,
        "examples": len(items),
        "dropped_too_long": too_long,
        "tokens_seen": state["tokens"],
        "train_seconds": round(state["elapsed_s"], 1),
        "first_loss": state["losses"][0] if state["losses"] else None,
        "final_loss": state["losses"][-1] if state["losses"] else None,
        "resumed_from_step": run.resumed_from,  # as read from disk
        "losses": state["losses"],
    }
    if run.accelerator.is_main_process:
        (out_dir / "sft_summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def _prepare(model_dir, records, n_items, config: SftSection, device, seed, ckpts) -> _Run:
    """Accelerator, model, optimizer and cosine schedule; the newest checkpoint's state if any."""
    from accelerate import Accelerator
    from transformers import get_scheduler

    use_cpu = device == "cpu" or (device is None and not torch.cuda.is_available())
    # bf16 autocast is applied here, not through accelerate's mixed_precision, so that one
    # process can train several times with different settings (accelerate's state is global)
    # the schedule counts optimizer steps of the global batch: accelerate would otherwise step
    # it once per process on every optimizer step (it assumes per-process epochs)
    accelerator = Accelerator(
        gradient_accumulation_steps=config.grad_accum,
        cpu=use_cpu,
        step_scheduler_with_optimizer=False,
    )
    autocast = torch.autocast(
        accelerator.device.type,
        dtype=torch.bfloat16,
        enabled=bf16_autocast_enabled(config.bf16_autocast, accelerator.device),
    )
    run_id = _fingerprint(model_dir, records, config, seed)
    resume = ckpts.latest(run_id)
    model = load_model(model_dir, dtype="float32", device="cpu")
    if config.gradient_checkpointing:
        model.gradient_checkpointing_enable()
        model.config.use_cache = False
    model.train()

    world = accelerator.num_processes
    steps_per_epoch = math.ceil(n_items / config.batch_size / config.grad_accum / world)
    total_steps = max(1, math.ceil(steps_per_epoch * config.epochs))
    trainable = train_top_layers(model, config.train_layers)
    optimizer = torch.optim.AdamW(
        trainable, lr=config.learning_rate, weight_decay=config.weight_decay
    )
    scheduler = get_scheduler(
        "cosine",
        optimizer,
        num_warmup_steps=int(config.warmup_ratio * total_steps),
        num_training_steps=total_steps,
    )
    model, optimizer, scheduler = accelerator.prepare(model, optimizer, scheduler)
    state = {
        "step": 0,
        "micro": 0,
        "epoch": 0,
        "elapsed_s": 0.0,
        "tokens": 0,
        "losses": [],
        "fingerprint": run_id,
    }
    if resume:  # weights, optimizer, scheduler and RNG states, sharded or not
        accelerator.load_state(str(resume.path))
        state = dict(resume.state)
    return _Run(
        accelerator,
        autocast,
        model,
        optimizer,
        scheduler,
        state,
        total_steps,
        resume.state["step"] if resume else 0,
    )


def _check_room(run: _Run, config: SftSection, ckpts: Checkpoints, out_dir: Path) -> None:
    """Stop before the first step when the disk cannot hold the checkpoints still to come and
    the final model (the main process checks; every process stops)."""
    accelerator, short = run.accelerator, None
    if accelerator.is_main_process:
        model = accelerator.unwrap_model(run.model)
        last = min(run.total_steps, config.max_steps or run.total_steps)
        saves = last // config.checkpoint_every - run.state["step"] // config.checkpoint_every
        need = saves_bytes(model, ckpts, saves)
        try:
            require_free_space(out_dir, need, "SFT")
        except DiskSpaceError as err:
            short = err
    flag = torch.tensor(float(short is not None), device=accelerator.device)
    if float(accelerator.reduce(flag, "sum")) > 0:
        raise short or DiskSpaceError("the main process has too little disk for the saves")


def _train(run: _Run, items, pad_id, config: SftSection, seed, tracker, ckpts) -> str:
    """Epochs of shuffled micro-batches until the last step or the time budget; why it ended."""
    accelerator, state = run.accelerator, run.state
    world = accelerator.num_processes
    budget_s = config.time_budget_minutes * 60 if config.time_budget_minutes else math.inf
    last = min(run.total_steps, config.max_steps or run.total_steps)  # schedule spans total
    bar = StepBar(
        total=last,
        initial=state["step"],
        desc="sft",
        unit="step",
        disable=not accelerator.is_main_process,
        budget_s=budget_s - state["elapsed_s"] if budget_s < math.inf else None,
    )
    started = time.monotonic() - state["elapsed_s"]
    window: list[float] = []
    stop_reason = "epochs" if last == run.total_steps else "max_steps"
    while state["step"] < last:
        batches = make_batches(items, config.batch_size, seed, state["epoch"])
        batches = batches[accelerator.process_index :: world]  # each process its share
        while state["micro"] < len(batches) and state["step"] < last:
            batch = collate([items[i] for i in batches[state["micro"]]], pad_id)
            window.append(_micro_step(run, batch))
            if not accelerator.sync_gradients:
                continue
            state["step"] += 1
            state["elapsed_s"] = time.monotonic() - started
            _log_step(run, window, bar, config, tracker)
            window = []
            if state["step"] % config.checkpoint_every == 0:
                _save_checkpoint(accelerator, state, ckpts)
            if state["elapsed_s"] > budget_s:
                stop_reason = "time_budget"
                break
        if stop_reason == "time_budget":
            break
        state["epoch"] += 1
        state["micro"] = 0
    bar.close()
    return stop_reason


def _micro_step(run: _Run, batch: dict) -> float:
    """Forward and backward of one micro-batch; the optimizer steps when accumulation is done."""
    accelerator, model = run.accelerator, run.model
    batch = {k: v.to(accelerator.device) for k, v in batch.items()}
    with accelerator.accumulate(model):
        with run.autocast:
            loss = response_loss(model, **batch)
        accelerator.backward(loss)
        if accelerator.sync_gradients:
            accelerator.clip_grad_norm_(model.parameters(), 1.0)
        run.optimizer.step()
        if accelerator.sync_gradients:
            run.scheduler.step()
        run.optimizer.zero_grad()
    run.state["micro"] += 1
    run.state["tokens"] += int(batch["attention_mask"].sum())
    return float(loss.detach())


def _log_step(run: _Run, window: list[float], bar, config: SftSection, tracker) -> None:
    """The global batch's loss (mean over processes of their micro-batches), logged and shown."""
    state = run.state
    loss_now = torch.tensor(sum(window) / len(window), device=run.accelerator.device)
    mean = float(run.accelerator.reduce(loss_now, "mean"))
    state["losses"].append(round(mean, 5))
    bar.update()
    bar.set_postfix(loss=f"{mean:.4f}")
    if state["step"] % config.log_every == 0:
        tracker.log_metrics(
            {"sft/loss": mean, "sft/lr": run.scheduler.get_last_lr()[0]}, step=state["step"]
        )


def _save_model(accelerator, model, tokenizer, out_dir: Path) -> None:
    """Save the full weights (gathered from every process under FSDP) from the main process."""
    state_dict = accelerator.get_state_dict(model)
    if accelerator.is_main_process:
        save_model(accelerator.unwrap_model(model), tokenizer, out_dir, state_dict)


def _save_checkpoint(accelerator, state: dict, ckpts: Checkpoints) -> None:
    """Every process writes its part into the temp folder; the main one commits it.

    `accelerator.save_state` holds model, optimizer, scheduler and RNG states (sharded under
    FSDP); `trainer_state.json` holds the data position and the loss history.
    """
    step = state["step"]
    if accelerator.is_main_process:
        ckpts.begin(step)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(ckpts.staging(step)))
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        ckpts.commit(step, state)


def _fingerprint(model_dir, records: list[dict], config: SftSection, seed: int) -> str:
    """What makes two runs the same run: model, settings but `PACED`, seed, every record."""
    settings = {**config.model_dump(mode="json"), "seed": seed}
    texts = (text for rec in records for text in (rec["prompt"], rec["response"]))
    return fingerprint([str(model_dir)], settings, paced=PACED, data=texts)
