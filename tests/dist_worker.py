"""One training step in this process, alone or as one rank of a `torchrun` job; process 0
writes the resulting weights and the step's record to OUT. Used by tests/grpo/test_distributed.py:

    python tests/dist_worker.py grpo MODEL SYNTH OUT [--sharding fsdp] [--granularity global]
    torchrun --nproc_per_node 2 tests/dist_worker.py grpo MODEL SYNTH OUT

bench/dist_bench.py runs it too, for its step times and peak memory per process.
"""

import argparse
import resource
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent.parent))

from acesql.data.loaders import load_dataset  # noqa: E402
from acesql.distributed import close, full_state_dict, init_from_env  # noqa: E402
from acesql.grpo.trainer import GrpoTrainer  # noqa: E402
from tests.grpo_helpers import grpo_config, scripted_engine, seeded_pool  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=["grpo", "sft", "hang"])
    parser.add_argument("model")
    parser.add_argument("synth")
    parser.add_argument("out")
    parser.add_argument("--sharding", default="none")
    parser.add_argument("--granularity", default="tensor")
    parser.add_argument("--no-share", dest="share_prompts", action="store_false")
    parser.add_argument("--micro-batch-size", type=int, default=4)
    parser.add_argument("--steps", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=120)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    dist = init_from_env(args.sharding, timeout_s=args.timeout)
    if args.what == "hang":  # rank 1 dies before the first collective
        if dist.rank == 1:
            sys.exit(7)
        time.sleep(1)
        dist.barrier()
        return
    examples = load_dataset(Path(args.synth), "synth", "train").examples[:4]
    if args.what == "sft":
        return sft(args, dist)
    cfg = grpo_config(
        questions_per_step=4,
        epochs=args.steps,
        pcgrad_granularity=args.granularity,
        beta=0.01,
        schedule=False,
        share_prompts=args.share_prompts,
        micro_batch_size=args.micro_batch_size,
    )
    trainer = GrpoTrainer(
        args.model,
        examples,
        seeded_pool(examples),
        Path(args.out).parent / f"run-{args.sharding}-{dist.world_size}",
        cfg,
        progress=False,
        device="cpu",
        engine_factory=lambda model, tok: scripted_engine(examples, tok, 2),
        dist=dist,
    )
    records, seconds = [], []
    for _ in range(args.steps):
        started = time.perf_counter()
        records.append(trainer.step())
        seconds.append(time.perf_counter() - started)
    weights = full_state_dict(trainer.model)
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    per_rank = dist.gather_objects({"step_s": seconds, "peak_rss_kib": peak_kib})
    if dist.is_main:
        torch.save(
            {
                "weights": {k: v.detach().cpu() for k, v in weights.items()},
                "records": records,
                "ranks": per_rank,
                "n_grad_tensors": sum(1 for p in trainer.update.params),
            },
            args.out,
        )
    close(dist)


def sft(args, dist) -> None:
    """Three SFT steps of a global batch of 4 sequences: 2 micro-batches of 2 accumulated in
    one process, or one micro-batch of 2 in each of two processes."""
    from acesql.config import SftSection
    from acesql.sft.trainer import train_sft

    examples = load_dataset(Path(args.synth), "synth", "train").examples[:12]
    records = [
        {"prompt": f"Question: {ex.question}\nSQL: ", "response": ex.sql, "role": "generator"}
        for ex in examples
    ]
    config = SftSection(
        epochs=1,
        time_budget_minutes=None,
        learning_rate=1e-3,
        warmup_ratio=0.0,
        batch_size=2,
        grad_accum=2 // dist.world_size,
        max_length=512,
        checkpoint_every=100,
        bf16_autocast=False,
    )
    out = Path(args.out).parent / f"sft-{dist.world_size}"
    summary = train_sft(args.model, records, out, config, device="cpu", seed=3)
    if dist.is_main:
        from safetensors.torch import load_file

        torch.save(
            {"weights": load_file(out / "model.safetensors"), "losses": summary["losses"]}, args.out
        )


if __name__ == "__main__":
    main()
