"""The `ranker` stage: GRPO of the ranker role for position consistency (R3-SQL).

    python -m acesql.stages.ranker [--params params.yaml]

Reads `base` and `ranker`; `{data_dir}/ranker/{train,held_out}.jsonl` (the ranker_data
stage's pairs) and the model `ranker.model` (by default the GRPO model, which keeps its
folder: the ranker is saved as a new one). Trains on the pairs (`acesql.ranker.trainer`:
reward 1 only for the right choice in both orders), judging the held-out pairs before,
during and after. Writes `{models_dir}/ranker` (the model, now in three roles) and
`{models_dir}/ranker_metrics.json` (rewards per step; held-out consistent and averaged
accuracy and position bias, before and after), also logged to MLflow. A killed run resumes
from its last checkpoint.
"""

from __future__ import annotations

from pathlib import Path

from tqdm import tqdm

from acesql.errors import DataError
from acesql.ranker.pairs import read_pairs
from acesql.ranker.trainer import RankerTrainer
from acesql.stages.common import run_stage, write_metrics


def work(s: dict, tracker) -> dict:

    base, cfg = s["base"], s["ranker"]
    if not Path(cfg.model).is_dir():
        raise DataError(f"{cfg.model} not found: train it first, or set ranker.model")
    folder = base.data_dir / "ranker"
    pairs, held_out = read_pairs(folder / "train.jsonl"), read_pairs(folder / "held_out.jsonl")
    trainer = RankerTrainer(
        cfg.model, pairs, cfg, held_out=held_out, seed=base.seed, tracker=tracker
    )
    bar = tqdm(total=cfg.steps, desc="ranker", unit="step")
    try:
        summary = trainer.train(base.models_dir / "ranker", progress=bar.update)
    finally:
        bar.close()
    write_metrics(base.models_dir / "ranker_metrics.json", summary, "ranker")
    return {k: v for k, v in summary.items() if k not in ("history", "evaluations")}


def main(argv=None) -> None:
    run_stage("ranker", __doc__, ("base", "ranker"), work, argv)


if __name__ == "__main__":
    main()
