"""Edits of params.yaml that keep its comments: a stage flow's overrides, a named profile.

    apply_profile("long")          # profiles/long.yaml's values set in params.yaml
    merge_section("sft", {"time_budget_minutes": 30})   # [("sft.time_budget_minutes", 15, 30)]
    overrides_model(SftSection)    # the flow parameter of those overrides: every field optional

Every edit is written to a temporary file beside params.yaml, validated there
(`acesql.config`), and only then swapped in: a bad value leaves params.yaml as it was.
"""

from __future__ import annotations

import functools
import operator
import types
import typing
from pathlib import Path
from typing import Annotated, Any

import yaml as plain_yaml
from pydantic import BaseModel, ConfigDict, Field, create_model
from ruamel.yaml import YAML

from acesql.config import Section, load_params, load_section
from acesql.errors import ConfigError

PARAMS = Path("params.yaml")
PROFILES = Path("profiles")


UNSET = "(unset)"  # the old value of a key params.yaml did not have


def merge_section(stage: str, overrides: dict, params: Path = PARAMS) -> list[tuple[str, Any, Any]]:
    """Set the leaves of `overrides` in params.yaml's `stage` section; return the values that
    changed, as (dotted name, old value, new value), old being the default the stage ran with
    where the file wrote none (`UNSET` where it could not be read).
    """
    yaml = round_trip_yaml()
    document = yaml.load(params.read_text()) or {}
    if document.get(stage) is None:
        document[stage] = {}
    names = [name for name in sorted(keys(overrides)) if leaf(overrides, name) != {}]
    effective = _effective(params, stage)
    old = {name: _old_value(document[stage], effective, name) for name in names}
    merge(document[stage], overrides)
    _swap_in(document, params, lambda candidate: load_section(candidate, stage), stage)
    return [
        (f"{stage}.{name}", old[name], leaf(overrides, name))
        for name in names
        if old[name] != leaf(overrides, name)
    ]


def _effective(params: Path, stage: str) -> dict:
    """The values the stage runs with now, defaults included; {} when the file does not load."""
    try:
        return load_section(params, stage).model_dump(mode="json")
    except ConfigError:
        return {}


def _old_value(written: dict, effective: dict, name: str):
    value = leaf(written, name)
    return leaf(effective, name) if value == UNSET else value


def _without_defaults(schema: dict, model: type) -> None:
    for prop in schema.get("properties", {}).values():
        prop.pop("default", None)


class Overrides(Section):
    """The base of `overrides_model`'s models: a JSON schema without defaults."""

    model_config = ConfigDict(json_schema_extra=_without_defaults)


@functools.cache
def overrides_model(section: type[BaseModel]) -> type[Overrides]:
    """`section`'s fields, each optional and with no default: the values a run changes.

    A form built from its JSON schema (Prefect's UI) starts empty, so a run sends only what
    the user filled in and every field left empty keeps params.yaml's value; a schema with
    the section's defaults would have the form send them all. Each value is checked against
    its field's type and bounds here; the section's rules across fields when the merged
    section is written (`merge_section`). Nested sections become overrides models too.
    """
    fields = {}
    for name, info in section.model_fields.items():
        annotation = _with_overrides_models(info.annotation)
        if info.metadata:  # bounds and patterns
            annotation = Annotated[annotation, *info.metadata]
        title = name.replace("_", " ").title()  # a nested section's label in the form
        fields[name] = (annotation, Field(None, title=title, description=info.description))
    return create_model(f"{section.__name__}Overrides", __base__=Overrides, **fields)


def _with_overrides_models(annotation):
    """`annotation` with each section in it (`SynthSection`, `WideSection | None`) replaced
    by its overrides model."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return overrides_model(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        members = typing.get_args(annotation)
        if any(isinstance(m, type) and issubclass(m, BaseModel) for m in members):
            return functools.reduce(operator.or_, map(_with_overrides_models, members))
    return annotation


def apply_profile(profile: str, params: Path = PARAMS) -> list[str]:
    """Set every value a profile names in params.yaml; return the dotted names set.

    `profile` is a name of `profiles/` (`cpu`, `long`) or a path to a YAML file of sections.
    """
    path = Path(profile)
    if not path.is_file():
        path = PROFILES / f"{profile}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in PROFILES.glob("*.yaml"))
        raise ConfigError(f"no profile {profile!r}: give a YAML file or one of {known}")
    overrides = plain_yaml.safe_load(path.read_text())
    if not isinstance(overrides, dict) or not all(isinstance(v, dict) for v in overrides.values()):
        raise ConfigError(f"{path}: a profile maps params.yaml sections to the values to set")
    yaml = round_trip_yaml()
    document = yaml.load(params.read_text()) or {}
    for section, values in overrides.items():
        if document.get(section) is None:
            document[section] = {}
        merge(document[section], values)
    _swap_in(document, params, load_params, "profile")
    return sorted(keys(overrides))


def round_trip_yaml() -> YAML:
    """ruamel's round-trip YAML (comments and key order survive), written as params.yaml is:
    `null` spelt out, new lists of scalars inline."""
    yaml = YAML()
    yaml.width = 4096  # long lines stay whole
    yaml.default_flow_style = None
    yaml.representer.add_representer(
        type(None), lambda r, _: r.represent_scalar("tag:yaml.org,2002:null", "null")
    )
    return yaml


def merge(target, overrides: dict) -> None:
    """Set each leaf of `overrides` in `target`, keeping the mapping nodes (and comments)."""
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            merge(target[key], value)
        elif not _same(target.get(key, UNSET), value):
            target[key] = value  # an equal value keeps its spelling: 0.00002 stays 0.00002


def _same(old, new) -> bool:
    """Whether a leaf already holds `new` (True is not 1 here).

    >>> _same(2e-05, 0.00002), _same(1, True), _same(None, None)
    (True, False, True)
    """
    return old == new and isinstance(old, bool) == isinstance(new, bool)


def leaf(tree: dict, name: str):
    """The value at dotted `name` in `tree`, or `UNSET`."""
    for key in name.split("."):
        if not isinstance(tree, dict) or key not in tree:
            return UNSET
        tree = tree[key]
    return tree


def keys(tree: dict, prefix: str = "") -> list[str]:
    """Dotted names of the leaves of `tree`."""
    names = []
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            names += keys(value, f"{prefix}{key}.")
        else:
            names.append(f"{prefix}{key}")
    return names


def _swap_in(document, params: Path, validate, tag: str) -> None:
    candidate = params.with_name(f".{params.name}.{tag}.tmp")
    with candidate.open("w") as fh:
        round_trip_yaml().dump(document, fh)
    try:
        validate(candidate)
    except ConfigError:
        candidate.unlink()
        raise
    candidate.replace(params)
