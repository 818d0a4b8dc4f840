"""The numbers that say how each stage went, read from the outputs DVC recorded for it.

`HEADLINES` names them per stage; `stage_headlines(dvc.lock, stage)` reads them from the JSON
files among the stage's dvc.lock outputs (a stage DVC skipped has them too: its outputs are
the cached ones). The pipeline's MLflow run carries them (`<stage>.<key>`,
`evaluate.<split>.<key>`), so the MLflow compare view lines two pipelines up; `acesql
metrics` prints them, one per line. Each stage also writes them beside its metrics file
(`headline_path`), and dvc.yaml declares that small file as the stage's DVC metric, so `dvc
metrics show` and `dvc exp show` print these few columns; the full metrics file is a plain
output.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from acesql.staging import write_atomic
from acesql.tracking import flatten

# stage -> the flattened keys of its JSON outputs that say how it went
HEADLINES = {
    "base_model": ("parameters",),
    "data": ("splits.train.n", "splits.dev.n", "splits.test_ood.n"),
    "debug_data": (
        "tasks",
        "by_category.query",
        "by_category.management",
        "by_category.personalization",
    ),
    "sft_data": ("n_retriever", "n_generator"),
    "sft": ("steps", "first_loss", "final_loss", "train_seconds"),
    "grpo_data": ("considered", "kept", "kept_rate"),
    "grpo": (
        "steps",
        "questions",
        "retriever_reward_mean_first5",
        "retriever_reward_mean_last5",
        "generator_reward_mean_first5",
        "generator_reward_mean_last5",
        "best_val_pipeline_ex",
        "train_seconds",
    ),
    "reasoning_sft": ("records", "steps", "first_loss", "final_loss", "train_seconds"),
    "agent_sft": ("records", "steps", "first_loss", "final_loss", "train_seconds"),
    "reasoning_grpo": ("steps", "reward_mean_first5", "reward_mean_last5", "success_last5"),
    "agent_grpo": ("steps", "reward_mean_first5", "reward_mean_last5", "success_last5"),
    "ranker_data": ("train.questions", "train.pairs", "held_out.pairs"),
    "prm_data": ("questions", "records", "malformed", "leaf_accuracy"),
    "prm": (
        "steps",
        "final_loss",
        "held_out_before/auc",
        "held_out_after/auc",
        "held_out_after/ece",
    ),
    "ranker": (
        "steps",
        "reward_mean_first5",
        "reward_mean_last5",
        "held_out_before/consistent_accuracy",
        "held_out_after/consistent_accuracy",
        "held_out_after/position_bias",
    ),
    "evaluate": (
        "n",
        "answer_ex",
        "pipeline_ex",
        "full_schema_ex",
        "maj_ex",
        "r3_ex",
        "oracle_ex",
        "generator_ex",
        "retriever_recall",
        "covers_gold",
        "retriever_fallback_rate",
    ),
}


def headline_path(metrics_path: Path) -> Path:
    """Where the headline of a stage's metrics file goes.

    >>> names = ("grpo_metrics.json", "metrics.json", "base_model.json")
    >>> [headline_path(Path(name)).name for name in names]
    ['grpo_headline.json', 'headline.json', 'base_model_headline.json']
    """
    if metrics_path.suffix != ".json":
        raise ValueError(f"a stage's metrics file is JSON, not {metrics_path.name}")
    stem = metrics_path.stem
    stem = stem.removesuffix("metrics") if stem.endswith("metrics") else stem + "_"
    return metrics_path.with_name(stem + "headline.json")


def headline(stage: str, metrics: dict) -> dict[str, float]:
    """The `HEADLINES` numbers of `stage` found in its `metrics`, flat, in `HEADLINES` order.

    >>> headline("sft", {"steps": 3, "final_loss": 0.5, "losses": [1.0, 0.5], "note": "x"})
    {'steps': 3, 'final_loss': 0.5}
    """
    flat = flatten(metrics)
    return {key: flat[key] for key in HEADLINES[stage] if _number(flat.get(key))}


def _number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def write_headline(stage: str, metrics_path: Path, metrics: dict) -> Path:
    """Write `stage`'s headline numbers of `metrics` beside `metrics_path`; return its path."""
    path = headline_path(Path(metrics_path))
    write_atomic(path, json.dumps(headline(stage, metrics), indent=2) + "\n")
    return path


def stage_headlines(
    lock: str | Path, stage: str, root: Path = Path(), every: bool = False
) -> dict[str, float]:
    """The `HEADLINES` numbers of `stage` (all its numbers with `every`), from the JSON files
    its dvc.lock entries output, as `<stage>.<key>` (`<stage>.<item>.<key>` for a foreach
    stage's entries).

    >>> import tempfile; root = Path(tempfile.mkdtemp())
    >>> _ = (root / "m.json").write_text('{"final_loss": 0.5, "steps": 3, "note": "x"}')
    >>> _ = (root / "dvc.lock").write_text("stages: {sft: {outs: [{path: m.json, md5: a}]}}")
    >>> stage_headlines(root / "dvc.lock", "sft", root)
    {'sft.steps': 3.0, 'sft.final_loss': 0.5}
    """
    numbers = {}
    for name, entry in lock_stages(lock).items():
        base, _, item = name.partition("@")
        if base != stage:
            continue
        prefix = f"{stage}.{item}." if item else f"{stage}."
        for out in entry.get("outs", []):
            path = root / out["path"]
            if path.suffix != ".json" or not path.is_file():
                continue
            try:
                flat = flatten(json.loads(path.read_text()))
            except json.JSONDecodeError:
                continue
            for key in flat if every else HEADLINES.get(stage, ()):
                value = flat.get(key)
                if _number(value):
                    numbers[prefix + key] = float(value)
    return numbers


def lock_stages(lock: str | Path) -> dict[str, dict]:
    """The `stages` of a dvc.lock ({} when there is none)."""
    try:
        return (yaml.safe_load(Path(lock).read_text()) or {}).get("stages", {})
    except FileNotFoundError:
        return {}


def pipeline_numbers(lock: str | Path, root: Path = Path(), every: bool = False) -> dict:
    """`{stage: {key: value}}` of every stage dvc.lock records, in pipeline order; a stage
    whose outputs are not here (not pulled, or removed) maps to {}."""
    order = list(HEADLINES)  # pipeline order; stages it does not name come last
    stages = sorted(
        dict.fromkeys(name.partition("@")[0] for name in lock_stages(lock)),
        key=lambda stage: order.index(stage) if stage in order else len(order),
    )
    numbers = {}
    for stage in stages:
        found = stage_headlines(lock, stage, root, every)
        numbers[stage] = {key.removeprefix(f"{stage}."): v for key, v in found.items()}
    return numbers
