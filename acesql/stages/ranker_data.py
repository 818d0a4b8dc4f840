"""The `ranker_data` stage: pairs of a correct and a wrong candidate for the ranker role.

    python -m acesql.stages.ranker_data [--params params.yaml]

Reads `base`, `base_model`, `prompt` and `ranker_data`; the model at `ranker_data.model` (by
default the GRPO model) and `{data_dir}/prepared/{train,dev}.jsonl`. Rolls the model out on
`max_questions` train questions and `eval_questions` dev questions as evaluation does
(greedy retriever, `candidates` generator samples, each run and matched against the gold)
and keeps, per question with both a correct and a wrong result, up to `pairs_per_question`
pairs rendered as the judge's two prompts (`acesql.ranker.pairs`). Writes
`{data_dir}/ranker/{train,held_out}.jsonl` and `{data_dir}/ranker_metrics.json` (questions,
pairs, why questions gave none), also logged to MLflow.
"""

from __future__ import annotations

import functools
from pathlib import Path

from acesql.data.filtering import filter_examples
from acesql.data.loaders import read_prepared
from acesql.data.schemas import SchemaCache
from acesql.errors import DataError
from acesql.models.base_model import load_tokenizer
from acesql.models.engine import open_engine
from acesql.models.prompts import PromptBuilder
from acesql.ranker.judge import pair_prompt
from acesql.ranker.pairs import build_pairs, write_pairs
from acesql.sql.batch_executor import BatchExecutor
from acesql.stages.common import run_stage, write_metrics
from acesql.staging import replace_dir
from acesql.tracking import flatten


def work(s: dict, tracker) -> dict:

    base, cfg = s["base"], s["ranker_data"]
    model_dir = cfg.model
    if not Path(model_dir).is_dir():
        raise DataError(f"{model_dir} not found: train it first, or set ranker_data.model")
    splits = {"train": cfg.max_questions, "held_out": cfg.eval_questions}
    tokenizer = load_tokenizer(model_dir)
    prompts = PromptBuilder(
        tokenizer, s["base_model"].reasoning, s["prompt"].sample_values, s["prompt"].sql_format
    )
    engine = open_engine(cfg.generation, model_dir)
    render = functools.partial(pair_prompt, tokenizer)
    schemas = SchemaCache(s["prompt"].sample_values)
    metrics, built = {}, {}
    try:
        with BatchExecutor(timeout_s=cfg.timeout_s) as executor:
            for name, limit in splits.items():
                source = "train" if name == "train" else "dev"
                if limit == 0:
                    built[name] = []
                    continue
                examples = read_prepared(base.data_dir / "prepared" / f"{source}.jsonl")
                examples = filter_examples(examples, max_examples=limit, seed=base.seed)
                pairs, stats = build_pairs(
                    examples,
                    engine,
                    prompts,
                    render,
                    executor,
                    candidates=cfg.candidates,
                    temperature=cfg.generation.temperature,
                    max_new_tokens=cfg.generation.max_new_tokens,
                    pairs_per_question=cfg.pairs_per_question,
                    mode=cfg.match_mode,
                    seed=base.seed,
                    schemas=schemas,
                )
                built[name], metrics[name] = pairs, stats.to_dict()
    finally:
        engine.close()
    if not built["train"]:
        raise DataError(
            "ranker_data found no train question with both a correct and a wrong candidate "
            f"({metrics['train']['skipped']}): roll out more questions (max_questions)"
        )
    out = base.data_dir / "ranker"
    with replace_dir(out) as new:
        for name, pairs in built.items():
            write_pairs(new / f"{name}.jsonl", pairs)
    write_metrics(base.data_dir / "ranker_metrics.json", metrics, "ranker_data")
    tracker.log_metrics(
        {f"ranker_data/{k}": v for k, v in flatten(metrics).items() if isinstance(v, int | float)}
    )
    return metrics


def main(argv=None) -> None:
    run_stage("ranker_data", __doc__, ("base", "base_model", "prompt", "ranker_data"), work, argv)


if __name__ == "__main__":
    main()
