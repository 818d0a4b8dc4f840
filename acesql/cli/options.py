"""What the commands share: option types and callbacks, the `selection` flags, JSON output."""

from __future__ import annotations

import functools
import json
import math
import os
import typing
from pathlib import Path

import click

from acesql.config.evaluation import SelectionSection
from acesql.config.section import AnswerPolicy
from acesql.errors import AcesqlError
from acesql.sql.sandbox import DEFAULT_TIMEOUT_S, check_timeout

MODES = click.Choice(["multiset", "bird", "spider"])
COUNT = click.IntRange(min=1)
NON_NEGATIVE = click.IntRange(min=0)


def json_line(obj) -> str:
    """One line of JSON; text that UTF-8 cannot encode (a lone surrogate, which a `\\ud800`
    escape in a predictions file gives) is written as `\\u` escapes instead of crashing."""
    text = json.dumps(obj, ensure_ascii=False, default=str)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(obj, ensure_ascii=True, default=str)
    return text


def echo_json(obj) -> None:
    click.echo(json_line(obj))


def regular_file(ctx, param, value):
    # click.Path(exists=True) lets a FIFO through, and opening one blocks until a writer comes
    if value is not None and value != "-" and not os.path.isfile(value):
        raise click.BadParameter(f"{value!r} is not a regular file.")
    return value


def db_option(f):
    return click.option(
        "--db",
        "db",
        required=True,
        type=click.Path(exists=True, dir_okay=False),
        callback=regular_file,
        help="SQLite database file.",
    )(f)


def _timeout(ctx, param, value):
    try:
        return check_timeout(value)  # NaN, infinity or <= 0 would break the deadline
    except AcesqlError as exc:
        raise click.BadParameter(str(exc)) from None


def timeout_option(f):
    return click.option(
        "--timeout",
        "timeout_s",
        default=DEFAULT_TIMEOUT_S,
        show_default=True,
        type=float,
        callback=_timeout,
        help="Seconds before SQLite is interrupted.",
    )(f)


def finite_non_negative(ctx, param, value):
    # click.FloatRange lets NaN through: every comparison with NaN is false
    if value is not None and not (math.isfinite(value) and value >= 0):
        raise click.BadParameter(f"{value} is not a finite number >= 0.")
    return value


def build_section(section_class, **values):
    """A params section built from command-line values; a rule it breaks is a usage error."""
    from pydantic import ValidationError

    try:
        return section_class(**values)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise click.UsageError(problems) from None


def selection_options(default_method: str):
    """The `selection` params section as flags (`acesql eval`, `acesql ask`), handed to the
    command as one `selection` argument: `--selection-params FILE`'s section when given, else
    the defaults with `default_method`, each flag given overriding."""
    options = _candidate_flags(default_method) + _resample_flags() + _answer_flags()

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


def _candidate_flags(default_method: str) -> list:
    """--selection, --candidates, --temperature."""
    return [
        click.option(
            "--selection",
            "method",
            type=click.Choice(["greedy", "maj", "r3", "prm"]),
            default=None,
            help=f"How the answer is chosen among the candidates: the greedy answer, maj@n, "
            f"R3-SQL's groupwise ranking, or PRM best-of-n (the score model of --prm-model; "
            f"candidates written as it was trained to read: chains, or plain SQL).  "
            f"[default: {default_method}]",
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
            callback=finite_non_negative,
            help="Sampling temperature of the candidates.  [default: 1.0]",
        ),
    ]


def _resample_flags() -> list:
    """r3's resampling when the auditor fires."""
    return [
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
            "--resample-from",
            type=click.Choice(["generator", "pipeline"]),
            default=None,
            help="r3 resampling: more generator samples on the same pruned schema, or samples "
            "of the whole pipeline (each on its own sampled retriever list).  [default: "
            "generator]",
        ),
        click.option(
            "--resample-ranked",
            type=click.Choice(["new", "both"]),
            default=None,
            help="r3 resampling: rank the n best of the new candidates, or of old and new "
            "together.  [default: new]",
        ),
        click.option(
            "--resample-pool",
            type=click.Choice(["new", "both"]),
            default=None,
            hidden=True,
            callback=_deprecated("--resample-pool", "--resample-ranked"),
            help="The old name of --resample-ranked.",
        ),
        click.option(
            "--audit-threshold",
            type=click.FloatRange(0, 1, min_open=True, max_open=True),
            default=None,
            help="r3 resampling: the auditor's P(a likely-correct SQL is present) under which "
            "it fires.  [default: 0.5]",
        ),
    ]


def _deprecated(old: str, new: str):
    """A click callback that says, when `old` is given, that it is now `new`."""

    def say(ctx, param, value):
        if value is not None:
            click.echo(f"{old} is now {new}; the old name will go in a later release", err=True)
        return value

    return say


# the defaults the help shows, read from the section so they cannot drift from what runs
_SELECTION_DEFAULTS = {name: f.default for name, f in SelectionSection.model_fields.items()}


def _answer_flags() -> list:
    """The PRM scorer, the shipped answer's policy, and a params file to start from."""
    return [
        click.option(
            "--prm-model",
            type=click.Path(file_okay=False),
            default=None,
            help="prm: the trajectory score model.  [default: models/prm]",
        ),
        click.option(
            "--answer",
            type=click.Choice(typing.get_args(AnswerPolicy)),
            default=None,
            help="Which answer is the product's: the pipeline's, the generator's on the full "
            "schema, or a rule per question (choose it on dev: acesql eval answers).  "
            f"[default: {_SELECTION_DEFAULTS['answer']}]",
        ),
        click.option(
            "--full-schema-tokens",
            type=COUNT,
            default=None,
            help="--answer by_size: the longest full-schema prompt answered whole.  "
            f"[default: {_SELECTION_DEFAULTS['full_schema_tokens']}]",
        ),
        click.option(
            "--selection-params",
            type=click.Path(dir_okay=False),
            callback=regular_file,
            help="Start from this params file's `selection` section.",
        ),
    ]


SELECTION_FLAGS = (
    "method",
    "candidates",
    "temperature",
    "resample",
    "resample_candidates",
    "resample_from",
    "resample_ranked",
    "resample_pool",
    "audit_threshold",
    "prm_model",
    "answer",
    "full_schema_tokens",
    "selection_params",
)


def _selection(default_method: str, selection_params, **flags):
    """The SelectionSection the flags of `selection_options` describe."""
    from acesql.config import SelectionSection, load_section

    if selection_params:
        base = load_section(selection_params, "selection").model_dump()
    else:
        base = {"method": default_method}
    given = {k: v for k, v in flags.items() if v is not None}
    if "resample_pool" in given:  # the old spelling of --resample-ranked
        given.setdefault("resample_ranked", given.pop("resample_pool"))
    return build_section(SelectionSection, **{**base, **given})


def model_folder(ctx, param, value):
    # a path that does not exist would otherwise be looked up on the hub, slowly and with a
    # confusing error; a bare name (no slash, no leading dot) may still be a hub id
    looks_like_path = value is not None and ("/" in value or os.sep in value or value[:1] in ".~")
    if looks_like_path and not os.path.isdir(os.path.expanduser(value)):
        raise click.BadParameter(f"no such model folder: {value}")
    return value


def write_jsonl(path, rows) -> None:
    """Write rows as JSON lines, whole or not at all (a temporary file renamed into place)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("w", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json_line(row) + "\n")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
