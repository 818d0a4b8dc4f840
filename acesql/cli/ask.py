"""`acesql ask`: one question on any SQLite file, answered by the trained pipeline."""

from __future__ import annotations

import os
import sys
import time

import click

from acesql.cli.options import COUNT, MODES, NON_NEGATIVE, echo_json, json_line, selection_options


@click.command("ask")
@click.option("--model", required=True, type=click.Path(exists=True), help="Model folder.")
@click.option("--db", "db", required=True, type=click.Path(), help="Any SQLite file (read only).")
@selection_options("r3")
@click.option("--mode", type=MODES, default="multiset", show_default=True, help="Result equality.")
@click.option(
    "--sample-values",
    default=0,
    show_default=True,
    type=NON_NEGATIVE,
    help="Sample values shown per column in the schema the roles read; use the number the "
    "model was trained with (params.yaml's prompt.sample_values).",
)
@click.option(
    "--max-new-tokens",
    default=256,
    show_default=True,
    type=COUNT,
    help="Most tokens of each generation (the column list, each SQL); one that loops stops there.",
)
@click.option("--max-rows", default=20, show_default=True, type=COUNT, help="Rows shown.")
@click.option("--explain", is_flag=True, help="Also the candidates, their groups and scores.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of text.")
@click.argument("question")
def ask_command(
    model,
    db,
    selection,
    mode,
    sample_values,
    max_new_tokens,
    max_rows,
    explain,
    as_json,
    question,
):
    """Answer QUESTION on the SQLite file DB with the trained pipeline: retriever, generator x n,
    sandboxed execution, selection; print the chosen SQL and its rows (exit 1: no answer).

    The selection flags are the `selection` params section's (start from a project's with
    --selection-params params.yaml)."""
    from acesql.models.engine import load_engine
    from acesql.models.prompts import PromptBuilder
    from acesql.selection.ask import ask, open_schema

    open_schema(db)  # a missing or foreign file fails before the model loads
    engine = load_engine("transformers", model, progress=False)
    try:
        process_scorer = _process_scorer(selection, engine)
        sql_format = process_scorer.view if process_scorer else "direct"
        prompts = PromptBuilder(engine.tokenizer, False, sample_values, sql_format)
        answer = ask(
            engine,
            prompts,
            db,
            question,
            selection,
            process_scorer=process_scorer,
            mode=mode,
            max_new_tokens=max_new_tokens,
            say=_steps(),
        )
    finally:
        engine.close()
    if as_json:
        echo_json(_as_dict(answer, explain))
    else:
        _echo_text(answer, explain, max_rows)
    if answer.sql is None:
        sys.exit(1)


def _as_dict(answer, explain: bool) -> dict:
    """`--json`'s object."""
    return {
        "sql": answer.sql,
        "result": answer.result.to_dict() if answer.result else None,
        "columns": answer.columns,
        "resampled": answer.resampled,
        "answer_from": answer.answer_from,
        "agreement": {"same_result": answer.agreement[0], "ran": answer.agreement[1]},
        "notes": answer.notes,
        **({"full_schema_sql": answer.full_sql} if answer.full_result else {}),
        **({"candidates": answer.candidates, "groups": answer.groups} if explain else {}),
    }


def _echo_text(answer, explain: bool, max_rows: int) -> None:
    """The answer as text: with `explain` first the candidates and groups, then the SQL and
    its rows; notes on stderr."""
    from acesql.sql.observation import render_observation

    if explain:
        _echo_explanation(answer)
    if answer.sql is None:
        click.echo("no answer: none of the candidate queries ran", err=True)
    else:
        click.echo(answer.sql)
        click.echo(render_observation(answer.result, max_rows=max_rows))
        same, ran = answer.agreement
        if ran > 1:
            click.echo(f"agreement: {same} of {ran} candidates that ran returned this result")
    for note in answer.notes:
        click.echo(f"note: {note}", err=True)


def _echo_explanation(answer) -> None:
    click.echo(f"retrieved columns: {', '.join(answer.columns) or '(none)'}")
    for i, (sql, result) in enumerate(zip(answer.candidates, answer.results)):
        state = "ok" if result.ok else f"error: {result.error}"
        click.echo(f"candidate {i} [{state}]: {sql or '(no SQL)'}")
    if answer.resampled:
        click.echo("the auditor found no likely-correct SQL: more candidates were drawn")
    if any("preference" in g for g in answer.groups):
        click.echo(PREFERENCE_NOTE)
    for rank, group in enumerate(answer.groups, 1):
        click.echo(f"group {rank}: {json_line(group)}")
    if answer.full_result is not None:
        click.echo(f"full schema's answer: {answer.full_sql or '(no SQL)'}")
        click.echo(f"answer from: {answer.answer_from} (selection.answer)")


PREFERENCE_NOTE = (
    "groups: candidates that returned the same result; preference is the share of pairwise "
    "judgments the group won against the other groups (0.0 when there is no other group to "
    "compare with), utility mixes it with the judge's pointwise score, best is the member "
    "shown as the answer"
)


def _steps():
    """A callback printing each step of `ask` on stderr with the seconds since the start: a
    model on a CPU takes minutes, and a user should see which part is running."""
    start = time.monotonic()

    def say(step: str) -> None:
        click.echo(f"[{time.monotonic() - start:5.1f} s] {step}...", err=True)

    return say


def _process_scorer(selection, engine):
    """The prm selection's scorer (its own model, its SQL in a worker process), or None for
    the others."""
    from acesql.selection.selector import Selector

    if not Selector(selection).needs_score_model:
        return None
    from acesql.selection.selector import load_process_scorer
    from acesql.sql.batch_executor import BatchExecutor

    if not os.path.isdir(selection.prm_model):
        raise click.UsageError(
            f"--prm-model: no such folder {selection.prm_model} (run the prm stage)"
        )
    return load_process_scorer(selection, engine.tokenizer, BatchExecutor(workers=1))
