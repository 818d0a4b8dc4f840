"""The `acesql eval` verbs that read evaluations already made (compare, audit-sweep,
selections), without running a model."""

from __future__ import annotations

import os
from pathlib import Path

import click


def answer_name(value: str | None) -> str | None:
    """--answer-a/-b's value, checked before anything is read."""
    from acesql.errors import DataError
    from acesql.eval.compare import check_answer

    try:
        return value and check_answer(value)
    except DataError as exc:
        raise click.BadParameter(str(exc)) from None


def compare_evaluations(
    a: str, b: str, tracking_uri: str, answer_a: str | None = None, answer_b: str | None = None
) -> None:
    from acesql.eval.agent import is_agent_evaluation

    if is_agent_evaluation(a) or is_agent_evaluation(b):
        compare_agent_evaluations(a, b)
        return
    # a bar per downloaded rows file would bury the table
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    from acesql.eval.compare import (
        answers_table,
        compare_table,
        load_evaluation,
        load_rows,
        paired_table,
        settings_note,
        unfinished_note,
    )

    answer_a, answer_b = answer_a or answer_b, answer_b or answer_a
    left, right = (load_evaluation(c, tracking_uri) for c in (a, b))
    for note in filter(None, [*map(unfinished_note, (a, b)), settings_note(a, b)]):
        click.echo(note)
    click.echo(compare_table(left, right, a, b))
    rows = [load_rows(c, tracking_uri) for c in (a, b)]
    paired = paired_table(*rows)
    click.echo(paired or "\n(no per-question rows on both sides: no paired intervals)")
    if paired and answer_a:
        click.echo(answers_table(*rows, answer_a, answer_b))


def audit_sweep_report(run_ref: str, tracking_uri: str) -> None:
    from acesql.eval.audit_sweep import audit_sweep as sweep
    from acesql.eval.audit_sweep import chosen_threshold, sweep_table
    from acesql.eval.compare import load_rows

    splits = load_rows(run_ref, tracking_uri)
    tables = {split: sweep(rows) for split, rows in splits.items()}
    if not any(tables.values()):
        raise click.UsageError(
            f"{run_ref} holds no rows ranked with resampling "
            "(evaluate with --selection r3 --resample and --out)"
        )
    for split, points in tables.items():
        if not points:
            continue
        click.echo(f"{split}: {len(splits[split])} questions")
        click.echo(sweep_table(points))
        pick = chosen_threshold(points)
        where = f"{pick.threshold:.2f} ({pick.ex:.1%}, {pick.candidates:.1f} candidates a question)"
        if pick.gain.low > 0:
            click.echo(
                f"resampling pays here from {where}; set it with --audit-threshold or "
                "selection.audit_threshold for other splits, not the one it was read from"
            )
        else:
            click.echo(
                "no threshold's gain over ranking without resampling has a 95% interval "
                f"above zero on these questions: resampling does not pay; its cheapest "
                f"threshold is {where}"
            )


def selections_report(run_ref: str, tracking_uri: str) -> None:
    from acesql.eval.compare import load_rows
    from acesql.eval.selection_report import selection_report

    report = selection_report(load_rows(run_ref, tracking_uri))
    if not report:
        raise click.UsageError(
            f"{run_ref} holds no rows with candidates "
            "(evaluate with --selection maj, r3 or prm, and --out)"
        )
    click.echo(report)


def compare_agent_evaluations(a: str, b: str) -> None:
    """`acesql eval --compare A B` of two agent evaluations, paired on their tasks."""
    from acesql.eval.agent import compare, compare_table, is_agent_evaluation, read_rows

    other = next((ref for ref in (a, b) if not is_agent_evaluation(ref)), None)
    if other is not None:
        raise click.UsageError(
            f"{other} is not an agent evaluation on debugging tasks: an agent evaluation "
            "compares only with another one"
        )
    rows_a, rows_b = read_rows(Path(a)), read_rows(Path(b))
    paired = compare(rows_a, rows_b)
    if not paired["all"]["n"]:
        raise click.UsageError(f"{a} and {b} share no task: nothing to pair")
    click.echo(compare_table(paired, a, b))
