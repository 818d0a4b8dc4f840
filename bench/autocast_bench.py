"""Benchmark: bf16-autocast generation under `torch.no_grad()` against `torch.inference_mode()`.

What it measures
    `HFEngine` with `bf16_autocast=True` generates the same 8 chat prompts (one completion
    each, greedy, `--max-new-tokens` at most, batch 8) three ways in one process, after a
    warm-up: in fp32 (no autocast, the reference speed), with autocast inside an outer
    `torch.inference_mode()` (the baseline: autocast cannot keep its bf16 weight copies
    there, so every decoding step casts every weight again), and with autocast as the engine
    runs it now, under `torch.no_grad()` (the copies are kept for the whole call); then the
    engine's way again with all but the top decoder block frozen, as a trainer that trains
    the top blocks shares its model with the engine. It prints tokens/s of each, the speed of
    the engine's way over the baseline, and whether the autocast runs wrote identical tokens
    (they should: the same casts, kept or redone).

How to run
    .venv/bin/python bench/autocast_bench.py                 # the tiny random model
    .venv/bin/python bench/autocast_bench.py --model models/base --max-new-tokens 48 --threads 2

    It prints a table, then one JSON line with all the numbers. On a CPU without bf16
    instructions autocast is slow both ways; the ratio still shows what the kept copies save.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
import time

from generate_bench import chat_prompts, model_or_tiny


def timed(engine, prompts, max_new_tokens: int, outer) -> tuple[dict, list]:
    start = time.perf_counter()
    with outer():
        groups = engine.generate(prompts, n=1, temperature=0.0, max_new_tokens=max_new_tokens)
    seconds = time.perf_counter() - start
    tokens = [c.token_ids for group in groups for c in group]
    count = sum(len(t) for t in tokens)
    return {
        "tokens": count,
        "seconds": round(seconds, 3),
        "tokens_per_s": round(count / seconds, 1),
    }, tokens


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="bf16-autocast decoding: no_grad vs inference_mode."
    )
    parser.add_argument("--model", default=None, help="HF model folder (default: tiny model)")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from acesql.models.freezing import train_top_layers
    from acesql.models.hf_engine import HFEngine

    with tempfile.TemporaryDirectory() as scratch:
        model_dir = model_or_tiny(args.model, scratch)
        engine = HFEngine(model_dir, device="cpu", batch_size=8, progress=False)
        prompts = chat_prompts(engine.tokenizer)
        runs, tokens = {}, {}
        for name, autocast, outer in (
            ("fp32", False, contextlib.nullcontext),
            ("autocast_inference_mode", True, torch.inference_mode),
            ("autocast_no_grad", True, contextlib.nullcontext),
            ("autocast_no_grad_frozen", True, contextlib.nullcontext),
        ):
            if name.endswith("frozen"):
                train_top_layers(engine.model, 1)
            engine.bf16_autocast = autocast
            engine.generate(prompts[:2], n=1, temperature=0.0, max_new_tokens=4)  # warm-up
            runs[name], tokens[name] = timed(engine, prompts, args.max_new_tokens, outer)
    ratio = (
        runs["autocast_no_grad"]["tokens_per_s"] / runs["autocast_inference_mode"]["tokens_per_s"]
    )
    same = (
        tokens["autocast_no_grad"]
        == tokens["autocast_inference_mode"]
        == tokens["autocast_no_grad_frozen"]
    )

    print(
        f"model {args.model or 'tiny'}, {len(prompts)} prompts, <= {args.max_new_tokens} new "
        f"tokens, batch 8, {torch.get_num_threads()} threads"
    )
    print(f"{'run':>24} {'tokens':>7} {'seconds':>8} {'tokens/s':>9}")
    for name, row in runs.items():
        print(f"{name:>24} {row['tokens']:>7} {row['seconds']:>8.2f} {row['tokens_per_s']:>9.1f}")
    print(f"autocast under no_grad / under inference_mode: {ratio:.2f}x; identical tokens: {same}")
    print(
        json.dumps(
            {
                "model": args.model or "tiny",
                "max_new_tokens": args.max_new_tokens,
                "threads": torch.get_num_threads(),
                **runs,
                "ratio": round(ratio, 2),
                "identical": same,
            }
        )
    )
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
