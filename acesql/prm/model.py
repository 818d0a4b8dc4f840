"""The trajectory score model R_phi of Reward-SQL: P(this Chain-of-CTE prefix leads to a
correct answer), a separate model with its own weights.

    text = render_record(record)                  # question, schema, steps + results, <step>
    scorer = TrajectoryScorer.load("models/prm")  # a causal LM with a one-logit head
    scorer.score([record, ...])                   # probabilities
    metrics = train_prm(base_dir, train, held_out, cfg, "models/prm")

The input interleaves each step (its rationale and CTE) with its intermediate result and ends
with the marker `<step>`, the point the score is read at (the paper's step marker token; here
plain text, so no embedding is added to the base model). The model is the base causal LM with
a linear head on the last token's hidden state (transformers' sequence classification head,
one label), trained with binary cross-entropy against the soft labels sigma. Reported on
held-out records (their questions never seen in training): the loss, the AUC of the scores
against sigma >= 0.5 (over all pairs, and over pairs of one question only, the ranking
best-of-n relies on), and a calibration curve (mean score against mean sigma per bin of
scores, with the expected calibration error). The saved model records the view of its
records (`prm.json`): chains a CoCTE policy wrote, or plain SQL seen as chains
(`acesql.prm.view`); it scores candidates of that kind only.
"""

from __future__ import annotations

import json
import math
import random
import time
from pathlib import Path

import torch

from acesql.checkpoint import save_model
from acesql.errors import ConfigError
from acesql.models.base_model import load_tokenizer, resolve_model_path
from acesql.prm.quality import auc, auc_within, calibration

STEP_MARKER = "<step>"
META_FILE = "prm.json"  # beside the weights: the view the model reads (acesql.prm.view)


def render_record(record: dict) -> str:
    """The text R_phi reads for one labelled prefix or complete trajectory.

    >>> print(render_record({"question": "How many?", "evidence": "", "schema": "t(a)",
    ...     "steps": [{"rationale": "all rows", "name": "s", "sql": "SELECT a FROM t",
    ...                "result": "1 row"}], "final": None}))
    Question: How many?
    Schema:
    t(a)
    Step 1: all rows
    s AS (SELECT a FROM t)
    Result: 1 row
    <step>
    """
    hint = f"\nHint: {record['evidence']}" if record.get("evidence") else ""
    lines = [f"Question: {record['question']}{hint}", "Schema:", record["schema"]]
    for k, step in enumerate(record["steps"], 1):
        lines.append(f"Step {k}: {step['rationale']}")
        lines.append(f"{step['name']} AS ({step['sql']})")
        lines.append(f"Result: {step['result']}")
    final = record.get("final")
    if final:
        lines.append(f"Final: {final['sql']}")
        lines.append(f"Result: {final['result']}")
    lines.append(STEP_MARKER)
    return "\n".join(lines)


class TrajectoryScorer:
    """R_phi: a causal LM with a one-logit head (see the module doc)."""

    def __init__(self, model, tokenizer, max_length: int = 2048, view: str = "cocte"):
        self.model, self.tokenizer, self.max_length = model, tokenizer, max_length
        self.view = view  # what its candidates are: chains (cocte) or plain SQL (direct)

    @classmethod
    def from_base(cls, base: str | Path, max_length: int = 2048, device: str = "cpu"):
        """A new head on the base causal LM at `base` (its own copy of the weights)."""
        from transformers import AutoModelForSequenceClassification

        tokenizer = load_tokenizer(base)
        tokenizer.padding_side = "right"
        tokenizer.truncation_side = "left"  # a long input loses its start, never the marker
        try:
            model = AutoModelForSequenceClassification.from_pretrained(
                resolve_model_path(base), num_labels=1, dtype=torch.float32
            )
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot build the score model on {base}: {exc}") from exc
        model.config.pad_token_id = tokenizer.pad_token_id
        return cls(model.to(device), tokenizer, max_length)

    @classmethod
    def load(cls, folder: str | Path, max_length: int = 2048, device: str = "cpu"):
        """A saved score model (its head is in the folder), with the view it was trained on."""
        scorer = cls.from_base(folder, max_length, device)
        meta = Path(folder) / META_FILE
        if meta.is_file():
            scorer.view = json.loads(meta.read_text()).get("view", "cocte")
        return scorer

    def logits(self, records: list[dict]) -> torch.Tensor:
        """One logit per record, (len(records),)."""
        device = next(self.model.parameters()).device
        texts = [render_record(r) for r in records]
        enc = self.tokenizer(
            texts,
            return_tensors="pt",
            padding=True,
            truncation=True,
            max_length=self.max_length,
            add_special_tokens=False,
        )
        out = self.model(
            input_ids=enc.input_ids.to(device), attention_mask=enc.attention_mask.to(device)
        )
        return out.logits[:, 0].float()

    @torch.no_grad()
    def score(self, records: list[dict], batch_size: int = 8) -> list[float]:
        """R_phi of each record, a probability."""
        was = self.model.training
        self.model.eval()
        try:
            return [
                p
                for start in range(0, len(records), batch_size)
                for p in torch.sigmoid(self.logits(records[start : start + batch_size])).tolist()
            ]
        finally:
            self.model.train(was)

    def save(self, out_dir: str | Path) -> None:
        save_model(self.model, self.tokenizer, Path(out_dir))
        (Path(out_dir) / META_FILE).write_text(json.dumps({"view": self.view}) + "\n")


def held_out_metrics(scorer: TrajectoryScorer, records: list[dict]) -> dict:
    """Loss, AUC and calibration of `scorer` on `records` (see the module doc)."""
    if not records:
        return {"records": 0}
    scores = scorer.score(records)
    labels = [float(r["sigma"]) for r in records]
    eps = 1e-7
    loss = -sum(
        y * math.log(max(s, eps)) + (1 - y) * math.log(max(1 - s, eps))
        for s, y in zip(scores, labels)
    ) / len(records)
    cal = calibration(scores, labels)
    positive = [y >= 0.5 for y in labels]
    area = auc(scores, positive)
    within = auc_within(scores, positive, [r.get("key") for r in records])
    return {
        "records": len(records),
        "loss": round(loss, 4),
        "auc": round(area, 4) if area is not None else None,
        "auc_within_question": round(within, 4) if within is not None else None,
        "ece": round(cal["ece"], 4),
        "calibration": cal["bins"],
    }


def train_prm(
    base: str | Path,
    train: list[dict],
    held_out: list[dict],
    cfg,
    out_dir: str | Path,
    *,
    seed: int = 0,
    tracker=None,
    progress=None,
    device: str | None = None,
) -> dict:
    """Train R_phi on `train` (soft-label BCE, AdamW), judge `held_out` before and after;
    save the model to `out_dir`; return the metrics."""
    if not train:
        raise ConfigError("no labelled prefixes to train the score model on: run prm_data")
    views = {r.get("view", "cocte") for r in train + held_out}
    if len(views) > 1:
        raise ConfigError(
            f"the labelled records mix views {sorted(views)}: label them from one policy format"
        )
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(seed)
    scorer = TrajectoryScorer.from_base(base, cfg.max_length, device)
    scorer.view = views.pop()
    params = [p for p in scorer.model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.learning_rate)
    before = held_out_metrics(scorer, held_out)
    rng = random.Random(f"{seed}:prm")
    steps = math.ceil(math.ceil(len(train) / cfg.batch_size) * cfg.epochs)
    losses, start, stopped = [], time.monotonic(), "epochs"
    order: list[int] = []
    scorer.model.train()
    for step in range(steps):
        if cfg.time_budget_minutes and time.monotonic() - start > 60 * cfg.time_budget_minutes:
            stopped = "time_budget"
            break
        if len(order) < cfg.batch_size:
            fresh = list(range(len(train)))
            rng.shuffle(fresh)
            order += fresh
        batch = [train[order.pop()] for _ in range(cfg.batch_size)]
        labels = torch.tensor([float(r["sigma"]) for r in batch], device=device)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(scorer.logits(batch), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        losses.append(round(float(loss.detach()), 5))
        if tracker is not None:
            tracker.log_metrics({"prm/loss": losses[-1]}, step=step)
        if progress:
            progress(1)
    after = held_out_metrics(scorer, held_out)
    scorer.save(out_dir)
    return {
        "train_records": len(train),
        "steps": len(losses),
        "planned_steps": steps,
        "stopped": stopped,
        "train_seconds": round(time.monotonic() - start, 1),
        "first_loss": losses[0] if losses else None,
        "final_loss": losses[-1] if losses else None,
        **{f"held_out_before/{k}": v for k, v in before.items() if k != "calibration"},
        **{f"held_out_after/{k}": v for k, v in after.items() if k != "calibration"},
        "calibration_before": before.get("calibration"),
        "calibration_after": after.get("calibration"),
        "losses": losses,
    }
