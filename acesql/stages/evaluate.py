"""The `evaluate` stage: greedy pipeline EX and generator ability of a model, per split.

    python -m acesql.stages.evaluate [--params params.yaml]

Reads `base`, `base_model`, `prompt` and `evaluate`; the model at `evaluate.model` and the
prepared splits `evaluate.splits`. Writes `{results_dir}/metrics.json` (per split: EX,
generator ability, retriever scores, per complexity) and `{results_dir}/rows/<split>.jsonl` (one
row per question), and logs the numbers to MLflow.
"""

from __future__ import annotations

import json

from acesql.data.filtering import filter_examples
from acesql.data.loaders import read_prepared
from acesql.eval.pipeline import evaluate_examples
from acesql.models.base_model import load_tokenizer
from acesql.models.engine import open_engine
from acesql.models.prompts import PromptBuilder
from acesql.sql.executor import BatchExecutor
from acesql.stages.common import run_stage, write_metrics


def work(s: dict, tracker) -> dict:
    base, cfg = s["base"], s["evaluate"]
    gen = cfg.generation
    engine = open_engine(gen, cfg.model)
    prompts = PromptBuilder(
        load_tokenizer(cfg.model), s["base_model"].reasoning, s["prompt"].sample_values
    )
    metrics = {"model": cfg.model}
    with BatchExecutor(timeout_s=cfg.timeout_s) as executor:
        for split in cfg.splits:
            examples = read_prepared(base.data_dir / "prepared" / f"{split}.jsonl")
            examples = filter_examples(examples, max_examples=cfg.limit, seed=base.seed)
            summary, rows = evaluate_examples(
                examples,
                engine,
                prompts,
                executor,
                mode=cfg.mode,
                retriever_samples=cfg.retriever_samples,
                vote_threshold=cfg.vote_threshold,
                max_new_tokens=gen.max_new_tokens,
                seed=base.seed,
            )
            metrics[split] = summary
            out = base.results_dir / "rows" / f"{split}.jsonl"
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
            tracker.log_metrics(
                {f"{split}/{k}": v for k, v in summary.items() if isinstance(v, int | float)}
            )
    engine.close()
    write_metrics(base.results_dir / "metrics.json", metrics)
    return metrics


def main(argv=None) -> None:
    run_stage("evaluate", __doc__, ("base", "base_model", "prompt", "evaluate"), work, argv)


if __name__ == "__main__":
    main()
