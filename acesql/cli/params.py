"""`acesql params`: every field of params.yaml, with its default and its meaning."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import click

from acesql.cli.options import echo_json


@click.command("params")
@click.argument("sections", nargs=-1)
@click.option(
    "--file",
    "path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("params.yaml"),
    show_default=True,
    help="The params file to read.",
)
@click.option("--written", is_flag=True, help="Only the fields the file writes.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per field instead.")
def params_command(sections, path, written, as_json):
    """Every field of SECTIONS (all by default): the value the stages run with, the typed
    default, whether the params file writes it (*), and what it means.

    params.yaml writes only what differs from the defaults (and the paths dvc.yaml reads);
    any field listed here may be added to it.
    """
    from acesql.config import Params, load_params
    from acesql.config.describe import describe
    from acesql.config.params import read_params_file

    if not path.is_file():
        raise click.UsageError(f"{path} not found: run from the project folder, or give --file")
    unknown = [name for name in sections if name not in Params.model_fields]
    if unknown:
        raise click.UsageError(
            f"unknown section(s) {unknown}; choose among {list(Params.model_fields)}"
        )
    lines = describe(load_params(path), read_params_file(path))
    lines = [
        line
        for line in lines
        if (not sections or line.name.split(".")[0] in sections) and (line.written or not written)
    ]
    if as_json:
        for line in lines:
            echo_json(asdict(line))
        return
    width = max((len(line.name) for line in lines), default=0)
    for line in lines:
        value = json.dumps(line.value)
        default = "" if line.value == line.default else f" (default {json.dumps(line.default)})"
        mark = "*" if line.written else " "
        click.echo(f"{mark} {line.name:<{width}}  {value}{default}  {line.description}")
