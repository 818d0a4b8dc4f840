"""The `prm_data` stage: Chain-of-CTE prefixes labelled by Monte Carlo from execution.

    python -m acesql.stages.prm_data [--params params.yaml]

Reads `base`, `base_model`, `prompt` and `prm_data`; the policy at `prm_data.model` (by
default the SFT model, cold-started on Chain-of-CTE when `prompt.sql_format` was `cocte`) and
`{data_dir}/prepared/train.jsonl`. Samples chains on `max_questions` train questions,
continues every prefix, and labels each prefix and complete chain with the share of correct
answers below it (`acesql.prm.labels`). With `sql_format: direct` the policy writes plain
SQL, each answer is seen as a chain (`acesql.prm.view`) and no prefix is continued. The
questions are split: `held_out_fraction` of them give the held-out records. Writes
`{data_dir}/prm/{train,held_out}.jsonl` and `{data_dir}/prm_metrics.json` (chains, malformed
by kind, records, the leaves' accuracy, the labels' histogram), also logged to MLflow.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from acesql.data.filtering import filter_examples
from acesql.data.loaders import read_prepared
from acesql.data.schemas import SchemaCache
from acesql.errors import DataError
from acesql.models.base_model import load_tokenizer
from acesql.models.engine import open_engine
from acesql.models.prompts import PromptBuilder
from acesql.prm.labels import label_steps
from acesql.sql.batch_executor import BatchExecutor
from acesql.stages.common import run_stage, write_metrics
from acesql.staging import replace_dir
from acesql.tracking import flatten


def work(s: dict, tracker) -> dict:

    base, cfg = s["base"], s["prm_data"]
    if not Path(cfg.model).is_dir():
        raise DataError(f"{cfg.model} not found: train it first, or set prm_data.model")
    examples = read_prepared(base.data_dir / "prepared" / "train.jsonl")
    examples = filter_examples(examples, max_examples=cfg.max_questions, seed=base.seed)
    prompts = PromptBuilder(
        load_tokenizer(cfg.model),
        s["base_model"].reasoning,
        s["prompt"].sample_values,
        cfg.sql_format,
    )
    engine = open_engine(cfg.generation, cfg.model)
    try:
        with BatchExecutor(timeout_s=cfg.timeout_s) as executor:
            records, stats = label_steps(
                examples,
                engine,
                prompts,
                executor,
                trajectories=cfg.trajectories,
                completions=cfg.completions,
                temperature=cfg.generation.temperature,
                max_new_tokens=cfg.generation.max_new_tokens,
                mode=cfg.match_mode,
                seed=base.seed,
                schemas=SchemaCache(s["prompt"].sample_values),
            )
    finally:
        engine.close()
    if not records:
        raise DataError(
            f"prm_data labelled nothing ({stats.to_dict()}): the policy at {cfg.model} must "
            f"write what prm_data.sql_format says ({cfg.sql_format}): Chain-of-CTE for cocte "
            "(train it with prompt.sql_format: cocte), one SQL query for direct"
        )
    keys = sorted({r["key"] for r in records})
    random.Random(f"{base.seed}:prm_data").shuffle(keys)
    held = set(keys[: round(cfg.held_out_fraction * len(keys))])
    splits = {
        "train": [r for r in records if r["key"] not in held],
        "held_out": [r for r in records if r["key"] in held],
    }
    out = base.data_dir / "prm"
    with replace_dir(out) as new:
        for name, rows in splits.items():
            with (new / f"{name}.jsonl").open("w") as fh:
                for row in rows:
                    fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    sigmas = [r["sigma"] for r in records]
    metrics = {
        **stats.to_dict(),
        "train_records": len(splits["train"]),
        "held_out_records": len(splits["held_out"]),
        "sigma_histogram": {
            label: sum(lo <= x < hi for x in sigmas)
            for label, lo, hi in (("0", 0, 1e-9), ("(0,0.5)", 1e-9, 0.5), ("[0.5,1)", 0.5, 1.0))
        }
        | {"1": sum(x >= 1.0 for x in sigmas)},
    }
    write_metrics(base.data_dir / "prm_metrics.json", metrics, "prm_data")
    tracker.log_metrics(
        {f"prm_data/{k}": v for k, v in flatten(metrics).items() if isinstance(v, int | float)}
    )
    return metrics


def main(argv=None) -> None:
    run_stage("prm_data", __doc__, ("base", "base_model", "prompt", "prm_data"), work, argv)


if __name__ == "__main__":
    main()
