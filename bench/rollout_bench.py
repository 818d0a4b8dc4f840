"""Benchmark: rollout generation of the transformers engine, the settings before and after.

What it measures
    The retriever prompts of `--questions` synthetic questions (the `tiny` profile the CPU
    default trains on, rendered with the model's chat template), each sampled `--samples`
    times at temperature 1 (a GRPO rollout's shape), at most `--max-new-tokens` tokens, by
    `HFEngine` in three settings, in the same process, after a warm-up:

    - before: bf16 autocast on (what the CPU profile used), prompts prefilled once per group;
    - no-sharing: fp32, each sample prefilling its own copy of the prompt;
    - after: `bf16_autocast: auto` (fp32 on a CPU without native bf16), prefilled once;
    - fp32-shared (only when asked): fp32, prefilled once: against no-sharing, what sharing
      the prompt's prefill alone saves.

    Tokens/s counts the tokens the completions keep. Ratios are against the first setting run
    (`before` by default). `--profile wide` takes the prompts from the `wide` synthetic profile
    (BIRD-scale schemas, about 1,100-token prompts), where prefill is most of a group's cost;
    `--settings no-sharing after` then shows what prefilling a group's prompt once saves.

How to run
    .venv/bin/python bench/rollout_bench.py                      # the tiny random model
    .venv/bin/python bench/rollout_bench.py --model models/base  # Qwen2.5-Coder-0.5B
        [--questions 4] [--samples 4] [--max-new-tokens 48] [--seed 0]
        [--profile tiny|wide] [--settings before no-sharing after]

    It prints a table, then one JSON line with all the numbers.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from harness import model_or_tiny, report, timed_generation

SETTINGS = {
    "before": {"bf16_autocast": True, "share_prefix": True},
    "no-sharing": {"bf16_autocast": False, "share_prefix": False},
    "after": {"bf16_autocast": "auto", "share_prefix": True},
    "fp32-shared": {"bf16_autocast": False, "share_prefix": True},  # sharing alone
}


def retriever_prompts(tokenizer, n: int, scratch: Path, profile: str = "tiny") -> list[str]:
    from acesql.data.loaders import load_dataset
    from acesql.data.schemas import SchemaCache
    from acesql.data.synth.generate import SynthConfig, generate_dataset
    from acesql.models.prompts import PromptBuilder

    generate_dataset(
        scratch / "synth", SynthConfig(n_databases=4, questions_per_db=8, profile=profile, seed=0)
    )
    examples = load_dataset(scratch / "synth", "synth", "train").examples[:n]
    prompts, schemas = PromptBuilder(tokenizer), SchemaCache(0)
    return [prompts.retriever(schemas(e), e.question) for e in examples]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="HFEngine rollout tokens/s, before vs after.")
    parser.add_argument("--model", default=None, help="HF model folder (default: tiny model)")
    parser.add_argument("--questions", type=int, default=4)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", choices=["tiny", "wide"], default="tiny")
    parser.add_argument(
        "--settings", nargs="+", choices=list(SETTINGS), default=["before", "no-sharing", "after"]
    )
    args = parser.parse_args(argv)

    import torch

    from acesql.models.base_model import load_model, load_tokenizer
    from acesql.models.hf_engine import HFEngine
    from acesql.models.precision import bf16_autocast_enabled

    with tempfile.TemporaryDirectory() as scratch:
        model_dir = model_or_tiny(args.model, str(Path(scratch) / "tiny"))
        tokenizer, model = load_tokenizer(model_dir), load_model(model_dir)
        prompts = retriever_prompts(tokenizer, args.questions, Path(scratch), args.profile)
        prompt_tokens = sum(len(tokenizer(p).input_ids) for p in prompts) / len(prompts)
        results = {}
        for name in args.settings:
            options = SETTINGS[name]
            engine = HFEngine(
                model=model, tokenizer=tokenizer, batch_size=8, progress=False, **options
            )
            engine.generate(prompts[:1], n=2, max_new_tokens=2, seed=args.seed)  # warm-up
            results[name], _ = timed_generation(
                engine,
                prompts,
                n=args.samples,
                temperature=1.0,
                max_new_tokens=args.max_new_tokens,
                seed=args.seed,
            )
    report(
        results,
        "tokens_per_s",
        header=f"model {args.model or 'tiny'}: {args.questions} prompts of {prompt_tokens:.0f} "
        f"tokens x {args.samples} samples, <= {args.max_new_tokens} new tokens, "
        f"{torch.get_num_threads()} threads, native bf16: {bf16_autocast_enabled('auto', 'cpu')}",
        extra={
            "model": args.model or "tiny",
            "profile": args.profile,
            "prompt_tokens": round(prompt_tokens, 1),
            "samples": args.samples,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
