"""`acesql pool`: ACE-SQL's empirical column-set pool."""

from __future__ import annotations

import click

from acesql.cli.options import echo_json, finite_non_negative, regular_file


@click.group()
def pool():
    """Inspect ACE-SQL's empirical column-set pool."""


@pool.command("replay")
@click.option(
    "--gamma",
    default=0.5,
    show_default=True,
    type=float,
    callback=finite_non_negative,
    help="Decay per update.",
)
@click.option(
    "--events",
    required=True,
    type=click.Path(exists=True, dir_okay=False, allow_dash=True),
    callback=regular_file,
    help='JSON lines {"question": ..., "matched": [[table.column, ...], ...]}; - reads stdin.',
)
def pool_replay(gamma, events):
    """Replay pool events and print each question's weights and targets.

    The first event of a question seeds its pool (the initial rollout); each later one
    multiplies every weight by GAMMA and adds its counts. Prints
    {question: {"weights": [[[cols...], w], ...], "targets": [[cols...], ...]}}.
    """
    from acesql.data.loaders import parse_jsonl
    from acesql.grpo.pool import replay

    with click.open_file(events, encoding="utf-8") as fh:
        parsed = parse_jsonl(fh, events)
    try:
        result = replay(parsed, gamma=gamma)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--gamma") from e
    echo_json(result.to_dict()["questions"])
