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
import tempfile

from generate_bench import chat_prompts
from harness import model_or_tiny, report, timed_generation


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
            runs[name], tokens[name] = timed_generation(
                engine, prompts, outer, n=1, temperature=0.0, max_new_tokens=args.max_new_tokens
            )
    same = (
        tokens["autocast_no_grad"]
        == tokens["autocast_inference_mode"]
        == tokens["autocast_no_grad_frozen"]
    )
    report(
        runs,
        "tokens_per_s",
        header=f"model {args.model or 'tiny'}, {len(prompts)} prompts, <= {args.max_new_tokens} "
        f"new tokens, batch 8, {torch.get_num_threads()} threads; autocast runs wrote identical "
        f"tokens: {same}",
        extra={
            "model": args.model or "tiny",
            "max_new_tokens": args.max_new_tokens,
            "threads": torch.get_num_threads(),
            "identical": same,
        },
        baseline="autocast_inference_mode",
    )
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
