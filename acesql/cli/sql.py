"""`acesql sql`: run, inspect and compare SQL against a SQLite database."""

from __future__ import annotations

import sys

import click

from acesql.cli.options import COUNT, MODES, NON_NEGATIVE, db_option, echo_json, timeout_option
from acesql.sql.sandbox import DEFAULT_MAX_ROWS


@click.group()
def sql():
    """Run, inspect and compare SQL against a SQLite database (sandboxed, read-only)."""


@sql.command("exec")
@db_option
@timeout_option
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
    from acesql.sql.batch_executor import BatchExecutor

    with BatchExecutor(workers=1, timeout_s=timeout_s, max_rows=max_rows) as executor:
        (result,) = executor.execute_many([(db, query)])
    echo_json(result.to_dict())


@sql.command("columns")
@db_option
@click.argument("query")
def sql_columns(db, query):
    """Print the sorted canonical columns (table.column) QUERY uses; exit 1 if it cannot parse."""
    from acesql.errors import SqlParseError
    from acesql.sql.columns import extract_columns
    from acesql.sql.schema import Schema

    schema = Schema.from_sqlite(db, n_samples=0)
    try:
        echo_json(sorted(extract_columns(query, schema)))
    except SqlParseError as exc:
        echo_json({"error": str(exc)})
        sys.exit(1)


@sql.command("match")
@db_option
@click.option("--mode", type=MODES, default="multiset", show_default=True)
@click.option("--pred", required=True, help="Predicted SQL.")
@click.option("--gold", required=True, help="Gold SQL.")
@timeout_option
def sql_match(db, mode, pred, gold, timeout_s):
    """Execute PRED and GOLD and print {"match": ..., "reason": ...}."""
    from acesql.sql.batch_executor import BatchExecutor

    with BatchExecutor(workers=1, timeout_s=timeout_s) as executor:
        (verdict,) = executor.match_many([(db, pred, gold)], mode)
    echo_json(verdict.match.to_dict())


@sql.command("schema")
@db_option
@click.option("--columns", "columns", multiple=True, help="Keep only these table.column ids.")
@click.option(
    "--samples", default=3, show_default=True, type=NON_NEGATIVE, help="Sample values per column."
)
def sql_schema(db, columns, samples):
    """Print the schema as rendered for prompts, whole or pruned to --columns."""
    from acesql.sql.schema import Schema

    schema = Schema.from_sqlite(db, n_samples=samples)
    echo_json({"db_id": schema.db_id, "text": schema.render(columns or None)})
