"""The `acesql` command line. Every command prints JSON on stdout; `--help` on each.

acesql sql exec --db DB "SELECT ..."
acesql sql columns --db DB "SELECT ..."
acesql sql match --db DB --mode bird --pred "..." --gold "..."
acesql pool replay --gamma 0.5 --events FILE
acesql evaluate-sql --dataset DIR --format spider --predictions FILE --mode spider
acesql eval run --model DIR --dataset DIR --format spider --limit 100 --out results/spider-dev
acesql eval compare results/dev-sft results/dev-grpo
acesql debug check --tasks data/debug/dev.jsonl --id shop_0001/3 --fix "UPDATE ..."
acesql ask --model models/grpo --db shop.sqlite "Which customer spent most?"
acesql serve log --model models/grpo --register acesql-serve   # for `mlflow models serve`
acesql check-gold-sql            # the SQL engine's self-check on Spider dev's gold SQL
acesql params sft                # every field of a section: value, default, meaning

One module per command family: options.py holds what they share. Heavy imports stay inside
the commands, so that `acesql --help` starts fast.
"""

from __future__ import annotations

import signal
import sys

import click

from acesql.cli import ask, data, debug, evaluate, params, pool, scoring, serve, sql, storage
from acesql.errors import AcesqlError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="acesql")
def cli():
    """acesql: ACE-SQL text-to-SQL training, evaluation and tools."""


cli.add_command(sql.sql)
cli.add_command(data.data)
cli.add_command(scoring.evaluate_sql)
cli.add_command(evaluate.evaluate_group)
cli.add_command(scoring.metrics)
cli.add_command(scoring.run)
cli.add_command(  # the self-check's old name, said to be the main job
    click.Command(
        "run",
        callback=scoring.run.callback,
        params=scoring.run.params,
        help="The old name of `acesql check-gold-sql`.",
        hidden=True,
        deprecated="Use `acesql check-gold-sql`: the same check (the main job is `make run`).",
    )
)
cli.add_command(pool.pool)
cli.add_command(params.params_command)
cli.add_command(storage.artifacts)
cli.add_command(storage.remote)
cli.add_command(ask.ask_command)
cli.add_command(serve.serve)
cli.add_command(debug.debug)


def main() -> None:
    # SIGTERM unwinds a command like Ctrl-C, so that its temporary folders (a fix check's
    # replicas) and child processes go with it, as a stage's do (acesql.stages.common)
    signal.signal(signal.SIGTERM, _interrupted)
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


def _interrupted(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")
