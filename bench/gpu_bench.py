"""Benchmark: one question's dual-role GRPO update and its rollouts at Qwen2.5-Coder-0.5B's
shape, bf16 autocast against fp32, on the GPU when there is one.

What it measures
    A randomly initialised model of Qwen2.5-Coder-0.5B-Instruct's shape (Qwen2, 24 layers,
    hidden 896, 14 query / 2 key-value heads, MLP 4864, vocabulary 151,936, tied embeddings:
    494.0M parameters) with the tiny model's tokenizer, two workloads, each first in fp32 (the
    baseline) and then with bf16 autocast (`grpo.bf16_autocast`), in this one process, and
    sampling a third time from weights held in bf16 (no autocast):

    update  `acesql.grpo.update.DualRoleUpdate`, AdamW, PCGrad, a reference model (beta 0.001):
            8 retriever sequences (a `--retriever-prompt`-token prompt shared, 48-token
            completions) and 8 generator sequences (250-token prompt, 96-token completions),
            the update of one question of a GRPO step; seconds per update over `--steps`
            after one warm-up;
    sample  `acesql.models.hf_engine.HFEngine`, 8 prompts x 8 samples at temperature 1,
            `--max-new-tokens` each (random weights rarely write EOS, so rows run to the cap):
            new tokens per second.

    Peak memory is `torch.cuda.max_memory_allocated` per variant on a GPU; on a CPU there is
    no per-variant peak to read, and it is left out. It prints a table, the speed ratios
    against fp32, then one JSON line with all the numbers.

How to run
    .venv/bin/python bench/gpu_bench.py                  # on a machine with a CUDA device
    .venv/bin/python bench/gpu_bench.py --small          # 2 layers, hidden 128: a smoke run
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time

import torch

QWEN_05B = dict(
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    vocab_size=151_936,
)
SMALL = dict(
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=2_048,
)


def build(shape: dict, tokenizer, device: torch.device, seed: int = 0):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        **shape,
        max_position_embeddings=32_768,
        rope_theta=1_000_000.0,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    with device:
        model = Qwen2ForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def sequences(tokenizer, retriever_prompt: int, seed: int = 0) -> dict:
    from acesql.grpo.update import ScoredSequence

    rng = random.Random(seed)
    low, high = 3, len(tokenizer) - 1

    def ids(n):
        return [rng.randint(low, high) for _ in range(n)]

    def role(prompt_len, completion_len):
        prompt = ids(prompt_len)
        return [
            ScoredSequence(prompt, ids(completion_len), 1.0 if i % 2 else -1.0) for i in range(8)
        ]

    return {"retriever": role(retriever_prompt, 48), "generator": role(250, 96)}


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def _peak_mib(device) -> float | None:
    return torch.cuda.max_memory_allocated() / 2**20 if device.type == "cuda" else None


def _mib(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def time_update(shape, tokenizer, device, bf16: bool, seqs, steps: int) -> dict:
    import copy

    from acesql.grpo.update import DualRoleUpdate

    model = build(shape, tokenizer, device)
    ref = copy.deepcopy(model).eval().requires_grad_(False)
    update = DualRoleUpdate(
        model,
        torch.optim.AdamW(model.parameters(), lr=1e-6),
        None,
        ref,
        beta=0.001,
        bf16_autocast=bf16,
        micro_batch_size=8,
        pad_id=tokenizer.pad_token_id,
    )
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    update(seqs, 0.5)  # warm-up: the optimizer's state, first-call costs
    _sync(device)
    started = time.perf_counter()
    for _ in range(steps):
        stats = update(seqs, 0.5)
    _sync(device)
    seconds = (time.perf_counter() - started) / steps
    finite = all(torch.isfinite(p).all() for p in model.parameters())
    result = {
        "s_per_update": round(seconds, 4),
        "peak_mib": _peak_mib(device),
        "retriever_loss": round(float(stats["retriever/loss"]), 5),
        "finite": bool(finite),
    }
    del model, ref, update
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return result


def time_sampling(
    shape, tokenizer, device, bf16: bool, max_new_tokens: int, weights=torch.float32
) -> dict:
    from acesql.models.hf_engine import HFEngine

    model = build(shape, tokenizer, device).to(weights).eval()
    schema = " ".join(f"table_{i}(id, name, value_{i}, created_at)" for i in range(30))
    prompts = [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": f"{schema}\nQuestion {q}: how many rows?"}],
            tokenize=False,
            add_generation_prompt=True,
        )
        for q in range(8)
    ]
    engine = HFEngine(
        model=model, tokenizer=tokenizer, batch_size=64, progress=False, bf16_autocast=bf16
    )
    engine.generate(prompts[:1], n=2, max_new_tokens=4, seed=1)  # warm-up
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    _sync(device)
    started = time.perf_counter()
    groups = engine.generate(prompts, n=8, temperature=1.0, max_new_tokens=max_new_tokens, seed=0)
    _sync(device)
    seconds = time.perf_counter() - started
    tokens = sum(len(c.token_ids) for group in groups for c in group)
    result = {
        "tokens": tokens,
        "seconds": round(seconds, 3),
        "tokens_per_s": round(tokens / seconds, 1),
        "peak_mib": _peak_mib(device),
    }
    del model, engine
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return result


def main(argv=None) -> dict:
    from transformers import AutoTokenizer

    from acesql.models.tiny import build_tiny_model

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--small", action="store_true", help="2 layers, hidden 128 (a smoke run)")
    ap.add_argument("--steps", type=int, default=3, help="timed updates after one warm-up")
    ap.add_argument("--retriever-prompt", type=int, default=900, help="retriever prompt tokens")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--device", default=None, help="cuda or cpu (default: cuda when present)")
    args = ap.parse_args(argv)

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    shape = SMALL if args.small else QWEN_05B
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = AutoTokenizer.from_pretrained(build_tiny_model(tmp))
    seqs = sequences(tokenizer, args.retriever_prompt)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    results = {"device": name, "shape": "small" if args.small else "qwen2.5-0.5b"}
    for variant, bf16 in (("fp32", False), ("bf16", True)):
        results[variant] = {
            "update": time_update(shape, tokenizer, device, bf16, seqs, args.steps),
            "sample": time_sampling(shape, tokenizer, device, bf16, args.max_new_tokens),
        }
    results["bf16_weights"] = {
        "sample": time_sampling(
            shape, tokenizer, device, False, args.max_new_tokens, weights=torch.bfloat16
        )
    }
    fp32, bf16 = results["fp32"], results["bf16"]
    results["bf16_update_speedup"] = round(
        fp32["update"]["s_per_update"] / bf16["update"]["s_per_update"], 2
    )
    results["bf16_sample_speedup"] = round(
        bf16["sample"]["tokens_per_s"] / fp32["sample"]["tokens_per_s"], 2
    )

    print(f"{results['shape']} on {name}")
    print(f"{'run':>12} {'s/update':>9} {'peak MiB':>9} {'sample tok/s':>13} {'peak MiB':>9}")
    for variant in ("fp32", "bf16"):
        u, s = results[variant]["update"], results[variant]["sample"]
        print(
            f"{variant:>12} {u['s_per_update']:>9.3f} {_mib(u['peak_mib']):>9}"
            f" {s['tokens_per_s']:>13.1f} {_mib(s['peak_mib']):>9}"
        )
    s = results["bf16_weights"]["sample"]
    blank = ""
    print(f"{'bf16 weights':>12} {blank:>19} {s['tokens_per_s']:>13.1f} {_mib(s['peak_mib']):>9}")
    results["bf16_weights_sample_speedup"] = round(
        s["tokens_per_s"] / fp32["sample"]["tokens_per_s"], 2
    )
    print(
        f"bf16 autocast / fp32: update {results['bf16_update_speedup']}x faster, "
        f"sampling {results['bf16_sample_speedup']}x faster; bf16 weights / fp32: sampling "
        f"{results['bf16_weights_sample_speedup']}x faster"
    )
    print(json.dumps(results))
    return results


if __name__ == "__main__":
    main()
