"""Benchmark: peak memory of one dual-role GRPO step with PCGrad, against the plain summed step.

What it measures
    The same model, optimizer and sequences (4 retriever outputs on ~900-token prompts, 4
    generator outputs on ~200-token prompts, random token ids) go through three updates,
    each after a warm-up step that allocates the optimizer's state:

    sum         one backward pass of L_ret + lambda L_gen, one optimizer step: no projection
                possible, the memory floor of a joint update;
    ours        `acesql.grpo.update.DualRoleUpdate`: two backward passes, the retriever's
                gradient copied once into a reused buffer, PCGrad combined in place;
    clone-both  the layout of the authors' released code: both role gradients cloned, the
                projected copies built, their sum assigned to `.grad`.

    Memory is the process's resident set, sampled every millisecond by a thread during the
    step, with glibc's free memory trimmed before each step. It prints the peak of the whole
    process (model, optimizer state, gradients, activations) and the peak growth during the
    step, per variant, and their ratios against `sum`, measured in this same process.

How to run
    .venv/bin/python bench/pcgrad_bench.py                  # models/base if present
    .venv/bin/python bench/pcgrad_bench.py --model DIR      # any causal LM folder
    .venv/bin/python bench/pcgrad_bench.py --tiny           # a small random model (smoke)
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import json
import os
import tempfile
import threading
import time
from pathlib import Path

import torch

from acesql.grpo.pcgrad import pcgrad_
from acesql.grpo.update import DualRoleUpdate, ScoredSequence

PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * PAGE


def trim() -> None:
    gc.collect()
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


class PeakSampler:
    def __init__(self, every_s: float = 0.001):
        self.every_s, self.peak, self._stop = every_s, 0, threading.Event()

    def __enter__(self):
        self.start = rss_bytes()
        self.peak = self.start
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_bytes())
            time.sleep(self.every_s)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_bytes())


def make_sequences(vocab: int, seed: int) -> dict[str, list[ScoredSequence]]:
    g = torch.Generator().manual_seed(seed)

    def seq(prompt_len, completion_len, adv):
        ids = torch.randint(10, vocab - 1, (prompt_len + completion_len,), generator=g).tolist()
        return ScoredSequence(ids[:prompt_len], ids[prompt_len:], adv)

    return {
        "retriever": [seq(900 + 8 * i, 32, a) for i, a in enumerate((1.2, -0.4, -0.4, -0.4))],
        "generator": [seq(200 + 8 * i, 64, a) for i, a in enumerate((0.9, 0.9, -0.9, -0.9))],
    }


def step_sum(upd: DualRoleUpdate, seqs, lam: float) -> None:
    """Plain sum: both role losses in the same .grad, one optimizer step."""
    upd.optimizer.zero_grad(set_to_none=True)
    upd.backward(seqs["retriever"], 1.0)
    upd.backward(seqs["generator"], lam)  # accumulates into .grad: L_ret + lam L_gen
    torch.nn.utils.clip_grad_norm_(upd.params, upd.grad_clip)
    upd.optimizer.step()
    upd.optimizer.zero_grad(set_to_none=True)


def step_clone_both(upd: DualRoleUpdate, seqs, lam: float) -> None:
    """Both gradients cloned, projected copies built, their sum assigned (the authors' layout)."""
    params = upd.params
    upd.optimizer.zero_grad(set_to_none=True)
    upd.backward(seqs["retriever"], 1.0)
    g_ret = [p.grad.clone() for p in params]
    upd.optimizer.zero_grad(set_to_none=True)
    upd.backward(seqs["generator"], lam)
    g_gen = [p.grad.clone() for p in params]
    upd.optimizer.zero_grad(set_to_none=True)
    proj_ret = [r.clone() for r in g_ret]
    proj_gen = [g.clone() for g in g_gen]
    for pr, pg, r, g in zip(proj_ret, proj_gen, g_ret, g_gen):
        d = torch.dot(r.flatten(), g.flatten())
        if d < 0:
            pr.sub_(d / (g.norm() ** 2 + 1e-20) * g)
            pg.sub_(d / (r.norm() ** 2 + 1e-20) * r)
    for p, pr, pg in zip(params, proj_ret, proj_gen):
        p.grad = pr + pg
    del g_ret, g_gen, proj_ret, proj_gen
    torch.nn.utils.clip_grad_norm_(params, upd.grad_clip)
    upd.optimizer.step()
    upd.optimizer.zero_grad(set_to_none=True)


def check_same_update(model_dir, seqs) -> float:
    """ours and clone-both must produce the same combined gradient: max abs difference."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    upd = DualRoleUpdate(
        model, torch.optim.SGD(model.parameters(), lr=0.0), beta=0.0, bf16_autocast=False
    )
    upd.backward(seqs["retriever"][:1], 1.0)
    g_ret = [p.grad.clone() for p in upd.params]
    upd.optimizer.zero_grad(set_to_none=True)
    upd.backward(seqs["generator"][:1], 1.0)
    expected = []
    for r, p in zip(g_ret, upd.params):
        g = p.grad
        d = torch.dot(r.flatten(), g.flatten())
        if d < 0:
            expected.append(r - d / g.norm() ** 2 * g + g - d / r.norm() ** 2 * r)
        else:
            expected.append(r + g)
    pcgrad_(g_ret, [p.grad for p in upd.params])
    return max(float((e - p.grad).abs().max()) for e, p in zip(expected, upd.params))


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--model", default=None, help="causal LM folder [models/base]")
    ap.add_argument("--tiny", action="store_true", help="use a small random model")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    from transformers import AutoModelForCausalLM

    if args.tiny or (args.model is None and not Path("models/base/config.json").is_file()):
        from acesql.models.tiny import build_tiny_model

        model_dir = build_tiny_model(Path(tempfile.mkdtemp()) / "tiny")
    else:
        model_dir = Path(args.model or "models/base")
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.config.use_cache = False
    n_params = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-7)
    upd = DualRoleUpdate(model, optimizer, None, None, beta=0.0, micro_batch_size=4)
    seqs = make_sequences(model.config.vocab_size, args.seed)
    variants = {
        "sum": lambda: step_sum(upd, seqs, 1.0),
        "ours": lambda: upd(seqs, 1.0),
        "clone-both": lambda: step_clone_both(upd, seqs, 1.0),
    }
    variants["sum"]()  # warm-up: allocates AdamW's state, faults the code paths in
    results = {}
    for name, run in variants.items():
        run()  # each variant's own warm-up (its buffers, if any, exist from here on)
        trim()
        t0 = time.perf_counter()
        with PeakSampler() as s:
            run()
        results[name] = {
            "peak_mb": s.peak / 2**20,
            "growth_mb": (s.peak - s.start) / 2**20,
            "seconds": time.perf_counter() - t0,
        }
    diff = check_same_update(model_dir, seqs)
    grad_mb = n_params * 4 / 2**20
    print(
        f"model {model_dir}: {n_params / 1e6:.1f}M parameters, one fp32 gradient = {grad_mb:.0f} MB"
    )
    print(f"{'variant':<12}{'peak RSS MB':>14}{'growth MB':>12}{'seconds':>10}{'peak ratio':>12}")
    base = results["sum"]
    for name, r in results.items():
        print(
            f"{name:<12}{r['peak_mb']:>14.0f}{r['growth_mb']:>12.0f}{r['seconds']:>10.1f}"
            f"{r['peak_mb'] / base['peak_mb']:>12.3f}"
        )
    print(f"ours and clone-both give the same combined gradient (max abs diff {diff:.2e})")
    print(
        json.dumps(
            {
                "model": str(model_dir),
                "parameters": n_params,
                "gradient_mb": round(grad_mb, 1),
                **{f"{k}_{m}": round(v, 2) for k, r in results.items() for m, v in r.items()},
                "peak_ratio_ours_vs_sum": round(results["ours"]["peak_mb"] / base["peak_mb"], 3),
                "peak_ratio_clone_both_vs_sum": round(
                    results["clone-both"]["peak_mb"] / base["peak_mb"], 3
                ),
                "max_abs_diff": diff,
            }
        )
    )


if __name__ == "__main__":
    main()
