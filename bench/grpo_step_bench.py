"""Benchmark: one ACE-SQL dual-role GRPO step against TRL's GRPOTrainer, side by side.

What it measures
    The same model (models/base, or --model), the same 2 training
    questions and their chat-formatted retriever prompts, 8 completions per prompt, 64 new
    tokens at most, temperature 1.0, beta 0.001, one optimizer step per rollout:

    trl   `trl.GRPOTrainer` (a bench-only dependency: `pip install -e '.[bench]'`), one role:
          2 retriever prompts x 8 = 16 completions per step, rewarded by whether the parsed
          column set equals the gold one;
    ours  `acesql.grpo.trainer.GrpoTrainer.step()`: both roles, 2 x 8 retriever completions,
          voting, 2 x 8 generator completions on the pruned schemas, SQL execution, pool
          update, rewards, advantages, two losses, PCGrad, one optimizer step = 32 completions.

    Each runs `--steps` steps after one warm-up step; the time of a step is wall time from
    its start to the end of its optimizer step. The figure of merit is seconds per
    completion (steps differ in size), printed with the ratio ours / trl.

    Both run with the same malloc settings and threads, in this one process. glibc's
    allocator otherwise returns memory and faults it back in on every step; set
        GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=17179869184
    in the environment before starting Python to keep it (it cannot be set from inside).
    `--bf16` runs both with bf16 autocast (ours: `grpo.bf16_autocast`; trl: `bf16=True`).

How to run
    .venv/bin/pip install -e '.[bench]' -c constraints.txt
    .venv/bin/python bench/grpo_step_bench.py [--model models/base] [--steps 2] [--bf16]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

QUESTIONS = 2
SAMPLES = 8
NEW_TOKENS = 64
BETA = 0.001


def pick_examples(path: Path, n: int):
    from acesql.data.filtering import filter_examples
    from acesql.data.loaders import read_prepared

    return filter_examples(read_prepared(path), complexities=["simple"], max_examples=n, seed=0)


def run_ours(model_dir: Path, examples, steps: int, bf16: bool) -> dict:
    from acesql.config import GrpoSection
    from acesql.grpo.pool import EmpiricalPool
    from acesql.grpo.rollout import question_key
    from acesql.grpo.trainer import GrpoTrainer

    pool = EmpiricalPool()
    for ex in examples:
        pool.seed(question_key(ex), [ex.gold_columns])
    cfg = GrpoSection(
        learning_rate=1e-6,
        warmup_ratio=0.0,
        epochs=steps + 1,
        questions_per_step=QUESTIONS,
        samples=SAMPLES,
        beta=BETA,
        bf16_autocast=bf16,
        skip_flat_groups=False,
        micro_batch_size=SAMPLES,
        generation={"max_new_tokens": NEW_TOKENS, "batch_size": 16, "bf16_autocast": bf16},
    )
    with tempfile.TemporaryDirectory() as out:
        trainer = GrpoTrainer(model_dir, examples, pool, Path(out) / "grpo", cfg, progress=False)
        times, records = [], []
        for i in range(steps + 1):
            t0 = time.perf_counter()
            record = trainer.step()
            if i:  # the first step warms up
                times.append(time.perf_counter() - t0)
                records.append(record)
        trainer.close()
    completions = 2 * QUESTIONS * SAMPLES
    return {
        "step_s": statistics.mean(times),
        "completions_per_step": completions,
        "s_per_completion": statistics.mean(times) / completions,
        "rollout_s": statistics.mean(r["time/rollout_s"] for r in records),
        "update_s": statistics.mean(r["time/update_s"] for r in records),
    }


def run_trl(model_dir: Path, examples, steps: int, bf16: bool) -> dict:
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from acesql.data.schemas import SchemaCache
    from acesql.models.prompts import PromptBuilder
    from acesql.sql.parsing import parse_columns

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    prompts = PromptBuilder(tokenizer, reasoning=False, sample_values=0)
    schemas = SchemaCache(0)
    rows = [
        {
            "prompt": prompts.retriever(schemas(ex), ex.question, ex.evidence),
            "index": i,
        }
        for i, ex in enumerate(examples)
    ]
    gold = [frozenset(ex.gold_columns) for ex in examples]

    def reward(completions, index, **kwargs):
        out = []
        for text, i in zip(completions, index):
            parsed = parse_columns(text, schemas(examples[i]))
            out.append(1.0 if parsed.ok and frozenset(parsed.columns) == gold[i] else 0.0)
        return out

    class Timer(TrainerCallback):
        def __init__(self):
            self.times, self._t0 = [], None

        def on_step_begin(self, args, state, control, **kw):
            self._t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            self.times.append(time.perf_counter() - self._t0)

    timer = Timer()
    with tempfile.TemporaryDirectory() as out:
        args = GRPOConfig(
            output_dir=out,
            learning_rate=1e-6,
            per_device_train_batch_size=QUESTIONS * SAMPLES,
            num_generations=SAMPLES,
            max_completion_length=NEW_TOKENS,
            temperature=1.0,
            top_k=0,
            beta=BETA,
            max_steps=steps + 1,
            logging_steps=1,
            report_to="none",
            use_cpu=True,
            bf16=bf16,
            save_strategy="no",
            shuffle_dataset=False,
            disable_tqdm=True,
            dataloader_num_workers=0,
        )
        model = AutoModelForCausalLM.from_pretrained(model_dir)
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=[reward],
            args=args,
            train_dataset=Dataset.from_list(rows * (steps + 1)),
            processing_class=tokenizer,
            callbacks=[timer],
        )
        trainer.train()
    times = timer.times[1:]
    completions = QUESTIONS * SAMPLES
    return {
        "step_s": statistics.mean(times),
        "completions_per_step": completions,
        "s_per_completion": statistics.mean(times) / completions,
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--model", default="models/base", help="causal LM folder [models/base]")
    ap.add_argument("--data", default="data/prepared/train.jsonl", help="prepared train split")
    ap.add_argument("--steps", type=int, default=2, help="measured steps after the warm-up")
    ap.add_argument("--bf16", action="store_true", help="bf16 autocast in both")
    ap.add_argument("--only", choices=["ours", "trl"], default=None)
    args = ap.parse_args()
    model_dir = Path(args.model)
    examples = pick_examples(Path(args.data), QUESTIONS)
    results = {}
    if args.only in (None, "trl"):
        results["trl"] = run_trl(model_dir, examples, args.steps, args.bf16)
    if args.only in (None, "ours"):
        results["ours"] = run_ours(model_dir, examples, args.steps, args.bf16)
    print(f"model {model_dir}, {QUESTIONS} questions x {SAMPLES} samples, {NEW_TOKENS} new tokens,")
    print(f"bf16 {args.bf16}, GLIBC_TUNABLES={os.environ.get('GLIBC_TUNABLES', '(unset)')}")
    print(f"{'':<6}{'s/step':>9}{'completions':>13}{'s/completion':>14}")
    for name, r in results.items():
        print(
            f"{name:<6}{r['step_s']:>9.1f}{r['completions_per_step']:>13}"
            f"{r['s_per_completion']:>14.3f}"
        )
    if len(results) == 2:
        ratio = results["ours"]["s_per_completion"] / results["trl"]["s_per_completion"]
        print(f"ours / trl, time per completion: {ratio:.3f}  (target <= 0.75)")
        results["ratio_ours_vs_trl"] = round(ratio, 3)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
