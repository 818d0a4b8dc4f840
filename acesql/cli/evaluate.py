"""`acesql eval`: a model evaluated on a dataset (`run`), and the verbs that read finished
evaluations (`compare`, `selections`, `audit-sweep`, `answers`). Scoring a predictions file
without a model is `acesql evaluate-sql` (cli/scoring.py)."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import click

from acesql.cli.options import (
    COUNT,
    MODES,
    NON_NEGATIVE,
    build_section,
    echo_json,
    model_folder,
    selection_options,
    timeout_option,
)
from acesql.cli.reading import (
    answer_name,
    audit_sweep_report,
    compare_evaluations,
    selections_report,
)

DEFAULT_MODE = {"spider": "spider", "bird": "bird", "synth": "multiset", "synsql": "multiset"}


class _EvalGroup(click.Group):
    """`acesql eval VERB ...`; `acesql eval --model ...` (flags first) is `acesql eval run`."""

    def parse_args(self, ctx, args):
        if args and args[0].startswith("-") and args[0] not in ("--help", "-h"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


@click.group("eval", cls=_EvalGroup)
def evaluate_group():
    """Evaluate a model, and read evaluations: one verb each.

    \b
    acesql eval run --model M --dataset D --format F [--out DIR]   evaluate
    acesql eval compare A B          two evaluations side by side, paired
    acesql eval selections RUN       each selection against maj@n on the same candidates
    acesql eval audit-sweep RUN      what each auditor threshold would have given
    acesql eval answers RUN          which answer policy to ship, read on a dev split

    `acesql eval --model ...` (flags, no verb) still runs `eval run`.
    """


RUN_REF = click.argument("run_ref", metavar="RUN")
TRACKING_URI = click.option(
    "--tracking-uri",
    default="sqlite:///mlflow.db",
    show_default=True,
    help="MLflow store that run ids are looked up in.",
)


@evaluate_group.command("compare")
@click.argument("run_a")
@click.argument("run_b")
@TRACKING_URI
@click.option(
    "--answer-a",
    metavar="ANSWER",
    callback=lambda ctx, param, value: answer_name(value),
    help="Also pair this answer of A's rows with --answer-b's of B's: shipped, pipeline, "
    "full_schema, gold_columns, or a selection.answer policy (full_else_pipeline, "
    "pipeline_else_full, by_size:N).  [default: --answer-b's]",
)
@click.option(
    "--answer-b",
    metavar="ANSWER",
    callback=lambda ctx, param, value: answer_name(value),
    help="B's answer in that pairing.  [default: --answer-a's]",
)
def compare_command(run_a, run_b, tracking_uri, answer_a, answer_b):
    """Two evaluations side by side (result folders or MLflow run ids); with per-question rows
    on both sides, also B - A on the same questions with a 95% bootstrap interval and the
    exact McNemar p-value. With --answer-a/--answer-b, also one answer of A against another of
    B (e.g. the base model's full schema against what a trained model ships)."""
    compare_evaluations(run_a, run_b, tracking_uri, answer_a, answer_b)


@evaluate_group.command("audit-sweep")
@RUN_REF
@TRACKING_URI
def audit_sweep_command(run_ref, tracking_uri):
    """From an evaluation with --selection r3 --resample (a result folder, finished or not,
    or an MLflow run id), what each lower --audit-threshold would have given and cost,
    without running the model again."""
    audit_sweep_report(run_ref, tracking_uri)


@evaluate_group.command("selections")
@RUN_REF
@TRACKING_URI
def selections_command(run_ref, tracking_uri):
    """Every selection in one evaluation with candidates against its maj@n on the same
    candidates, paired: 95% bootstrap interval, discordant counts, McNemar p, accuracy given
    recall."""
    selections_report(run_ref, tracking_uri)


@evaluate_group.command("answers")
@RUN_REF
@TRACKING_URI
def answers_command(run_ref, tracking_uri):
    """Which answer to ship, read on RUN (an evaluation of a DEV split): the pipeline's, the
    full schema's or a rule per question (`selection.answer`), each paired against the
    pipeline, and the one to set. Never choose it on the test set you report."""
    from acesql.eval.compare import load_rows
    from acesql.selection.answer import chosen_policy, policy_table, policy_text

    splits = load_rows(run_ref, tracking_uri)
    tables = {split: policy_table(rows) for split, rows in splits.items()}
    if not any(t and t[0]["n"] for t in tables.values()):
        raise click.UsageError(
            f"{run_ref} holds no rows with a full-schema answer (evaluate it again with --out)"
        )
    for split, table in tables.items():
        if table and table[0]["n"]:
            click.echo(f"{split}: {table[0]['n']} questions")
            click.echo(policy_text(table))
            pick = chosen_policy(table)
            size = (
                f" with full_schema_tokens {pick['full_schema_tokens']}"
                if pick["full_schema_tokens"]
                else ""
            )
            click.echo(
                f"ship: answer {pick['policy']}{size} ({pick['ex']:.1%}); set selection.answer "
                "(and selection.full_schema_tokens) for the test splits, not this one"
            )


@evaluate_group.command("run")
@click.option(
    "--model", callback=model_folder, help="Model folder (or models/base with its redirect)."
)
@click.option(
    "--dataset",
    type=click.Path(exists=True, file_okay=False),
    help="The dataset folder (a Spider, BIRD or SynSQL layout, data/synth, data/wide, or "
    "data/debug for --format debug).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(sorted([*DEFAULT_MODE, "debug"])),
    help="The dataset's layout; debug: SQL debugging tasks (DATASET/SPLIT.jsonl, as the "
    "debug_data stage writes them), each solved by the agent in one greedy trajectory.",
)
@click.option("--split", default="dev", show_default=True)
@click.option(
    "--limit",
    type=COUNT,
    default=None,
    help="Questions (or tasks), spread over databases. Larger than a finished run's in --out "
    "(same model and settings): only the questions it adds are scored.",
)
@click.option("--mode", type=MODES, default=None, help="Match mode [by format].")
@click.option(
    "--retriever-samples",
    default=1,
    show_default=True,
    type=COUNT,
    help="1: greedy retriever; n: n samples voted.",
)
@click.option(
    "--vote-threshold",
    default=0.5,
    show_default=True,
    type=click.FloatRange(0.0, 1.0, min_open=True),
    help="With n retriever samples: a column is kept when at least this share of them names it.",
)
@click.option(
    "--on-empty-vote",
    type=click.Choice(["empty", "full_schema"]),
    default="empty",
    show_default=True,
    help="When the retriever selects no column: an empty schema (the paper) or the whole one.",
)
@click.option(
    "--unclosed-list",
    type=click.Choice(["reject", "salvage"]),
    default="reject",
    show_default=True,
    help="A retriever list cut off while looping: no list (the paper) or the columns it "
    "named before its first repeat.",
)
@selection_options("greedy")
@click.option("--reasoning/--no-reasoning", default=False, show_default=True)
@click.option(
    "--sample-values",
    default=0,
    show_default=True,
    type=NON_NEGATIVE,
    help="Per column in schemas.",
)
@click.option(
    "--sql-format",
    type=click.Choice(["direct", "cocte"]),
    default="direct",
    show_default=True,
    help="How the generator writes SQL: one query, or Chain-of-CTE steps.",
)
@click.option(
    "--engine",
    type=click.Choice(["transformers", "vllm"]),
    default="transformers",
    show_default=True,
)
@click.option("--batch-size", default=8, show_default=True, type=COUNT)
@click.option("--max-new-tokens", default=256, show_default=True, type=COUNT)
@click.option(
    "--bf16/--no-bf16",
    default=None,
    help="transformers engine: bf16 matrix products on fp32 weights [on CPUs that compute "
    "bf16 natively; fp32 on a GPU].",
)
@click.option(
    "--max-turns", default=5, show_default=True, type=COUNT, help="debug: the agent's turn budget."
)
@click.option("--seed", default=0, show_default=True)
@timeout_option
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    help="Write metrics.json, rows.jsonl, predict_dev.json and report.html; "
    "a killed run with the same --out resumes.",
)
@click.option(
    "--chunk-size",
    default=16,
    show_default=True,
    type=COUNT,
    help="With --out: questions saved at a time (what a kill can lose).",
)
@click.option(
    "--candidates-from",
    type=click.Path(exists=True, file_okay=False),
    help="Generate nothing: score the selection again on the candidates an earlier "
    "--selection r3 evaluation (this result folder, finished or not) drew, judged by "
    "--model. Up to that run's n, its first candidates; more, its drawn ones after them.",
)
@click.option(
    "--compare",
    nargs=2,
    metavar="RUN_A RUN_B",
    help="Instead of evaluating: compare two evaluations (result folders or MLflow run ids); "
    "with per-question rows on both sides, also B - A on the same questions with a 95% "
    "bootstrap interval and the exact McNemar p-value.",
    hidden=True,
)
@click.option(
    "--audit-sweep",
    metavar="RUN",
    help="Instead of evaluating: from an evaluation with --selection r3 --resample (a result "
    "folder, finished or not, or an MLflow run id), what each lower --audit-threshold would "
    "have given and cost, without running the model again.",
    hidden=True,
)
@click.option(
    "--selections",
    metavar="RUN",
    help="Instead of evaluating: every selection in one evaluation with candidates (a result "
    "folder, finished or not, or an MLflow run id) against its maj@n on the same candidates, "
    "paired: 95% bootstrap interval, discordant counts, McNemar p, accuracy given recall.",
    hidden=True,
)
@click.option(
    "--tracking-uri",
    default="sqlite:///mlflow.db",
    show_default=True,
    help="MLflow store the evaluation is logged to (with --track).",
)
@click.option(
    "--track/--no-track",
    default=None,
    help="Log the evaluation to MLflow as a run (settings, metrics, and with --out its "
    "files).  [default: on when MLFLOW_TRACKING_URI is set or the store already exists]",
)
def evaluate_model(**opts):
    """Evaluate MODEL in both roles on a dataset split and print the metrics.

    Greedy pipeline EX, full-schema EX (the generator once with every column), generator
    ability (the gold columns), the shipped answer (`selection.answer`), retriever scores,
    non-gold ratio and tokens, per complexity; with --selection maj also maj@n and candidate
    recall, with r3 also pointwise best-of-n and groupwise ranking on the same n candidates.
    With --out, also per-question rows, BIRD-format predictions and an HTML report. With
    --candidates-from RUN, the selection on RUN's stored candidates, nothing generated
    (acesql.eval.rescore): another judge, or a larger n, paired with RUN on the same samples;
    while RUN is unfinished, its rows so far, and the output stays unfinished until rerun.

    The flags build the `evaluate` params section and run the evaluate stage's code
    (acesql.eval.session), so a folder this command leaves unfinished resumes by either.
    With --format debug, the agent's success per category, turns and tokens instead
    (`acesql debug eval`).
    """
    o = SimpleNamespace(**opts)
    if _old_verb(o.compare, o.audit_sweep, o.selections, o.tracking_uri):
        return
    missing = [
        flag
        for flag, value in (("--model", o.model), ("--dataset", o.dataset), ("--format", o.fmt))
        if not value
    ]
    if missing:
        raise click.UsageError(f"missing {', '.join(missing)}")
    if o.fmt == "debug":
        _evaluate_agent(
            o.model,
            o.dataset,
            o.split,
            o.limit,
            o.selection,
            o.max_turns,
            o.max_new_tokens,
            o.batch_size,
            o.timeout_s,
            o.out,
        )
        return
    from acesql.data.filtering import filter_examples
    from acesql.data.loaders import load_dataset
    from acesql.eval.session import Evaluator

    examples = load_dataset(o.dataset, o.fmt, o.split).examples
    examples = filter_examples(examples, max_examples=o.limit, seed=o.seed)
    with Evaluator(
        _evaluate_section(o),
        o.selection,
        seed=o.seed,
        reasoning=o.reasoning,
        sample_values=o.sample_values,
        sql_format=o.sql_format,
        candidates_from=o.candidates_from,
    ) as evaluator:
        tracker = _eval_tracker(o.track, o.tracking_uri)
        run_name = f"eval {o.split}"
        with tracker.start_run(run_name, params=evaluator.settings, tags={"model": o.model}):
            summary = evaluator.evaluate(
                examples, dataset=o.dataset, split=o.split, out=o.out, chunk_size=o.chunk_size
            )
            _log_evaluation(tracker, summary, o.split, o.out)
    echo_json(summary)


def _evaluate_section(o: SimpleNamespace):
    """The `evaluate` params section from the flags, so the stage and this command evaluate
    alike."""
    from acesql.config import EvaluateSection, GenerationSection

    generation = GenerationSection(
        engine=o.engine,
        batch_size=o.batch_size,
        max_new_tokens=o.max_new_tokens,
        temperature=0.0,
        bf16_autocast="auto" if o.bf16 is None else o.bf16,
    )
    return build_section(
        EvaluateSection,
        model=o.model,
        splits=[o.split],
        limit=o.limit,
        retriever_samples=o.retriever_samples,
        vote_threshold=o.vote_threshold,
        on_empty_vote=o.on_empty_vote,
        unclosed_list=o.unclosed_list,
        timeout_s=o.timeout_s,
        match_mode=o.mode or DEFAULT_MODE[o.fmt],
        generation=generation,
    )


def _old_verb(compare, audit_sweep, selections, tracking_uri) -> bool:
    """The verbs that were flags of `acesql eval`: run the one asked, with a deprecation line."""
    for flag, value, verb in (
        ("--compare", compare, "compare A B"),
        ("--audit-sweep", audit_sweep, "audit-sweep RUN"),
        ("--selections", selections, "selections RUN"),
    ):
        if value:
            click.echo(f"acesql eval {flag} is now `acesql eval {verb}`", err=True)
    if compare:
        compare_evaluations(*compare, tracking_uri)
    elif audit_sweep:
        audit_sweep_report(audit_sweep, tracking_uri)
    elif selections:
        selections_report(selections, tracking_uri)
    return bool(compare or audit_sweep or selections)


def _eval_tracker(track: bool | None, tracking_uri: str):
    """MLflow when asked, or by default when a store is configured (MLFLOW_TRACKING_URI) or
    already there (a sqlite file that exists): an evaluation never creates a store unasked."""
    from acesql.tracking import MlflowTracker, NullTracker

    uri = os.environ.get("MLFLOW_TRACKING_URI") or tracking_uri
    if track is None:
        local = uri.startswith("sqlite:///") and Path(uri.removeprefix("sqlite:///")).is_file()
        track = bool(os.environ.get("MLFLOW_TRACKING_URI")) or local
    return MlflowTracker(uri, "acesql") if track else NullTracker()


def _log_evaluation(tracker, summary: dict, split: str, out: str | None) -> None:
    """The evaluate stage's metric keys and, from a result folder, its files."""
    from acesql.stages.evaluate import REPORT_FILES, metric_keys

    tracker.log_metrics(metric_keys(summary, split))
    if out is not None and (Path(out) / "metrics.json").is_file():
        for name in REPORT_FILES:
            tracker.log_artifact(Path(out) / name)


def _evaluate_agent(
    model, dataset, split, limit, selection, max_turns, max_new_tokens, batch_size, timeout_s, out
):
    """`acesql eval --format debug`: the agent on DATASET/SPLIT.jsonl (`acesql debug eval`)."""
    import tempfile

    from acesql.cli.debug import run_agent_evaluation

    if selection.method != "greedy":
        raise click.UsageError(
            "debugging tasks are evaluated with one greedy trajectory each: drop --selection"
        )
    tasks_file = Path(dataset) / f"{split}.jsonl"
    if not tasks_file.is_file():
        found = sorted(p.stem for p in Path(dataset).glob("*.jsonl"))
        raise click.UsageError(
            f"no debugging tasks for split {split!r}: {tasks_file} does not exist "
            f"(splits there: {', '.join(found) or 'none'}; `dvc repro debug_data` writes them)"
        )
    options = dict(
        limit=limit,
        max_turns=max_turns,
        max_new_tokens=max_new_tokens,
        batch_size=batch_size,
        timeout_s=timeout_s,
    )
    if out:
        echo_json(run_agent_evaluation(model, tasks_file, Path(out), **options))
        return
    with tempfile.TemporaryDirectory(prefix="acesql-agent-eval-") as scratch:
        echo_json(run_agent_evaluation(model, tasks_file, Path(scratch), **options))
