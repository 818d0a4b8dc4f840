"""Scoring without a model: `acesql evaluate-sql` (a predictions file), `acesql
check-gold-sql` (the gold SQL as its own predictions, the SQL engine's self-check) and `acesql
metrics` (the headline numbers of the last pipeline run)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import click

from acesql.cli.options import (
    MODES,
    NON_NEGATIVE,
    echo_json,
    regular_file,
    timeout_option,
    write_jsonl,
)
from acesql.data.loaders import LOADERS


@click.command("evaluate-sql")
@click.option(
    "--dataset",
    required=True,
    type=click.Path(exists=True, file_okay=False),
    help="Dataset folder (Spider, BIRD, synthetic or SynSQL layout).",
)
@click.option("--format", "fmt", type=click.Choice(sorted(LOADERS)), required=True)
@click.option("--split", default="dev", show_default=True)
@click.option(
    "--predictions",
    required=True,
    type=click.Path(exists=True, dir_okay=False),
    callback=regular_file,
    help='JSON lines {"index": i, "sql": ...} or BIRD predict_dev.json.',
)
@click.option("--mode", type=MODES, default="multiset", show_default=True)
@click.option(
    "--workers",
    type=NON_NEGATIVE,
    default=None,
    help="SQL worker processes [one per core]; 0: in this process.",
)
@timeout_option
@click.option(
    "--out", type=click.Path(dir_okay=False), help="Write per-example results (JSON lines)."
)
@click.option("--progress/--no-progress", default=True, show_default=True)
def evaluate_sql(dataset, fmt, split, predictions, mode, workers, timeout_s, out, progress):
    """Score a predictions file by execution accuracy; print the summary.

    Exits 2 with "nothing scorable" when no question has a gold query that runs.
    """
    from acesql.data.loaders import load_dataset
    from acesql.errors import DataError
    from acesql.eval.sql_eval import evaluate_predictions, load_predictions
    from acesql.sql.batch_executor import BatchExecutor

    data = load_dataset(dataset, fmt, split)
    preds = load_predictions(predictions)
    with BatchExecutor(workers=workers, timeout_s=timeout_s, progress=progress) as executor:
        summary, rows = evaluate_predictions(data, preds, mode, executor)
    if out:
        write_jsonl(out, rows)
    echo_json(summary)
    if not summary["usable"]:
        raise DataError(
            f"nothing scorable: none of the {summary['n']} questions of {dataset} has a usable "
            f"gold query ({summary['unusable']})"
        )


@click.command("metrics")
@click.option("--all", "every", is_flag=True, help="Every number, not just the headline ones.")
@click.option("--json", "as_json", is_flag=True, help="JSON {stage: {number: value}} instead.")
@click.option(
    "--lock",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("dvc.lock"),
    show_default=True,
    help="The dvc.lock whose outputs to read (paths relative to its folder).",
)
def metrics(every, as_json, lock):
    """How each stage of the last `dvc repro` went, one number per line.

    The headline numbers of `acesql.stages.headlines` (the ones the pipeline's MLflow run
    carries), read from the JSON outputs dvc.lock records for each stage: one per line, where
    `dvc metrics show` prints the same numbers as one row per stage's headline file.
    """
    from acesql.stages.headlines import pipeline_numbers

    if not lock.is_file():
        raise click.UsageError(f"{lock} not found: run the pipeline first (make run, dvc repro)")
    numbers = pipeline_numbers(lock, lock.parent, every)
    if as_json:
        echo_json(numbers)
        return
    if not any(numbers.values()):
        click.echo(f"no stage of {lock} has written its outputs here yet")
        return
    width = max(len(key) for stage in numbers.values() for key in stage)
    for stage, values in numbers.items():
        for key, value in values.items():
            shown = int(value) if value.is_integer() else f"{value:.4g}"
            click.echo(f"{stage:<12}{key:<{width + 2}}{shown}")
    missing = [stage for stage, values in numbers.items() if not values]
    if missing:
        click.echo(
            f"no outputs here for: {', '.join(missing)} (dvc.lock records them: `dvc pull` "
            "or `dvc repro` brings them)"
        )


@click.command("check-gold-sql")
@click.option(
    "--spider",
    type=click.Path(),
    default="../shared/data/spider",
    show_default=True,
    help="Spider folder. A folder given here must hold tables.json; at the default path, "
    "its absence means the built-in sample dataset.",
)
@click.option("--sample", is_flag=True, help="Score the built-in sample dataset, not Spider.")
@click.option(
    "--out", type=click.Path(file_okay=False), default="results/sql-eval", show_default=True
)
@click.option(
    "--workers",
    type=NON_NEGATIVE,
    default=None,
    help="SQL worker processes [one per core]; 0: in this process.",
)
@click.pass_context
def run(ctx, spider, sample, out, workers):
    """The SQL engine's self-check: gold SQL scored as its own predictions.

    Spider dev's gold SQL (or the built-in sample's) run and matched in every match mode:
    every usable example must match, and some must be usable; exit 1 otherwise. Rows and
    summary.json go to --out. Not the main job: training is `make run`.
    """
    from acesql.data.loaders import load_dataset
    from acesql.data.sample import build_sample_dataset
    from acesql.eval.sql_eval import evaluate_predictions
    from acesql.sql.batch_executor import BatchExecutor

    out = Path(out)
    root = Path(spider)
    if sample:
        root = build_sample_dataset(out / "sample-dataset")
    elif not (root / "tables.json").is_file():
        if ctx.get_parameter_source("spider") is not click.core.ParameterSource.DEFAULT:
            raise click.BadParameter(f"no tables.json in {spider}", param_hint="--spider")
        click.echo(f"no Spider at {spider}: scoring the built-in sample dataset", err=True)
        root = build_sample_dataset(out / "sample-dataset")
    data = load_dataset(root, "spider", "dev")
    gold = {e.index: e.sql for e in data.examples}
    report = {"dataset": str(root), "n_examples": len(data.examples)}
    with BatchExecutor(workers=workers, progress=True) as executor:
        for mode in ("multiset", "bird", "spider"):
            start = time.monotonic()
            summary, rows = evaluate_predictions(data, gold, mode, executor)
            summary["seconds"] = round(time.monotonic() - start, 3)
            report[mode] = summary
            write_jsonl(out / f"gold-{mode}.jsonl", rows)
    (out / "summary.json").write_text(json.dumps(report, indent=2))
    echo_json(report)
    failed = _self_check_failures(report)
    if failed:
        click.echo(f"self-check failed: {failed}", err=True)
        sys.exit(1)


def _self_check_failures(report: dict) -> str:
    """What makes a gold-SQL self-check fail, in words; empty when it passed.

    >>> _self_check_failures({"multiset": {"usable": 3, "ex": 1.0}})
    ''
    >>> _self_check_failures({"multiset": {"usable": 0, "ex": 0.0}})
    'multiset: no usable example (every gold query failed or its database is missing)'
    >>> _self_check_failures({"bird": {"usable": 4, "ex": 0.5}})
    'bird: 50.0% of the usable gold queries match themselves, not all'
    """
    problems = []
    for mode, summary in report.items():
        if not isinstance(summary, dict):
            continue
        if not summary.get("usable"):
            problems.append(
                f"{mode}: no usable example (every gold query failed or its database is missing)"
            )
        elif summary.get("ex", 1.0) < 1.0:
            problems.append(
                f"{mode}: {summary['ex']:.1%} of the usable gold queries match themselves, not all"
            )
    return "; ".join(problems)
