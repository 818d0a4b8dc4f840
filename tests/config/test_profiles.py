"""The run profiles of profiles/: only what differs from params.yaml, valid, applied with care."""

import shutil
from pathlib import Path

import pytest
import yaml

from acesql.config import load_params
from acesql.config.describe import describe
from acesql.config.params import read_params_file
from acesql.errors import ConfigError
from flows.params_file import apply_profile, keys, leaf

ROOT = Path(__file__).resolve().parents[2]
PROFILES = sorted((ROOT / "profiles").glob("*.yaml"))


def _keys(path: Path) -> set[str]:
    return set(keys(yaml.safe_load(path.read_text())))


def test_a_profile_sets_only_what_differs_from_params_yaml():
    assert [p.stem for p in PROFILES] == ["long", "wide"]
    default = yaml.safe_load((ROOT / "params.yaml").read_text())
    for profile in PROFILES:
        values = yaml.safe_load(profile.read_text())
        same = [name for name in keys(values) if leaf(default, name) == leaf(values, name)]
        assert same == [], f"{profile.name} repeats params.yaml's {same}"


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.stem)
def test_a_profile_applied_to_the_repository_params_is_valid(tmp_path, profile):
    params = tmp_path / "params.yaml"
    shutil.copy(ROOT / "params.yaml", params)
    names = apply_profile(str(profile), params)
    assert set(names) == _keys(profile)
    loaded = load_params(params).model_dump(mode="json")
    for name, value in _leaves(yaml.safe_load(profile.read_text())):
        got = loaded
        for part in name.split("."):
            got = got[part]
        assert got == value, name
    assert "one section per DVC stage (see dvc.yaml)" in params.read_text()  # comments kept


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.stem)
def test_a_profile_changes_nothing_it_does_not_write(tmp_path, profile):
    # a key added to a sub-section params.yaml leaves out must not flip its other fields
    # from the stage's defaults to the sub-section class's
    params = tmp_path / "params.yaml"
    shutil.copy(ROOT / "params.yaml", params)
    before = {x.name: x.value for x in describe(load_params(params), read_params_file(params))}
    apply_profile(str(profile), params)
    after = {x.name: x.value for x in describe(load_params(params), read_params_file(params))}
    changed = {name for name in before if before[name] != after[name]}
    assert changed and changed <= _keys(profile)


def test_a_bad_profile_leaves_params_alone(tmp_path):
    params = tmp_path / "params.yaml"
    shutil.copy(ROOT / "params.yaml", params)
    before = params.read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text("sft:\n  time_budget_minutes: -3\n")
    with pytest.raises(ConfigError, match="time_budget_minutes"):
        apply_profile(str(bad), params)
    with pytest.raises(ConfigError, match="no profile 'nope'"):
        apply_profile("nope", params)
    bad.write_text("- just a list\n")
    with pytest.raises(ConfigError, match="maps params.yaml sections"):
        apply_profile(str(bad), params)
    assert params.read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml", "params.yaml"]


def _leaves(tree: dict, prefix: str = ""):
    for key, value in tree.items():
        if isinstance(value, dict):
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value
