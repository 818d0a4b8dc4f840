"""The `sft_data` stage: both roles' supervised targets, from the base model or the gold SQL.

    python -m acesql.stages.sft_data [--params params.yaml]

Reads `base`, `base_model`, `prompt` and `sft_data`; the base model in `{models_dir}/base`
and `{data_dir}/prepared/train.jsonl`. Writes `{data_dir}/sft/retriever.jsonl`,
`{data_dir}/sft/generator.jsonl` and `{data_dir}/sft_metrics.json` (kept and dropped, and
why, per role and complexity), also logged to MLflow.
"""

from __future__ import annotations

import json
import sys

from acesql.data.filtering import filter_examples
from acesql.data.loaders import read_prepared
from acesql.data.schemas import SchemaCache
from acesql.errors import DataError
from acesql.models.base_model import load_tokenizer
from acesql.models.engine import open_engine
from acesql.models.prompts import PromptBuilder
from acesql.sft.data import ROLES, build_generator_distilled, build_gold, build_self_distilled
from acesql.sql.batch_executor import BatchExecutor
from acesql.stages.common import run_stage, write_metrics
from acesql.staging import replace_dir
from acesql.tracking import flatten


def work(s: dict, tracker) -> dict:
    base, cfg = s["base"], s["sft_data"]
    model_dir = base.models_dir / "base"
    examples = read_prepared(base.data_dir / "prepared" / "train.jsonl")
    examples = filter_examples(examples, max_examples=cfg.max_examples, seed=base.seed)
    p = s["prompt"]
    prompts = PromptBuilder(
        load_tokenizer(model_dir), s["base_model"].reasoning, p.sample_values, p.sql_format
    )
    schemas = SchemaCache(p.sample_values)
    if cfg.mode == "gold" and p.sql_format == "direct":
        records, stats = build_gold(examples, prompts, schemas, p.max_prompt_tokens)
    elif cfg.mode == "gold":  # Chain-of-CTE targets are kept when they execute as the gold
        with BatchExecutor() as executor:
            records, stats = build_gold(
                examples, prompts, schemas, p.max_prompt_tokens, executor, cfg.match_mode
            )
    else:
        records, stats = _distil(cfg, examples, prompts, schemas, model_dir, p, base.seed)
    if not records:
        raise DataError(
            f"sft_data kept no target: {stats.shortfall(len(examples)) or 'no question'}."
            " Use sft_data.mode gold, or more max_examples"
        )
    short = stats.shortfall(len(examples)) if cfg.mode != "gold" else None
    if short:
        other = "distill_generator or gold" if cfg.mode == "self_distill" else "gold"
        print(
            f"sft_data: warning: only {short}. A cold start this small barely moves the model:"
            f" try more max_examples, generation.temperature 0, or mode {other}",
            file=sys.stderr,
        )
    with replace_dir(base.data_dir / "sft") as out:
        for role in ROLES:
            with (out / f"{role}.jsonl").open("w") as fh:
                for rec in records:
                    if rec["role"] == role:
                        fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
    metrics = {"mode": cfg.mode, "source_examples": len(examples), **stats.to_dict()}
    write_metrics(base.data_dir / "sft_metrics.json", metrics, "sft_data")
    tracker.log_metrics({k: v for k, v in flatten(metrics).items() if isinstance(v, int)})
    return metrics


def _distil(cfg, examples, prompts, schemas, model_dir, p, seed):
    """Targets sampled from the base model: `distill_generator` or `self_distill`."""

    gen = cfg.generation
    settings = dict(
        retriever_samples=cfg.retriever_samples,
        generator_samples=cfg.generator_samples,
        temperature=gen.temperature,
        top_p=gen.top_p,
        max_new_tokens=gen.max_new_tokens,
        max_prompt_tokens=p.max_prompt_tokens,
        balance=cfg.balance,
        match_mode=cfg.match_mode,
        seed=seed,
    )
    if cfg.mode == "self_distill":
        settings["vote_threshold"] = cfg.vote_threshold
    else:
        settings["shuffle_tables"] = cfg.shuffle_tables
    build = build_generator_distilled if cfg.mode == "distill_generator" else build_self_distilled
    engine = open_engine(gen, model_dir)
    try:
        with BatchExecutor() as executor:
            return build(examples, prompts, schemas, engine, executor, **settings)
    finally:
        engine.close()


def main(argv=None) -> None:
    run_stage("sft_data", __doc__, ("base", "base_model", "prompt", "sft_data"), work, argv)


if __name__ == "__main__":
    main()
