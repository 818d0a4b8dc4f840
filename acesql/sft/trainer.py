"""Mixed SFT of both roles in one run: loss on response tokens only, through accelerate.

    result = train_sft(model_dir, records, out_dir, config, tracker)

- fp32 weights; with `bf16_autocast` the forward runs under bf16 autocast (CPU and GPU;
  `auto`: where the hardware has bf16, `acesql.models.precision`).
  Pure bf16 AdamW barely moves a small model's loss on CPU: weights stay fp32.
- Sequences are bucketed by length (less padding), batches shuffled, seeded.
- Every `checkpoint_every` optimizer steps a checkpoint is written atomically under
  `out_dir/checkpoints/`; a killed run started again resumes from the newest complete one
  (weights, optimizer, scheduler, data position, elapsed time). The last two are kept.
- `time_budget_minutes` ends training early, cleanly: the model trained so far is saved.
- Multi-GPU: run the stage under `accelerate launch` (see infra/); the loop is the same.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from acesql.models.freezing import train_top_layers
from acesql.models.logits import IGNORE, response_loss
from acesql.models.precision import bf16_autocast_enabled
from acesql.tracking import NullTracker, Tracker

KEEP_CHECKPOINTS = 2


@dataclass
class SftRunConfig:
    epochs: float = 1.0
    time_budget_minutes: float | None = None
    learning_rate: float = 5e-5
    warmup_ratio: float = 0.05
    weight_decay: float = 0.0
    batch_size: int = 4
    grad_accum: int = 2
    max_length: int = 2048
    bf16_autocast: bool | str = "auto"
    gradient_checkpointing: bool = False
    train_layers: int | None = None
    checkpoint_every: int = 25
    log_every: int = 1
    seed: int = 0


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


def train_sft(
    model_dir,
    records: list[dict],
    out_dir,
    config: SftRunConfig,
    tracker: Tracker | None = None,
    device: str | None = None,
) -> dict:
    """Fine-tune the model at `model_dir` on `records`; save it to `out_dir`; return a summary."""
    from accelerate import Accelerator
    from transformers import get_scheduler

    from acesql.models.base_model import load_model, load_tokenizer

    tracker = tracker or NullTracker()
    out_dir = Path(out_dir)
    ckpt_root = out_dir / "checkpoints"
    torch.manual_seed(config.seed)
    tokenizer = load_tokenizer(model_dir)
    items, too_long = tokenize_records(tokenizer, records, config.max_length)
    if not items:
        raise ValueError("no SFT record fits sft.max_length; raise it or shorten the prompts")

    use_cpu = device == "cpu" or (device is None and not torch.cuda.is_available())
    # bf16 autocast is applied here, not through accelerate's mixed_precision, so that one
    # process can train several times with different settings (accelerate's state is global)
    accelerator = Accelerator(gradient_accumulation_steps=config.grad_accum, cpu=use_cpu)
    autocast = torch.autocast(
        accelerator.device.type,
        dtype=torch.bfloat16,
        enabled=bf16_autocast_enabled(config.bf16_autocast, accelerator.device),
    )
    fingerprint = _fingerprint(model_dir, records, config)
    resume = _latest_checkpoint(ckpt_root, fingerprint)
    model = load_model(model_dir, dtype="float32", device="cpu")
    if config.gradient_checkpointing:
        model.gradient_checkpointing_enable()
        model.config.use_cache = False
    model.train()

    world = accelerator.num_processes
    steps_per_epoch = math.ceil(len(items) / config.batch_size / config.grad_accum / world)
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
        "fingerprint": fingerprint,
    }
    if resume:  # weights, optimizer, scheduler and RNG states, sharded or not
        accelerator.load_state(resume["dir"])
        state = dict(resume["state"])

    budget_s = config.time_budget_minutes * 60 if config.time_budget_minutes else math.inf
    bar = tqdm(total=total_steps, initial=state["step"], desc="sft", unit="step")
    started = time.monotonic() - state["elapsed_s"]
    window: list[float] = []
    stop_reason = "epochs"
    while state["step"] < total_steps:
        batches = make_batches(items, config.batch_size, config.seed, state["epoch"])
        batches = batches[accelerator.process_index :: world]  # each process its share
        while state["micro"] < len(batches) and state["step"] < total_steps:
            batch = collate([items[i] for i in batches[state["micro"]]], tokenizer.pad_token_id)
            batch = {k: v.to(accelerator.device) for k, v in batch.items()}
            with accelerator.accumulate(model):
                with autocast:
                    loss = response_loss(model, **batch)
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            state["micro"] += 1
            state["tokens"] += int(batch["attention_mask"].sum())
            window.append(float(loss.detach()))
            if accelerator.sync_gradients:
                state["step"] += 1
                state["elapsed_s"] = time.monotonic() - started
                mean = sum(window) / len(window)
                window = []
                state["losses"].append(round(mean, 5))
                bar.update()
                bar.set_postfix(loss=f"{mean:.4f}")
                if state["step"] % config.log_every == 0:
                    tracker.log_metrics(
                        {"sft/loss": mean, "sft/lr": scheduler.get_last_lr()[0]}, step=state["step"]
                    )
                if state["step"] % config.checkpoint_every == 0:
                    _save_checkpoint(accelerator, state, ckpt_root)
                if state["elapsed_s"] > budget_s:
                    stop_reason = "time_budget"
                    break
        if stop_reason == "time_budget":
            break
        state["epoch"] += 1
        state["micro"] = 0
    bar.close()

    accelerator.wait_for_everyone()
    _save_model(accelerator, model, tokenizer, out_dir)
    summary = {
        "steps": state["step"],
        "planned_steps": total_steps,
        "stop_reason": stop_reason,
        "examples": len(items),
        "dropped_too_long": too_long,
        "tokens_seen": state["tokens"],
        "train_seconds": round(state["elapsed_s"], 1),
        "first_loss": state["losses"][0] if state["losses"] else None,
        "final_loss": state["losses"][-1] if state["losses"] else None,
        "resumed_from_step": resume["state"]["step"] if resume else 0,  # as read from disk
        "losses": state["losses"],
    }
    if accelerator.is_main_process:
        (out_dir / "sft_summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def _save_model(accelerator, model, tokenizer, out_dir: Path) -> None:
    """Save the full weights (gathered from every process under FSDP) from the main process."""
    state_dict = accelerator.get_state_dict(model)
    if accelerator.is_main_process:
        out_dir.mkdir(parents=True, exist_ok=True)
        accelerator.unwrap_model(model).save_pretrained(
            out_dir, state_dict=state_dict, safe_serialization=True
        )
        tokenizer.save_pretrained(out_dir)


def _save_checkpoint(accelerator, state: dict, root: Path) -> None:
    """Write a checkpoint atomically (temp folder, then rename); keep the newest few.

    `accelerator.save_state` holds model, optimizer, scheduler and RNG states (sharded under
    FSDP); `trainer_state.json` holds the data position and the loss history.
    """
    final = root / f"step-{state['step']:06d}"
    tmp = root / f".tmp-{final.name}"
    if accelerator.is_main_process:
        root.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(tmp))
    accelerator.wait_for_everyone()
    if not accelerator.is_main_process:
        return
    (tmp / "trainer_state.json").write_text(json.dumps(state))
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    for old in sorted(root.glob("step-*"))[:-KEEP_CHECKPOINTS]:
        shutil.rmtree(old, ignore_errors=True)


def _latest_checkpoint(root: Path, fingerprint: str) -> dict | None:
    """The newest complete checkpoint of this very run (same model, data and settings)."""
    for path in sorted(root.glob("step-*"), reverse=True):
        state_file = path / "trainer_state.json"
        if not state_file.is_file():  # written last: without it the checkpoint is partial
            continue
        state = json.loads(state_file.read_text())
        if state.get("fingerprint") == fingerprint:
            return {"dir": path, "state": state}
    return None


def _fingerprint(model_dir, records: list[dict], config: SftRunConfig) -> str:
    """What makes two runs the same run; settings that only pace or log it are left out."""
    settings = {
        k: v
        for k, v in asdict(config).items()
        if k not in ("time_budget_minutes", "checkpoint_every", "log_every")
    }
    digest = hashlib.sha256(json.dumps([str(model_dir), settings], sort_keys=True).encode())
    for rec in records:
        digest.update(rec["prompt"].encode())
        digest.update(rec["response"].encode())
    return digest.hexdigest()[:16]
