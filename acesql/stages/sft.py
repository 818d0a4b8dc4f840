"""The `sft` stage: mixed SFT of both roles from the base model.

    python -m acesql.stages.sft [--params params.yaml]
    accelerate launch --config_file infra/accelerate/multi_gpu_fsdp.yaml -m acesql.stages.sft

With `distributed.processes` (times `nodes`) above 1 the stage relaunches itself under
`torchrun` (data-parallel: each process its share of every global batch, the same steps and
losses as one process accumulating them); FSDP goes through accelerate's config above.

Reads `base` and `sft`; `{models_dir}/base` and `{data_dir}/sft/*.jsonl`. Writes the model
to `{models_dir}/sft` (checkpoints under `checkpoints/`, resumed after a kill) and
`{models_dir}/sft_metrics.json`; the loss curve goes to MLflow.
"""

from __future__ import annotations

from acesql.data.loaders import parse_jsonl
from acesql.distributed import process_rank
from acesql.errors import DataError
from acesql.sft.trainer import train_sft
from acesql.stages.common import relaunch, run_stage, write_metrics


def work(s: dict, tracker) -> dict:
    base, cfg = s["base"], s["sft"]
    records = []
    for role in ("retriever", "generator"):
        path = base.data_dir / "sft" / f"{role}.jsonl"
        if not path.is_file():
            raise DataError(f"{path} not found: run the sft_data stage first (dvc repro sft_data)")
        records += parse_jsonl(path.read_text().splitlines(), path)
    if not records:
        raise DataError("the SFT data is empty: see data/sft_metrics.json for what was dropped")
    summary = train_sft(
        base.models_dir / "base", records, base.models_dir / "sft", cfg, tracker, seed=base.seed
    )
    metrics = {k: v for k, v in summary.items() if k != "losses"}
    if process_rank() == 0:
        write_metrics(base.models_dir / "sft_metrics.json", metrics, "sft")
    tracker.log_metrics({f"sft/{k}": v for k, v in metrics.items() if isinstance(v, int | float)})
    return metrics


def main(argv=None) -> None:
    relaunch("sft", argv, fsdp_config="infra/accelerate/multi_gpu_fsdp.yaml")
    run_stage("sft", __doc__, ("base", "sft"), work, argv)


if __name__ == "__main__":
    main()
