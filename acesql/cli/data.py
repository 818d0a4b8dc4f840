"""`acesql data`: make and inspect datasets."""

from __future__ import annotations

from pathlib import Path

import click

from acesql.cli.options import COUNT, build_section, echo_json


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
    type=click.Choice(["tiny", "default", "large", "wide"]),
    default="default",
    show_default=True,
    help="Schema sizes: tiny for CPU runs and tests, large for GPU-scale runs, wide for "
    "BIRD-scale schemas (30-200 columns a database).",
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
@click.option(
    "--force", is_flag=True, help="Replace OUT even when it holds files this command did not write."
)
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
    force,
):
    """Generate SQLite databases, questions and gold SQL (Spider-like layout); print a summary.

    An existing OUT folder is replaced whole, and only once the new dataset is complete; one
    that holds anything but such a dataset is refused unless --force.
    """
    from acesql.config import SynthSection
    from acesql.data.synth.generate import SynthConfig, generate_dataset
    from acesql.staging import replace_dir

    section = build_section(
        SynthSection,
        n_databases=n_databases,
        questions_per_db=questions_per_db,
        profile=profile,
        ood_domains=tuple(d.strip() for d in ood_domains.split(",") if d.strip()),
        dev_fraction=dev_fraction,
        ood_fraction=ood_fraction,
    )
    out_dir = _replaceable(Path(out), force)
    config = SynthConfig(seed=seed, workers=workers, **section.model_dump())
    with replace_dir(out_dir) as new:
        summary = generate_dataset(new, config, progress=progress)
    echo_json(summary)


def _replaceable(out: Path, force: bool) -> Path:
    """`out`, resolved, when `data synth` may replace it whole; BadParameter otherwise: it is
    this folder or holds it, or it holds files of something else than a generated dataset."""
    from acesql.data.loaders import SPLITS

    resolved, here = out.resolve(), Path.cwd().resolve()
    if resolved == here or resolved in here.parents:
        raise click.BadParameter(
            f"{out} is this folder or holds it, and OUT is replaced whole: name a new folder, "
            "such as ./synth",
            param_hint="--out",
        )
    written = {"tables.json", "databases", *(f"{split}.json" for split in SPLITS["synth"])}
    present = resolved.iterdir() if resolved.is_dir() else ()
    others = sorted(p.name for p in present if p.name not in written)
    if others and not force:
        raise click.BadParameter(
            f"{out} holds files a generated dataset has not ({', '.join(others[:3])}"
            f"{', ...' if len(others) > 3 else ''}) and OUT is replaced whole: give a new "
            "folder, or --force to delete them",
            param_hint="--out",
        )
    return resolved


@data.command("prompt-lengths")
@click.argument("split", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--tokenizer",
    default="models/base",
    show_default=True,
    help="Model folder (or hub id) whose tokenizer counts the tokens.",
)
@click.option(
    "--sample-values",
    default=0,
    show_default=True,
    help="Sample values per column (prompt.sample_values).",
)
@click.option("--reasoning/--no-reasoning", default=False, show_default=True)
@click.option(
    "--limit",
    default=2048,
    show_default=True,
    type=COUNT,
    help="Counts the prompts over this many tokens (prompt.max_prompt_tokens).",
)
def data_prompt_lengths(split, tokenizer, sample_values, reasoning, limit):
    """Print the spread (min, median, p90, max) of the full-schema prompt tokens of SPLIT (a
    prepared .jsonl): the retriever's and the generator's with every column."""
    from acesql.data.loaders import read_prepared
    from acesql.data.schemas import SchemaCache
    from acesql.models.base_model import load_tokenizer
    from acesql.models.prompt_lengths import full_schema_prompt_tokens, prompt_length_report
    from acesql.models.prompts import PromptBuilder

    examples = [e for e in read_prepared(split) if e.unusable is None]
    prompts = PromptBuilder(load_tokenizer(tokenizer), reasoning, sample_values)
    tokens = full_schema_prompt_tokens(examples, prompts, SchemaCache(sample_values))
    echo_json({"split": split, "examples": len(examples), **prompt_length_report(tokens, limit)})
