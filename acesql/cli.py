"""The `acesql` command line. Every command prints JSON on stdout; `--help` on each.

acesql sql exec --db DB "SELECT ..."
acesql sql columns --db DB "SELECT ..."
acesql sql match --db DB --mode bird --pred "..." --gold "..."
acesql pool replay --gamma 0.5 --events FILE
acesql evaluate-sql --dataset DIR --format spider --predictions FILE --mode spider
acesql eval --model DIR --dataset DIR --format spider --limit 100 --out results/spider-dev
acesql eval --compare results/dev-sft results/dev-grpo
acesql debug judge --tasks data/debug/dev.jsonl --id shop_0001/3 --fix "UPDATE ..."
acesql ask --model models/grpo --db shop.sqlite "Which customer spent most?"
acesql run                       # the main job (see `acesql run --help`)
"""

from __future__ import annotations

import functools
import json
import math
import os
import sys
import time
from pathlib import Path

import click

from acesql.data.loaders import LOADERS
from acesql.errors import AcesqlError
from acesql.sql.sandbox import DEFAULT_MAX_ROWS, DEFAULT_TIMEOUT_S, check_timeout

MODES = click.Choice(["multiset", "bird", "spider"])
COUNT = click.IntRange(min=1)
NON_NEGATIVE = click.IntRange(min=0)


def _json(obj) -> str:
    """One line of JSON; text that UTF-8 cannot encode (a lone surrogate, which a `\\ud800`
    escape in a predictions file gives) is written as `\\u` escapes instead of crashing."""
    text = json.dumps(obj, ensure_ascii=False, default=str)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(obj, ensure_ascii=True, default=str)
    return text


def _print(obj) -> None:
    click.echo(_json(obj))


def _regular_file(ctx, param, value):
    # click.Path(exists=True) lets a FIFO through, and opening one blocks until a writer comes
    if value is not None and value != "-" and not os.path.isfile(value):
        raise click.BadParameter(f"{value!r} is not a regular file.")
    return value


def _db_option(f):
    return click.option(
        "--db",
        "db",
        required=True,
        type=click.Path(exists=True, dir_okay=False),
        callback=_regular_file,
        help="SQLite database file.",
    )(f)


def _timeout(ctx, param, value):
    try:
        return check_timeout(value)  # NaN, infinity or <= 0 would break the deadline
    except AcesqlError as exc:
        raise click.BadParameter(str(exc)) from None


def _timeout_option(f):
    return click.option(
        "--timeout",
        "timeout_s",
        default=DEFAULT_TIMEOUT_S,
        show_default=True,
        type=float,
        callback=_timeout,
        help="Seconds before SQLite is interrupted.",
    )(f)


def _finite_non_negative(ctx, param, value):
    # click.FloatRange lets NaN through: every comparison with NaN is false
    if value is not None and not (math.isfinite(value) and value >= 0):
        raise click.BadParameter(f"{value} is not a finite number >= 0.")
    return value


def _section(section_class, **values):
    """A params section built from command-line values; a rule it breaks is a usage error."""
    from pydantic import ValidationError

    try:
        return section_class(**values)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise click.UsageError(problems) from None


def _selection_options(default_method: str):
    """The `selection` params section as flags (`acesql eval`, `acesql ask`), handed to the
    command as one `selection` argument: `--selection-params FILE`'s section when given, else
    the defaults with `default_method`, each flag given overriding."""
    options = [
        click.option(
            "--selection",
            "method",
            type=click.Choice(["greedy", "maj", "r3", "prm"]),
            default=None,
            help=f"How the answer is chosen among the candidates: the greedy answer, maj@n, "
            f"R3-SQL's groupwise ranking, or PRM best-of-n (Chain-of-CTE candidates, the "
            f"score model of --prm-model).  [default: {default_method}]",
        ),
        click.option(
            "--candidates",
            type=click.IntRange(2),
            default=None,
            help="n: generator samples.  [default: 8]",
        ),
        click.option(
            "--temperature",
            type=float,
            default=None,
            callback=_finite_non_negative,
            help="Sampling temperature of the candidates.  [default: 1.0]",
        ),
        click.option(
            "--resample/--no-resample",
            default=None,
            help="r3: draw more candidates when the auditor finds no likely-correct SQL.",
        ),
        click.option(
            "--resample-candidates",
            type=COUNT,
            default=None,
            help="r3 resampling: new samples, more than --candidates.  [default: 16]",
        ),
        click.option(
            "--prm-model",
            type=click.Path(file_okay=False),
            default=None,
            help="prm: the trajectory score model.  [default: models/prm]",
        ),
        click.option(
            "--selection-params",
            type=click.Path(dir_okay=False),
            callback=_regular_file,
            help="Start from this params file's `selection` section.",
        ),
    ]

    def wrap(f):
        @functools.wraps(f)
        def command(*args, **kwargs):
            flags = {name: kwargs.pop(name) for name in SELECTION_FLAGS}
            kwargs["selection"] = _selection(default_method, **flags)
            return f(*args, **kwargs)

        for option in reversed(options):
            command = option(command)
        return command

    return wrap


SELECTION_FLAGS = (
    "method",
    "candidates",
    "temperature",
    "resample",
    "resample_candidates",
    "prm_model",
    "selection_params",
)


def _selection(default_method: str, selection_params, **flags):
    """The SelectionSection the flags of `_selection_options` describe."""
    from acesql.config import SelectionSection, load_section

    if selection_params:
        base = load_section(selection_params, "selection").model_dump()
    else:
        base = {"method": default_method}
    given = {k: v for k, v in flags.items() if v is not None}
    return _section(SelectionSection, **{**base, **given})


def _model_folder(ctx, param, value):
    # a path that does not exist would otherwise be looked up on the hub, slowly and with a
    # confusing error; a bare name (no slash, no leading dot) may still be a hub id
    looks_like_path = value is not None and ("/" in value or os.sep in value or value[:1] in ".~")
    if looks_like_path and not os.path.isdir(os.path.expanduser(value)):
        raise click.BadParameter(f"no such model folder: {value}")
    return value


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="acesql")
def cli():
    """acesql: ACE-SQL text-to-SQL training, evaluation and tools."""


# ----------------------------------------------------------------------- sql
@cli.group()
def sql():
    """Run, inspect and compare SQL against a SQLite database (sandboxed, read-only)."""


@sql.command("exec")
@_db_option
@_timeout_option
@click.option(
    "--max-rows",
    default=DEFAULT_MAX_ROWS,
    show_default=True,
    type=COUNT,
    help="Rows kept from the result.",
)
@click.argument("query")
def sql_exec(db, timeout_s, max_rows, query):
    """Execute QUERY and print the result object (exit 0 even when the SQL fails).

    A BLOB value prints as {"blob": "<hex>"}, an infinite REAL as {"real": "inf"}.
    """
    from acesql.sql.sandbox import execute

    _print(execute(db, query, timeout_s=timeout_s, max_rows=max_rows).to_dict())


@sql.command("columns")
@_db_option
@click.argument("query")
def sql_columns(db, query):
    """Print the sorted canonical columns (table.column) QUERY uses; exit 1 if it cannot parse."""
    from acesql.errors import SqlParseError
    from acesql.sql.columns import extract_columns
    from acesql.sql.schema import Schema

    schema = Schema.from_sqlite(db, n_samples=0)
    try:
        _print(sorted(extract_columns(query, schema)))
    except SqlParseError as exc:
        _print({"error": str(exc)})
        sys.exit(1)


@sql.command("match")
@_db_option
@click.option("--mode", type=MODES, default="multiset", show_default=True)
@click.option("--pred", required=True, help="Predicted SQL.")
@click.option("--gold", required=True, help="Gold SQL.")
@_timeout_option
def sql_match(db, mode, pred, gold, timeout_s):
    """Execute PRED and GOLD and print {"match": ..., "reason": ...}."""
    from acesql.sql.columns import has_order_by
    from acesql.sql.matching import execution_match
    from acesql.sql.sandbox import execute

    result = execution_match(
        execute(db, pred, timeout_s=timeout_s),
        execute(db, gold, timeout_s=timeout_s),
        mode,
        ordered=has_order_by(gold),
    )
    _print(result.to_dict())


@sql.command("schema")
@_db_option
@click.option("--columns", "columns", multiple=True, help="Keep only these table.column ids.")
@click.option(
    "--samples", default=3, show_default=True, type=NON_NEGATIVE, help="Sample values per column."
)
def sql_schema(db, columns, samples):
    """Print the schema as rendered for prompts, whole or pruned to --columns."""
    from acesql.sql.schema import Schema

    schema = Schema.from_sqlite(db, n_samples=samples)
    _print({"db_id": schema.db_id, "text": schema.render(columns or None)})


# ---------------------------------------------------------------------- data
@cli.group()
def data():
    """Make and inspect datasets."""


@data.command("synth")
@click.option("--out", required=True, type=click.Path(file_okay=False), help="Output folder.")
@click.option(
    "--dbs", "n_databases", default=50, show_default=True, type=COUNT, help="Databases in all."
)
@click.option("--questions-per-db", default=40, show_default=True, type=COUNT)
@click.option("--seed", default=0, show_default=True)
@click.option(
    "--profile",
    type=click.Choice(["tiny", "default", "large"]),
    default="default",
    show_default=True,
    help="Schema sizes: tiny for CPU runs and tests, large for GPU-scale runs.",
)
@click.option(
    "--ood-domains",
    default="hotel,agriculture,energy_utility",
    show_default=True,
    help="Comma-separated domains held out of train for test_ood.",
)
@click.option("--dev-fraction", default=0.1, show_default=True)
@click.option("--ood-fraction", default=0.1, show_default=True)
@click.option(
    "--workers", default=1, show_default=True, type=COUNT, help="Processes building databases."
)
@click.option("--progress/--no-progress", default=True, show_default=True)
def data_synth(
    out,
    n_databases,
    questions_per_db,
    seed,
    profile,
    ood_domains,
    dev_fraction,
    ood_fraction,
    workers,
    progress,
):
    """Generate SQLite databases, questions and gold SQL (Spider-like layout); print a summary.

    An existing OUT folder is replaced whole, and only once the new dataset is complete.
    """
    from acesql.data.synth.generate import SynthConfig, generate_dataset
    from acesql.staging import replace_dir

    config = SynthConfig(
        n_databases=n_databases,
        questions_per_db=questions_per_db,
        seed=seed,
        profile=profile,
        ood_domains=tuple(d.strip() for d in ood_domains.split(",") if d.strip()),
        dev_fraction=dev_fraction,
        ood_fraction=ood_fraction,
        workers=workers,
    )
    with replace_dir(Path(out)) as new:
        summary = generate_dataset(new, config, progress=progress)
    _print(summary)


# ---------------------------------------------------------------- evaluation
@cli.command("evaluate-sql")
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
    callback=_regular_file,
    help='JSON lines {"index": i, "sql": ...} or BIRD predict_dev.json.',
)
@click.option("--mode", type=MODES, default="multiset", show_default=True)
@click.option(
    "--workers",
    type=NON_NEGATIVE,
    default=None,
    help="SQL worker processes [one per core]; 0: in this process.",
)
@_timeout_option
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
        _write_jsonl(out, rows)
    _print(summary)
    if not summary["usable"]:
        raise DataError(
            f"nothing scorable: none of the {summary['n']} questions of {dataset} has a usable "
            f"gold query ({summary['unusable']})"
        )


DEFAULT_MODE = {"spider": "spider", "bird": "bird", "synth": "multiset", "synsql": "multiset"}


@cli.command("eval")
@click.option(
    "--model", callback=_model_folder, help="Model folder (or models/base with its redirect)."
)
@click.option("--dataset", type=click.Path(exists=True, file_okay=False))
@click.option("--format", "fmt", type=click.Choice(sorted(DEFAULT_MODE)))
@click.option("--split", default="dev", show_default=True)
@click.option("--limit", type=COUNT, default=None, help="Questions, spread over databases.")
@click.option("--mode", type=MODES, default=None, help="Match mode [by format].")
@click.option(
    "--retriever-samples",
    default=1,
    show_default=True,
    type=COUNT,
    help="1: greedy retriever; n: n samples voted.",
)
@click.option(
    "--on-empty-vote",
    type=click.Choice(["empty", "full_schema"]),
    default="empty",
    show_default=True,
    help="When the retriever selects no column: an empty schema (the paper) or the whole one.",
)
@_selection_options("greedy")
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
    help="transformers engine: bf16 matrix products on fp32 weights [where the hardware "
    "computes bf16 natively].",
)
@click.option("--seed", default=0, show_default=True)
@_timeout_option
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
    "--compare",
    nargs=2,
    metavar="RUN_A RUN_B",
    help="Instead of evaluating: compare two evaluations (result folders or MLflow run ids); "
    "with per-question rows on both sides, also B - A on the same questions with a 95% "
    "bootstrap interval and the exact McNemar p-value.",
)
@click.option(
    "--tracking-uri",
    default="sqlite:///mlflow.db",
    show_default=True,
    help="MLflow store that --compare looks run ids up in.",
)
def evaluate_model(
    model,
    dataset,
    fmt,
    split,
    limit,
    mode,
    retriever_samples,
    on_empty_vote,
    selection,
    reasoning,
    sample_values,
    sql_format,
    engine,
    batch_size,
    max_new_tokens,
    bf16,
    seed,
    timeout_s,
    out,
    chunk_size,
    compare,
    tracking_uri,
):
    """Evaluate MODEL in both roles on a dataset split and print the metrics.

    Greedy pipeline EX, generator ability, retriever scores, non-gold ratio and tokens, per
    complexity; with --selection maj also maj@n and candidate recall, with r3 also pointwise
    best-of-n and groupwise ranking on the same n candidates. With --out, also per-question
    rows, BIRD-format predictions and an HTML report. With --compare A B, print a
    side-by-side table of two evaluations and, per split, their paired difference on the
    questions both scored.

    The flags build the `evaluate` params section and run the evaluate stage's code
    (acesql.eval.session), so a folder this command leaves unfinished resumes by either.
    """
    if compare:
        # a bar per downloaded rows file would bury the table
        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
        from acesql.eval.compare import (
            compare_table,
            load_evaluation,
            load_rows,
            paired_table,
            unfinished_note,
        )

        left, right = (load_evaluation(c, tracking_uri) for c in compare)
        for note in filter(None, map(unfinished_note, compare)):
            click.echo(note)
        click.echo(compare_table(left, right, *compare))
        paired = paired_table(*(load_rows(c, tracking_uri) for c in compare))
        click.echo(paired or "\n(no per-question rows on both sides: no paired intervals)")
        return
    missing = [
        o for o, v in (("--model", model), ("--dataset", dataset), ("--format", fmt)) if not v
    ]
    if missing:
        raise click.UsageError(f"missing {', '.join(missing)} (or use --compare A B)")
    from acesql.config import EvaluateSection, GenerationSection
    from acesql.data.filtering import filter_examples
    from acesql.data.loaders import load_dataset
    from acesql.eval.session import Evaluator

    # the `evaluate` params section, so the stage and this command evaluate alike
    cfg = _section(
        EvaluateSection,
        model=model,
        splits=[split],
        limit=limit,
        retriever_samples=retriever_samples,
        on_empty_vote=on_empty_vote,
        timeout_s=timeout_s,
        match_mode=mode or DEFAULT_MODE[fmt],
        generation=GenerationSection(
            engine=engine,
            batch_size=batch_size,
            max_new_tokens=max_new_tokens,
            temperature=0.0,
            bf16_autocast="auto" if bf16 is None else bf16,
        ),
    )
    examples = load_dataset(dataset, fmt, split).examples
    examples = filter_examples(examples, max_examples=limit, seed=seed)
    with Evaluator(
        cfg,
        selection,
        seed=seed,
        reasoning=reasoning,
        sample_values=sample_values,
        sql_format=sql_format,
    ) as evaluator:
        summary = evaluator.evaluate(
            examples, dataset=dataset, split=split, out=out, chunk_size=chunk_size
        )
    _print(summary)


@cli.command("metrics")
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
    carries), read from the JSON outputs dvc.lock records for each stage: the narrow view of
    what `dvc metrics show` prints as one very wide row per file.
    """
    from acesql.stages.headlines import pipeline_numbers

    if not lock.is_file():
        raise click.UsageError(f"{lock} not found: run the pipeline first (make run, dvc repro)")
    numbers = pipeline_numbers(lock, lock.parent, every)
    if as_json:
        _print(numbers)
        return
    if not numbers:
        click.echo(f"no stage of {lock} has written its outputs here yet")
        return
    width = max(len(key) for stage in numbers.values() for key in stage)
    for stage, values in numbers.items():
        for key, value in values.items():
            shown = int(value) if value.is_integer() else f"{value:.4g}"
            click.echo(f"{stage:<12}{key:<{width + 2}}{shown}")


@cli.command("run")
@click.option(
    "--spider",
    type=click.Path(),
    default="../shared/data/spider",
    show_default=True,
    help="Spider folder; the built-in sample dataset is used when it is absent.",
)
@click.option(
    "--out", type=click.Path(file_okay=False), default="results/sql-eval", show_default=True
)
@click.option(
    "--workers",
    type=NON_NEGATIVE,
    default=None,
    help="SQL worker processes [one per core]; 0: in this process.",
)
def run(spider, out, workers):
    """The main job: score the gold SQL of a dataset as predictions in every match mode.

    A self-check of the SQL engine on real data: every usable example must match.
    """
    from acesql.data.loaders import load_dataset
    from acesql.data.sample import build_sample_dataset
    from acesql.eval.sql_eval import evaluate_predictions
    from acesql.sql.batch_executor import BatchExecutor

    out = Path(out)
    root = Path(spider)
    if not (root / "tables.json").is_file():
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
            _write_jsonl(out / f"gold-{mode}.jsonl", rows)
    (out / "summary.json").write_text(json.dumps(report, indent=2))
    _print(report)


# ----------------------------------------------------------------------- pool
@cli.group()
def pool():
    """Inspect ACE-SQL's empirical column-set pool."""


@pool.command("replay")
@click.option(
    "--gamma",
    default=0.5,
    show_default=True,
    type=float,
    callback=_finite_non_negative,
    help="Decay per update.",
)
@click.option(
    "--events",
    required=True,
    type=click.Path(exists=True, dir_okay=False, allow_dash=True),
    callback=_regular_file,
    help='JSON lines {"question": ..., "matched": [[table.column, ...], ...]}; - reads stdin.',
)
def pool_replay(gamma, events):
    """Replay pool events and print each question's weights and targets.

    The first event of a question seeds its pool (the initial rollout); each later one
    multiplies every weight by GAMMA and adds its counts. Prints
    {question: {"weights": [[[cols...], w], ...], "targets": [[cols...], ...]}}.
    """
    from acesql.data.loaders import parse_jsonl
    from acesql.rl.pool import replay

    with click.open_file(events) as fh:
        parsed = parse_jsonl(fh, events)
    try:
        result = replay(parsed, gamma=gamma)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--gamma") from e
    _print(result.to_dict()["questions"])


# ------------------------------------------------------------------ artifacts
def _store_options(f):
    f = click.option(
        "--params",
        "params_path",
        default="params.yaml",
        show_default=True,
        help="Params file read for the store when --store is not given.",
    )(f)
    f = click.option(
        "--endpoint-url",
        help="S3-compatible endpoint [base.s3_endpoint_url, then $AWS_ENDPOINT_URL].",
    )(f)
    return click.option(
        "--store", help="A folder or s3://bucket/prefix [base.artifact_store of --params]."
    )(f)


def _open_store(store, endpoint_url, params_path):
    from acesql.config import load_section
    from acesql.storage import open_store

    if store is None:
        base = load_section(params_path, "base")
        store, endpoint_url = base.artifact_store, endpoint_url or base.s3_endpoint_url
    return open_store(store, endpoint_url)


@cli.group()
def artifacts():
    """Copy pool snapshots, checkpoints and reports to and from the artifact store."""


@artifacts.command("put")
@_store_options
@click.argument("local", type=click.Path(exists=True))
@click.argument("key")
def artifacts_put(store, endpoint_url, params_path, local, key):
    """Upload LOCAL as KEY (a folder: every file under it, as KEY/...); print what was stored."""
    from dataclasses import asdict

    target = _open_store(store, endpoint_url, params_path)
    if Path(local).is_dir():
        objects = target.upload_dir(local, key)
    else:
        objects = [target.upload(local, key)]
    _print({"store": target.url, "objects": [asdict(o) for o in objects]})


@artifacts.command("get")
@_store_options
@click.argument("key")
@click.argument("local", type=click.Path())
def artifacts_get(store, endpoint_url, params_path, key, local):
    """Download KEY to LOCAL, checksum-verified (a folder KEY: everything under it)."""
    from dataclasses import asdict

    source = _open_store(store, endpoint_url, params_path)
    if source.exists(key):
        objects = [source.download(key, local)]
    else:
        objects = source.download_dir(key, local)
    _print({"store": source.url, "objects": [asdict(o) for o in objects]})


@artifacts.command("ls")
@_store_options
@click.argument("prefix", default="")
def artifacts_ls(store, endpoint_url, params_path, prefix):
    """Print the keys that start with PREFIX (all keys without it)."""
    source = _open_store(store, endpoint_url, params_path)
    _print({"store": source.url, "keys": source.list(prefix)})


# --------------------------------------------------------------------- remote
@cli.group()
def remote():
    """The DVC remote on S3 that `dvc push` and `dvc pull` use."""


@remote.command("setup")
@click.option("--url", help="s3://bucket/prefix [base.dvc_remote, then $ACESQL_DVC_REMOTE].")
@click.option(
    "--endpoint-url",
    help="S3-compatible endpoint [base.s3_endpoint_url, then $AWS_ENDPOINT_URL].",
)
@click.option("--name", default="storage", show_default=True, help="The remote's name.")
@click.option("--repo", default=".", show_default=True, help="The DVC project's folder.")
@click.option(
    "--params",
    "params_path",
    default="params.yaml",
    show_default=True,
    help="Params file read for the remote when --url is not given.",
)
def remote_setup(url, endpoint_url, name, repo, params_path):
    """Make the S3 remote the project's default, in .dvc/config.local (ignored by git)."""
    from acesql.config import load_section
    from acesql.remote import remote_url, setup_remote
    from acesql.storage import resolve_endpoint

    if url is None:
        base = load_section(params_path, "base")
        url, endpoint_url = base.dvc_remote, endpoint_url or base.s3_endpoint_url
    _print(setup_remote(repo, remote_url(url), resolve_endpoint(endpoint_url), name))


# ------------------------------------------------------------------------ ask
@cli.command("ask")
@click.option("--model", required=True, type=click.Path(exists=True), help="Model folder.")
@click.option("--db", "db", required=True, type=click.Path(), help="Any SQLite file (read only).")
@_selection_options("r3")
@click.option("--mode", type=MODES, default="multiset", show_default=True, help="Result equality.")
@click.option("--sample-values", default=0, show_default=True, type=NON_NEGATIVE)
@click.option("--max-new-tokens", default=256, show_default=True, type=COUNT)
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
    from acesql.agent.observation import render_observation
    from acesql.models.engine import load_engine
    from acesql.models.prompts import PromptBuilder
    from acesql.ranking.ask import ask, open_schema

    open_schema(db)  # a missing or foreign file fails before the model loads
    engine = load_engine("transformers", model, progress=False)
    try:
        sql_format = "cocte" if selection.method == "prm" else "direct"
        prompts = PromptBuilder(engine.tokenizer, False, sample_values, sql_format)
        answer = ask(
            engine,
            prompts,
            db,
            question,
            selection,
            process_scorer=_process_scorer(selection, engine),
            mode=mode,
            max_new_tokens=max_new_tokens,
        )
    finally:
        engine.close()
    if as_json:
        _print(
            {
                "sql": answer.sql,
                "result": answer.result.to_dict() if answer.result else None,
                "columns": answer.columns,
                "resampled": answer.resampled,
                **({"candidates": answer.candidates, "groups": answer.groups} if explain else {}),
            }
        )
    else:
        if explain:
            click.echo(f"retrieved columns: {', '.join(answer.columns) or '(none)'}")
            for i, (sql, result) in enumerate(zip(answer.candidates, answer.results)):
                state = "ok" if result.ok else f"error: {result.error}"
                click.echo(f"candidate {i} [{state}]: {sql or '(no SQL)'}")
            if answer.resampled:
                click.echo("the auditor found no likely-correct SQL: more candidates were drawn")
            for rank, group in enumerate(answer.groups, 1):
                click.echo(f"group {rank}: {_json(group)}")
        if answer.sql is None:
            click.echo("no answer: none of the candidate queries ran", err=True)
        else:
            click.echo(answer.sql)
            click.echo(render_observation(answer.result, max_rows=max_rows))
    if answer.sql is None:
        sys.exit(1)


def _process_scorer(selection, engine):
    """The prm selection's scorer (its own model, in-process SQL), or None for the others."""
    if selection.method != "prm":
        return None
    from acesql.prm.model import TrajectoryScorer
    from acesql.prm.select import ProcessScorer
    from acesql.sql.batch_executor import BatchExecutor

    if not os.path.isdir(selection.prm_model):
        raise click.UsageError(
            f"--prm-model: no such folder {selection.prm_model} (run the prm stage)"
        )
    scorer = TrajectoryScorer.load(selection.prm_model)
    return ProcessScorer(scorer, engine.tokenizer, BatchExecutor(workers=0))


# ---------------------------------------------------------------------- debug
@cli.group()
def debug():
    """SQL debugging tasks: judge a fix, read BIRD-CRITIC's format, look at tasks."""


def _find_task(tasks_file, task_id):
    from acesql.debug.task import read_tasks

    tasks = read_tasks(tasks_file)
    found = next((t for t in tasks if t.task_id == task_id), None)
    if found is None:
        raise click.BadParameter(
            f"no task {task_id!r} in {tasks_file} ({len(tasks)} tasks)", param_hint="--id"
        )
    return found


@debug.command("judge")
@click.option("--tasks", "tasks_file", required=True, type=click.Path(), help="Tasks JSONL.")
@click.option("--id", "task_id", required=True, help="The task's task_id.")
@click.option("--fix", help="The fix: one or more SQL statements.")
@click.option("--fix-file", type=click.Path(), callback=_regular_file, help="The fix, from a file.")
@click.option("--timeout", "timeout_s", default=10.0, show_default=True, help="Per statement (s).")
def debug_judge(tasks_file, task_id, fix, fix_file, timeout_s):
    """Run a fix beside the task's solution (never on the database itself); print the verdict."""
    import tempfile

    from acesql.debug.judge import judge
    from acesql.sql.replicas import ReplicaPool

    if (fix is None) == (fix_file is None):
        raise click.UsageError("give exactly one of --fix and --fix-file")
    task = _find_task(tasks_file, task_id)
    text = fix if fix is not None else Path(fix_file).read_text(encoding="utf-8")
    with (
        tempfile.TemporaryDirectory(prefix="acesql-replicas-") as scratch,
        ReplicaPool(scratch, timeout_s=check_timeout(timeout_s)) as pool,
    ):
        _print({"task_id": task.task_id, **judge(task, text, pool).to_dict()})


@debug.command("show")
@click.option("--tasks", "tasks_file", required=True, type=click.Path(), help="Tasks JSONL.")
@click.option("--id", "task_id", help="One task (else a count by category and bug).")
def debug_show(tasks_file, task_id):
    """Print one task whole, or what a tasks file holds."""
    from collections import Counter

    from acesql.debug.task import read_tasks

    if task_id is not None:
        _print(_find_task(tasks_file, task_id).to_dict())
        return
    tasks = read_tasks(tasks_file)
    _print(
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
    tokens. Resumes from OUT/rows.jsonl; prints the metrics."""
    import tempfile

    from tqdm import tqdm

    from acesql.agent.evaluate import evaluate_agent, spread
    from acesql.debug.task import read_tasks
    from acesql.models.base_model import load_tokenizer
    from acesql.models.engine import load_engine
    from acesql.sql.replicas import ReplicaPool

    tasks = spread(read_tasks(tasks_file), limit)
    engine = load_engine("transformers", model, batch_size=batch_size, progress=False)
    bar = tqdm(total=len(tasks), desc="agent", unit="task", file=sys.stderr)
    try:
        with (
            tempfile.TemporaryDirectory(prefix="acesql-replicas-") as scratch,
            ReplicaPool(scratch, timeout_s=check_timeout(timeout_s)) as pool,
        ):
            metrics = evaluate_agent(
                engine,
                load_tokenizer(model),
                tasks,
                pool,
                Path(out),
                max_turns=max_turns,
                max_new_tokens=max_new_tokens,
                chunk=batch_size,
                progress=bar.update,
            )
    finally:
        bar.close()
        engine.close()
    _print(metrics)


@debug.command("compare")
@click.argument("a", type=click.Path(exists=True, file_okay=False))
@click.argument("b", type=click.Path(exists=True, file_okay=False))
def debug_compare(a, b):
    """Two agent evaluations paired on the tasks both scored: B - A overall and per category,
    with a 95% bootstrap interval and the exact McNemar p-value."""
    from acesql.agent.evaluate import compare, read_rows

    _print(compare(read_rows(a), read_rows(b)))


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
    _print({"out": out, "tasks": len(tasks), "skipped": dict(skipped)})


def _write_jsonl(path, rows) -> None:
    """Write rows as JSON lines, whole or not at all (a temporary file renamed into place)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(_json(row) + "\n")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except AcesqlError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
