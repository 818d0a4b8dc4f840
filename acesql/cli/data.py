"""`acesql data`: make and inspect datasets."""

from __future__ import annotations

from pathlib import Path

import click

from acesql.cli.options import COUNT, echo_json


@click.group()
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
    echo_json(summary)
