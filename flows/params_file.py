"""Edits of params.yaml that keep its comments: a stage flow's overrides, a named profile.

    apply_profile("long")          # profiles/long.yaml's values set in params.yaml
    merge_section("sft", {"time_budget_minutes": 30})

Every edit is written to a temporary file beside params.yaml, validated there
(`acesql.config`), and only then swapped in: a bad value leaves params.yaml as it was.
"""

from __future__ import annotations

from pathlib import Path

import yaml as plain_yaml
from ruamel.yaml import YAML

from acesql.config import load_params, load_section
from acesql.errors import ConfigError

PARAMS = Path("params.yaml")
PROFILES = Path("profiles")


def merge_section(stage: str, overrides: dict, params: Path = PARAMS) -> list[str]:
    """Set the leaves of `overrides` in params.yaml's `stage` section; return their names."""
    yaml = round_trip_yaml()
    document = yaml.load(params.read_text()) or {}
    if document.get(stage) is None:
        document[stage] = {}
    merge(document[stage], overrides)
    _swap_in(document, params, lambda candidate: load_section(candidate, stage), stage)
    return sorted(keys(overrides))


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
        else:
            target[key] = value


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
