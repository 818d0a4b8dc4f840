"""Benchmark: the ranker's judgments with the question's shared prefix run once, against
every prompt run whole.

What it measures
    One question's judgments as `LetterJudge` asks them: the pointwise prompts of 8
    candidates (a schema of `--tables` tables, the question, each candidate's SQL and a
    preview of its rows), then the pairwise prompts of 3 result groups in both orders.
    Two ways in one process, after a warm-up, the model in fp32: the baseline runs each
    batch of prompts whole, left-padded (as the judge did before); `next_token_logprobs`
    runs the prompts' common prefix once and continues every row from its key/value cache.
    It prints the seconds of each, the speed-up, the prompts' tokens and the shared share,
    and the largest difference between the two ways' log-probabilities of the answer
    letters (float error only: the same model reads the same tokens).

How to run
    .venv/bin/python bench/judge_bench.py                          # the tiny random model
    .venv/bin/python bench/judge_bench.py --model models/grpo --threads 1

    It prints a table, then one JSON line with all the numbers.
"""

from __future__ import annotations

import argparse
import json
import tempfile

from harness import model_or_tiny, timed


def schema_text(tables: int) -> str:
    columns = "id INTEGER PRIMARY KEY, name TEXT, region TEXT, amount REAL, created TEXT"
    return "\n".join(
        f"CREATE TABLE shipment_{i} ({columns}, depot_id INTEGER);" for i in range(tables)
    )


def candidates():
    from acesql.ranker.judge import Candidate
    from acesql.sql.sandbox import ExecResult

    out = []
    for k in range(8):
        rows = [(f"depot {k + r}", 10.5 * (r + k)) for r in range(3)]
        where = f" WHERE amount > {k * 3}" if k % 2 else ""
        sql = f"SELECT name, SUM(amount) FROM shipment_{k % 3}{where} GROUP BY name"
        out.append(Candidate(sql, ExecResult(ok=True, columns=["name", "total"], rows=rows)))
    return out


def whole(model, tokenizer, prompts: list[str], batch_size: int):
    """The baseline: each batch run whole, left-padded, the last position read."""
    import torch

    out = []
    tokenizer.padding_side = "left"
    with torch.no_grad():
        for start in range(0, len(prompts), batch_size):
            enc = tokenizer(
                prompts[start : start + batch_size],
                return_tensors="pt",
                padding=True,
                add_special_tokens=False,
            )
            logits = model(
                input_ids=enc.input_ids, attention_mask=enc.attention_mask, logits_to_keep=1
            ).logits[:, -1, :]
            out.append(torch.log_softmax(logits.float(), dim=-1))
    return torch.cat(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Judgments: shared prefix vs whole prompts.")
    parser.add_argument("--model", default=None, help="HF model folder (default: tiny model)")
    parser.add_argument("--tables", type=int, default=8, help="Tables in the schema shown.")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from acesql.ranker.judge import Context, LetterJudge, next_token_logprobs, point_prompt

    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as scratch:
        path = model_or_tiny(args.model, scratch)
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    judge = LetterJudge(model, tokenizer)
    context = Context("Which depots shipped the most, with their totals?", schema_text(args.tables))
    pool = candidates()
    prompts = [point_prompt(tokenizer, context, c) for c in pool]
    groups = [pool[0], pool[1], pool[2]]
    pairs = [(a, b) for i, a in enumerate(groups) for b in groups[i + 1 :]]
    prompts += [judge.pair_prompt(context, a, b) for a, b in pairs]
    prompts += [judge.pair_prompt(context, b, a) for a, b in pairs]
    letters = [judge.letters["point"][0], judge.letters["pair"][0]]

    whole(model, tokenizer, prompts[:2], 8)  # warm-up
    next_token_logprobs(model, tokenizer, prompts[:2], 8)
    times, outputs = {}, {}
    for name, run in (
        ("whole prompts (baseline)", lambda: whole(model, tokenizer, prompts, 8)),
        ("shared prefix once", lambda: next_token_logprobs(model, tokenizer, prompts, 8)),
    ):
        outputs[name], times[name] = timed(run)
    base, shared = outputs.values()
    lengths = [len(tokenizer(p, add_special_tokens=False).input_ids) for p in prompts]
    common = min(
        next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        for a in [tokenizer(prompts[0], add_special_tokens=False).input_ids]
        for b in (tokenizer(p, add_special_tokens=False).input_ids for p in prompts[1:])
    )
    numbers = {
        "model": args.model or "tiny",
        "prompts": len(prompts),
        "tokens_per_prompt": round(sum(lengths) / len(lengths), 1),
        "shared_tokens": common,
        "seconds": {k: round(v, 3) for k, v in times.items()},
        "speedup": round(times["whole prompts (baseline)"] / times["shared prefix once"], 2),
        "max_letter_logprob_diff": float((base[:, letters] - shared[:, letters]).abs().max()),
    }
    print(f"{len(prompts)} prompts, {numbers['tokens_per_prompt']} tokens each, {common} shared")
    for name, seconds in times.items():
        print(f"{name:<26} {seconds:8.2f} s")
    print(
        f"speed-up {numbers['speedup']}x, letters' log-prob difference "
        f"{numbers['max_letter_logprob_diff']:.2e}"
    )
    print(json.dumps(numbers))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
