"""The `grpo_data` stage: the questions GRPO trains on, and the empirical pool's seed.

    python -m acesql.stages.grpo_data [--params params.yaml]

Reads `base`, `base_model`, `prompt` and `grpo_data`; the SFT model in `{models_dir}/sft` and
`{data_dir}/prepared/train.jsonl`. Rolls the SFT model out on each question (retriever
samples, their union as the schema, generator samples on it) and keeps the questions it
solves only sometimes. Writes `{data_dir}/grpo/train.jsonl` (prepared-example records),
`{data_dir}/grpo/initial_pool.json` and `{data_dir}/grpo_metrics.json`, also logged to MLflow.
"""

from __future__ import annotations

import json

from tqdm import tqdm

from acesql.data.filtering import filter_examples
from acesql.data.loaders import read_prepared
from acesql.data.schemas import SchemaCache
from acesql.errors import DataError
from acesql.grpo.data import build_grpo_data
from acesql.models.base_model import load_tokenizer
from acesql.models.engine import open_engine
from acesql.models.prompts import PromptBuilder
from acesql.sql.batch_executor import BatchExecutor
from acesql.stages.common import run_stage, write_metrics
from acesql.staging import replace_dir
from acesql.tracking import flatten


def work(s: dict, tracker) -> dict:

    base, cfg = s["base"], s["grpo_data"]
    model_dir = base.models_dir / "sft"
    if not model_dir.is_dir():
        raise DataError(f"{model_dir} not found: run the sft stage first (dvc repro sft)")
    examples = read_prepared(base.data_dir / "prepared" / "train.jsonl")
    examples = filter_examples(
        examples, complexities=cfg.complexities, max_examples=cfg.max_questions, seed=base.seed
    )
    if not examples:
        raise DataError("no train question left after grpo_data.complexities / max_questions")
    gen = cfg.generation
    prompts = PromptBuilder(
        load_tokenizer(model_dir),
        s["base_model"].reasoning,
        s["prompt"].sample_values,
        s["prompt"].sql_format,
    )
    engine = open_engine(gen, model_dir)
    bar = tqdm(total=len(examples), desc="grpo_data", unit="question")
    try:
        with BatchExecutor(timeout_s=cfg.timeout_s) as executor:
            kept, pool, stats = build_grpo_data(
                examples,
                engine,
                prompts,
                SchemaCache(s["prompt"].sample_values),
                executor,
                n_retriever=cfg.retriever_samples,
                n_generator=cfg.generator_samples,
                min_correct=cfg.min_correct,
                max_correct=cfg.max_correct,
                match_mode=cfg.match_mode,
                temperature=gen.temperature,
                top_p=gen.top_p,
                max_new_tokens=gen.max_new_tokens,
                max_prompt_tokens=s["prompt"].max_prompt_tokens,
                seed=base.seed,
                progress=bar.update,
            )
    finally:
        bar.close()
        engine.close()
    out = base.data_dir / "grpo"
    with replace_dir(out) as new:
        with (new / "train.jsonl").open("w") as fh:
            for ex in kept:
                fh.write(json.dumps(ex.to_dict(), ensure_ascii=False) + "\n")
        pool.save(new / "initial_pool.json")
    metrics = {
        "retriever_samples": cfg.retriever_samples,
        "generator_samples": cfg.generator_samples,
        "bounds": [cfg.min_correct, cfg.max_correct],
        **stats.to_dict(),
    }
    write_metrics(base.data_dir / "grpo_metrics.json", metrics, "grpo_data")
    tracker.log_metrics(
        {f"grpo_data/{k}": v for k, v in flatten(metrics).items() if isinstance(v, int | float)}
    )
    tracker.log_artifact(out / "initial_pool.json")
    return metrics


def main(argv=None) -> None:
    run_stage("grpo_data", __doc__, ("base", "base_model", "prompt", "grpo_data"), work, argv)


if __name__ == "__main__":
    main()
