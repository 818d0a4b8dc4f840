"""One process against two for the same GRPO steps: time per step, peak memory per process,
and whether the parameters agree; then what PCGrad's collective costs under sharding.

    .venv/bin/python bench/dist_bench.py [--steps 3] [--layers 4] [--hidden 512]

Every run is one `tests/dist_worker.py` job on a random model built here (the same global
batch: 4 questions x 4 samples per role, scripted answers, fp32, gloo on CPU), in this one
invocation, so the ratios compare like with like on this machine:

- 1 process x 1 thread (the baseline), 1 process x 2 threads, 2 processes x 1 thread each
  (replicated weights), 2 processes x 1 thread with FSDP2 (`sharding: fsdp`);
- the first step is left out of the step times (allocation, first-call costs);
- peak memory is each process's peak resident set (`ru_maxrss`), model loading included.

PCGrad under sharding all-reduces 3 scalars per gradient tensor plus one (float64); gathering
the gradients instead would move every parameter. Both are printed for the bench model and
for Qwen2.5-Coder-0.5B-Instruct (290 tensors, 494.0M parameters, read from its config).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
WORKER = ROOT / "tests" / "dist_worker.py"
QWEN_TENSORS, QWEN_PARAMS = 290, 494_032_768  # the default base model, tied head counted once


def run(label, model, synth, out, processes, threads, extra=()):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    env["OMP_NUM_THREADS"] = str(threads)
    env["PYTHONPATH"] = str(ROOT)
    if processes == 1:
        launcher = [sys.executable, str(WORKER)]
    else:
        launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        launcher += [f"--nproc_per_node={processes}", str(WORKER)]
    args = ["grpo", str(model), str(synth), str(out), "--threads", str(threads), *extra]
    proc = subprocess.run(launcher + args, env=env, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        sys.exit(f"{label} failed:\n{proc.stderr[-3000:]}")
    result = torch.load(out, weights_only=False)
    result["label"] = label
    return result


def step_time(result) -> float:
    """The slowest process's mean time per step after the first (a step waits for it)."""
    return max(statistics.mean(r["step_s"][1:] or r["step_s"]) for r in result["ranks"])


def peak_mib(result) -> float:
    return max(r["peak_rss_kib"] for r in result["ranks"]) / 1024


def max_diff(a, b) -> float:
    return max(float((a["weights"][k] - b["weights"][k]).abs().max()) for k in a["weights"])


def disagreement(a, b) -> tuple[float, float]:
    """(share of parameter entries more than 1e-6 apart, largest relative difference of a
    logged gradient norm over the steps)."""
    apart = sum(int(((a["weights"][k] - b["weights"][k]).abs() > 1e-6).sum()) for k in a["weights"])
    total = sum(v.numel() for v in a["weights"].values())
    keys = ("retriever/grad_norm", "generator/grad_norm", "grad_norm")
    rel = max(
        abs(x[k] - y[k]) / max(abs(x[k]), 1e-12)
        for x, y in zip(a["records"], b["records"])
        for k in keys
    )
    return apart / total, rel


def collective_bytes(n_tensors: int, n_params: int, world: int) -> tuple[int, int]:
    """(bytes each process sends for PCGrad's scalar all-reduce, for an fp32 all-gather of
    the whole gradient): a ring all-reduce sends 2 (w-1)/w of the buffer, an all-gather
    (w-1)/w of the gathered whole."""
    scalars = (3 * n_tensors + 1) * 8
    return round(2 * (world - 1) / world * scalars), round((world - 1) / world * n_params * 4)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=512)
    args = parser.parse_args()
    from acesql.data.synth.generate import SynthConfig, generate_dataset
    from acesql.models.tiny import build_tiny_model

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model = build_tiny_model(
            tmp / "model", hidden_size=args.hidden, num_hidden_layers=args.layers
        )
        synth = tmp / "synth"
        generate_dataset(synth, SynthConfig(n_databases=6, questions_per_db=4, profile="tiny"))
        steps = ["--steps", str(args.steps)]
        fsdp = ["--sharding", "fsdp", "--no-share", "--micro-batch-size", "1"]
        runs = [
            run("1 process x 1 thread", model, synth, tmp / "a.pt", 1, 1, steps),
            run("1 process x 2 threads", model, synth, tmp / "b.pt", 1, 2, steps),
            run("2 processes x 1 thread", model, synth, tmp / "c.pt", 2, 1, steps),
            run(
                "1 process x 1 thread, one sequence a piece",
                model,
                synth,
                tmp / "d.pt",
                1,
                1,
                steps + fsdp[2:],
            ),
            run("2 processes x 1 thread, FSDP2", model, synth, tmp / "e.pt", 2, 1, steps + fsdp),
        ]
    n_params = sum(v.numel() for v in runs[0]["weights"].values())
    print(
        f"model: {args.layers} layers, hidden {args.hidden}, {n_params / 1e6:.1f}M parameters; "
        f"{args.steps} GRPO steps of 4 questions x 4 samples per role"
    )
    base = runs[0]
    print(f"{'run':<44} {'s/step':>7} {'vs base':>8} {'peak MiB/process':>17} {'vs base':>8}")
    for r in runs:
        print(
            f"{r['label']:<44} {step_time(r):7.2f} {step_time(base) / step_time(r):7.2f}x "
            f"{peak_mib(r):17.0f} {peak_mib(r) / peak_mib(base):7.2f}x"
        )
    print(
        f"FSDP2 on 2 processes against 1 process scoring the same pieces: "
        f"{step_time(runs[3]) / step_time(runs[4]):.2f}x the speed, "
        f"{peak_mib(runs[4]) / peak_mib(runs[3]):.2f}x the peak memory per process"
    )
    pairs = (("2 processes vs 1", runs[0], runs[2]), ("FSDP2 vs 1, same pieces", runs[3], runs[4]))
    for label, a, b in pairs:
        share, rel = disagreement(a, b)
        print(
            f"{label}: parameters max |difference| {max_diff(a, b):.1e}, entries more than "
            f"1e-6 apart {100 * share:.3f}%; logged grad norms within {rel:.1e} (relative)"
        )
    for name, tensors, params in (
        ("bench model", base["n_grad_tensors"], n_params),
        ("Qwen2.5-Coder-0.5B", QWEN_TENSORS, QWEN_PARAMS),
    ):
        for world in (2, 8):
            scalars, gather = collective_bytes(tensors, params, world)
            print(
                f"{name}, {world} processes: PCGrad scalar all-reduce {scalars:,} B sent per "
                f"process vs full-gradient all-gather {gather:,} B ({gather / scalars:,.0f}x)"
            )


if __name__ == "__main__":
    main()
