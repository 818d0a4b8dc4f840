"""The `evaluate` stage: a model in both roles on the prepared splits, with a report.

    python -m acesql.stages.evaluate [--params params.yaml] [--split dev]

Reads `base`, `base_model`, `prompt`, `evaluate` and `selection`; the model at
`evaluate.model` and the prepared split(s) (`--split`, or every split of `evaluate.splits`).
For each split writes `{results_dir}/<split>/`: `headline.json` (the DVC metric: the
answers' EX, recall, coverage), `metrics.json` (every number:
pipeline EX, the selection's scores (maj@n, candidate recall; with r3 also pointwise
best-of-n and groupwise ranking), generator ability, retriever scores, non-gold ratio,
tokens, failures, per complexity), `rows.jsonl`,
`predict_dev.json` (BIRD's format) and `report.html`; logs the numbers and files to MLflow.
A killed evaluation resumes where it stopped (`acesql.eval.runner`).
"""

from __future__ import annotations

import argparse

from acesql.data.filtering import filter_examples
from acesql.data.loaders import read_prepared
from acesql.errors import ConfigError
from acesql.eval.compare import flat_summary
from acesql.eval.session import Evaluator
from acesql.stages.common import run_stage
from acesql.stages.headlines import write_headline

SECTIONS = ("base", "base_model", "prompt", "evaluate", "selection")
REPORT_FILES = ("metrics.json", "settings.json", "rows.jsonl", "predict_dev.json", "report.html")


def work(s: dict, tracker, split: str | None = None) -> dict:
    base, cfg = s["base"], s["evaluate"]
    splits = [split] if split else cfg.splits
    for name in splits:
        if not (base.data_dir / "prepared" / f"{name}.jsonl").is_file():
            raise ConfigError(
                f"split {name!r} has no {base.data_dir}/prepared/{name}.jsonl: "
                "run the data stage, or fix `evaluate.splits` / `data.splits` in params"
            )
    metrics = {}
    with Evaluator(
        cfg,
        s["selection"],
        seed=base.seed,
        reasoning=s["base_model"].reasoning,
        sample_values=s["prompt"].sample_values,
        sql_format=s["prompt"].sql_format,
    ) as evaluator:
        for name in splits:
            examples = read_prepared(base.data_dir / "prepared" / f"{name}.jsonl")
            examples = filter_examples(examples, max_examples=cfg.limit, seed=base.seed)
            out = base.results_dir / name
            summary = evaluator.evaluate(
                examples, dataset=str(base.data_dir / "prepared"), split=name, out=out
            )
            metrics[name] = summary
            write_headline("evaluate", out / "metrics.json", summary)
            tracker.log_metrics(metric_keys(summary, name))
            for file in REPORT_FILES:
                tracker.log_artifact(out / file)
    return metrics


def metric_keys(summary: dict, split: str) -> dict[str, float]:
    """The summary's numbers as flat MLflow keys: `split/metric`, `split/level/metric`.

    >>> metric_keys({"pipeline_ex": 0.5, "model": "m", "by_complexity": {"simple": {"usable": 2}},
    ...              "failures": {"timeout": 1}}, "dev")
    {'dev/pipeline_ex': 0.5, 'dev/failures/timeout': 1, 'dev/simple/usable': 2}
    """
    return {f"{split}/{k}": v for k, v in flat_summary(summary).items()}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--split", default=None)
    known, rest = parser.parse_known_args(argv)
    run_stage(
        "evaluate",
        __doc__,
        SECTIONS,
        lambda s, tracker: work(s, tracker, known.split),
        rest,
        run_name=f"evaluate@{known.split}" if known.split else None,
    )


if __name__ == "__main__":
    main()
