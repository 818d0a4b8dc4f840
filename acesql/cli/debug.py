"""`acesql debug`: SQL debugging tasks (check a fix, evaluate the agent, import BIRD-CRITIC)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from acesql.cli.options import COUNT, echo_json, regular_file
from acesql.sql.sandbox import check_timeout


@click.group()
def debug():
    """SQL debugging tasks: check a fix, read BIRD-CRITIC's format, look at tasks."""


def _find_task(tasks_file, task_id):
    from acesql.debug.task import read_tasks

    tasks = read_tasks(tasks_file)
    found = next((t for t in tasks if t.task_id == task_id), None)
    if found is None:
        raise click.BadParameter(
            f"no task {task_id!r} in {tasks_file} ({len(tasks)} tasks)", param_hint="--id"
        )
    return found


@debug.command("check")
@click.option("--tasks", "tasks_file", required=True, type=click.Path(), help="Tasks JSONL.")
@click.option("--id", "task_id", required=True, help="The task's task_id.")
@click.option("--fix", help="The fix: one or more SQL statements.")
@click.option("--fix-file", type=click.Path(), callback=regular_file, help="The fix, from a file.")
@click.option("--timeout", "timeout_s", default=10.0, show_default=True, help="Per statement (s).")
def debug_check(tasks_file, task_id, fix, fix_file, timeout_s):
    """Run a fix beside the task's solution (never on the database itself); print the verdict."""
    import tempfile

    from acesql.debug.check import check_fix
    from acesql.sql.replicas import Replicas

    if (fix is None) == (fix_file is None):
        raise click.UsageError("give exactly one of --fix and --fix-file")
    task = _find_task(tasks_file, task_id)
    text = fix if fix is not None else _read_fix(fix_file)
    with (
        tempfile.TemporaryDirectory(prefix="acesql-replicas-") as scratch,
        Replicas(scratch, timeout_s=check_timeout(timeout_s)) as replicas,
    ):
        echo_json({"task_id": task.task_id, **check_fix(task, text, replicas).to_dict()})


debug.add_command(  # its old name
    click.Command(
        "judge",
        callback=debug_check.callback,
        params=debug_check.params,
        help="The old name of `acesql debug check`.",
        hidden=True,
        deprecated="Use `acesql debug check`: the same check of a fix.",
    )
)


def _read_fix(path) -> str:
    from acesql.errors import DataError

    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path} is not UTF-8 (byte {exc.start}: {exc.reason})") from exc


@debug.command("show")
@click.option("--tasks", "tasks_file", required=True, type=click.Path(), help="Tasks JSONL.")
@click.option("--id", "task_id", help="One task (else a count by category and bug).")
def debug_show(tasks_file, task_id):
    """Print one task whole, or what a tasks file holds."""
    from collections import Counter

    from acesql.debug.task import read_tasks

    if task_id is not None:
        echo_json(_find_task(tasks_file, task_id).to_dict())
        return
    tasks = read_tasks(tasks_file)
    echo_json(
        {
            "tasks": len(tasks),
            "by_category": dict(Counter(t.category for t in tasks)),
            "by_bug": dict(sorted(Counter(t.bug for t in tasks).items())),
        }
    )


@debug.command("eval")
@click.option("--model", required=True, type=click.Path(exists=True), help="Model folder.")
@click.option("--tasks", "tasks_file", required=True, type=click.Path(), help="Tasks JSONL.")
@click.option("--limit", type=COUNT, help="Tasks, spread over databases [all].")
@click.option("--max-turns", default=5, show_default=True, type=COUNT, help="Turn budget.")
@click.option("--max-new-tokens", default=256, show_default=True, type=COUNT, help="Per turn.")
@click.option(
    "--batch-size", default=8, show_default=True, type=COUNT, help="Trajectories per chunk."
)
@click.option("--timeout", "timeout_s", default=10.0, show_default=True, help="Per statement (s).")
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Result folder.")
def debug_eval(model, tasks_file, limit, max_turns, max_new_tokens, batch_size, timeout_s, out):
    """The agent on debugging tasks, one greedy trajectory each: success per category, turns,
    tokens. Resumes from OUT/rows.jsonl; prints the metrics. (`acesql eval --format debug`
    runs the same.)"""
    metrics = run_agent_evaluation(
        model,
        tasks_file,
        Path(out),
        limit=limit,
        max_turns=max_turns,
        max_new_tokens=max_new_tokens,
        batch_size=batch_size,
        timeout_s=timeout_s,
    )
    echo_json(metrics)


def run_agent_evaluation(
    model, tasks_file, out: Path, *, limit, max_turns, max_new_tokens, batch_size, timeout_s
) -> dict:
    """One greedy agent trajectory per task of `tasks_file` (at most `limit`, spread over
    databases and categories), on replicas in a temporary folder; rows, metrics and report
    into `out`. Returns the metrics."""
    import tempfile

    from tqdm import tqdm

    from acesql.debug.task import read_tasks, spread
    from acesql.eval.agent import evaluate_agent
    from acesql.models.base_model import load_tokenizer
    from acesql.models.engine import load_engine
    from acesql.sql.replicas import Replicas

    tasks = spread(read_tasks(tasks_file), limit)
    engine = load_engine("transformers", model, batch_size=batch_size, progress=False)
    bar = tqdm(total=len(tasks), desc="agent", unit="task", file=sys.stderr)
    try:
        with (
            tempfile.TemporaryDirectory(prefix="acesql-replicas-") as scratch,
            Replicas(scratch, timeout_s=check_timeout(timeout_s)) as replicas,
        ):
            return evaluate_agent(
                engine,
                load_tokenizer(model),
                tasks,
                replicas,
                out,
                max_turns=max_turns,
                max_new_tokens=max_new_tokens,
                chunk=batch_size,
                progress=bar.update,
            )
    finally:
        bar.close()
        engine.close()


@debug.command("compare")
@click.argument("a", type=click.Path(exists=True, file_okay=False))
@click.argument("b", type=click.Path(exists=True, file_okay=False))
def debug_compare(a, b):
    """Two agent evaluations paired on the tasks both scored: B - A overall and per category,
    with a 95% bootstrap interval and the exact McNemar p-value."""
    from acesql.eval.agent import compare, read_rows

    echo_json(compare(read_rows(a), read_rows(b)))


@debug.command("import-bird-critic")
@click.option("--jsonl", required=True, type=click.Path(), help="A BIRD-CRITIC JSONL file.")
@click.option("--db-root", required=True, type=click.Path(file_okay=False), help="Databases.")
@click.option("--dialect", default="sqlite", show_default=True, help="When a record has none.")
@click.option("--split", default="test", show_default=True, help="Split name the tasks get.")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="Tasks JSONL.")
def debug_import_bird_critic(jsonl, db_root, dialect, split, out):
    """Read BIRD-CRITIC tasks into this project's format; print what was kept and skipped."""
    from acesql.debug.bird_critic import load_bird_critic
    from acesql.debug.task import write_tasks

    tasks, skipped = load_bird_critic(jsonl, db_root, dialect, split)
    write_tasks(out, tasks)
    echo_json({"out": out, "tasks": len(tasks), "skipped": dict(skipped)})
