"""params.yaml: every section builds from the repository's file; bad files say what to fix."""

from pathlib import Path
from typing import get_args

import pytest
import yaml
from pydantic import BaseModel

from acesql.config import DataSection, Params, load_params, load_section
from acesql.data.loaders import LOADERS
from acesql.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
PARAMS = ROOT / "params.yaml"


def _models(model: type[BaseModel], prefix=""):
    """Every section class reachable from `model` (`Section | None` fields too), with its
    dotted name."""
    for name, field in model.model_fields.items():
        for annotation in get_args(field.annotation) or (field.annotation,):
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                yield f"{prefix}{name}", annotation
                yield from _models(annotation, f"{prefix}{name}.")


@pytest.mark.parametrize("name", list(Params.model_fields))
def test_every_section_builds_from_the_repository_params(name):
    section = load_section(PARAMS, name)
    assert section == getattr(load_params(PARAMS), name)


SECTIONS = [("params", Params), *_models(Params)]


@pytest.mark.parametrize("where,model", SECTIONS, ids=[where for where, _ in SECTIONS])
def test_every_field_is_described(where, model):
    for name, field in model.model_fields.items():
        annotation = field.annotation
        nested = isinstance(annotation, type) and issubclass(annotation, BaseModel)
        assert field.description or nested, f"{where}.{name} has no description"


def test_sources_are_the_loader_formats():
    assert set(get_args(DataSection.model_fields["source"].annotation)) == set(LOADERS)


def test_round_trip(tmp_path):
    params = load_params(PARAMS)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params.model_dump(mode="json")))
    assert load_params(path) == params


def test_absent_sections_take_defaults(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text("data:\n  synth: {profile: tiny}\n")
    params = load_params(path)
    assert params.base.tracking_uri == "sqlite:///mlflow.db"
    assert params.data.synth.profile == "tiny" and params.data.synth.n_databases == 50


BAD = [
    ("base: {seed: x}", r"base\.seed: Input should be a valid integer.*\(got 'x'\)"),
    ("base: {sed: 1}", r"base\.sed: unknown key; expected one of \['seed', "),
    ("gpro: {lr: 1}", r"gpro: unknown key; expected one of \['base', 'data', 'base_model'"),
    ("data: {source: csv}", r"data\.source: Input should be 'synth', 'spider', 'bird' or"),
    ("data: {synth: {n_databases: 0}}", r"data\.synth\.n_databases: .*greater than or equal to 1"),
    (
        "data: {synth: {dev_fraction: 1.5}}",
        r"data\.synth\.dev_fraction: .*less than 1 \(got 1\.5\)",
    ),
    (
        "data: {synth: {profile: huge}}",
        r"data\.synth\.profile: .*'tiny', 'default', 'large' or 'wide'",
    ),
    ("data: {filtering: {max_per_db: -2}}", r"data\.filtering\.max_per_db: .*\(got -2\)"),
    ("data: {filtering: {complexities: simple}}", r"data\.filtering\.complexities: .*list"),
    ("data: {source: spider}", r"data\.path: required when source is spider"),
    (
        "data: {source: bird, path: x}",
        r"data\.splits\.test_ood: bird has no such split; use one of \['train', 'dev'\] or null",
    ),
    (
        "data: {source: synsql, path: x, splits: {dev: null, test_ood: null, extra: 1}}",
        r"data\.splits\.extra: unknown key",
    ),
    ("data: [1, 2]", r"data: Input should be a valid dictionary"),
    # a SQL timeout that is not finite would disable the deadline
    ("evaluate: {timeout_s: .inf}", r"evaluate\.timeout_s: Input should be a finite number"),
    ("grpo_data: {timeout_s: .inf}", r"grpo_data\.timeout_s: Input should be a finite number"),
    ("grpo: {timeout_s: .inf}", r"grpo\.timeout_s: Input should be a finite number"),
    ("grpo: {timeout_s: .nan}", r"grpo\.timeout_s: Input should be a finite number"),
    ("selection: {temperature: .inf}", r"selection\.temperature: .*finite number"),
    ("selection: {method: r3, resample: true, resample_candidates: 4}", r"selection: .*exceed"),
    ("ranker: {samples: 1}", r"ranker\.samples"),
    ("grpo: {gamma: .nan}", r"grpo\.gamma: Input should be a finite number"),
    ("evaluate: {timeout_s: 0}", r"evaluate\.timeout_s: Input should be greater than 0"),
    # cross-field rules are checked when the file is read, before any stage starts
    (
        "grpo_data: {min_correct: 5, max_correct: 3}",
        r"grpo_data: .*needs min_correct <= max_correct <= generator_samples; got 5, 3, 16",
    ),
    (
        "grpo_data: {generator_samples: 4, max_correct: 14}",
        r"grpo_data: .*needs min_correct <= max_correct <= generator_samples; got 2, 14, 4",
    ),
    (
        "sft_data: {mode: self_distill, retriever_samples: 0}",
        r"sft_data: .*self_distill votes over retriever samples: set retriever_samples >= 1",
    ),
    ("evaluate: {mode: spider}", r"evaluate\.mode: unknown key; expected one of .*'match_mode'"),
    (
        "grpo_data: {match_mode: exact}",
        r"grpo_data\.match_mode: Input should be 'multiset', 'bird'",
    ),
    # checked at load, so the data stage never deletes its outputs for them
    (
        "data: {synth: {dev_fraction: 0.7, ood_fraction: 0.6}}",
        r"data\.synth: .*dev_fraction \+ ood_fraction must stay under 1 .*0\.7 \+ 0\.6",
    ),
    ("data: {synth: {n_databases: true}}", r"data\.synth\.n_databases: must not be true/false"),
    ("sft: {learning_rate: false}", r"sft\.learning_rate: must not be true/false"),
    (
        "data: {filtering: {complexities: [ultra]}}",
        r"data\.filtering\.complexities: synth examples carry no such label; use some of "
        r"\['simple', 'moderate', 'complex', 'highly complex'\] or null \(got \['ultra'\]\)",
    ),
    (
        "data: {source: spider, path: /no/such/spider, splits: {test_ood: null}}",
        r"data\.path: no such folder \(the spider dataset\)",
    ),
    (
        "grpo_data: {complexities: [hard-ish]}",
        r"grpo_data\.complexities: no source gives the labels",
    ),
    ("data:\n", r"section\(s\) \['data'\] have nothing under them; .*`data: \{\}`"),
    ("base: {seed: 1}\nbase: {seed: 2}", r"not valid YAML: .*duplicate key 'base'"),
    ("base: {seed: 1, seed: 2}", r"not valid YAML: .*duplicate key 'seed'"),
]


@pytest.mark.parametrize("text,message", BAD, ids=[t for t, _ in BAD])
def test_bad_params_name_the_field(tmp_path, text, message):
    path = tmp_path / "params.yaml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError, match=message) as info:
        load_params(path)
    assert str(path) in str(info.value)


def test_booleans_stay_where_they_belong(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text("grpo: {pcgrad: false}\nsft: {learning_rate: 1.0e-5}\n")
    params = load_params(path)
    assert params.grpo.pcgrad is False and params.sft.learning_rate == 1e-5


@pytest.mark.parametrize(
    "text,message",
    [
        ("dat: {seed: 1}\nbase: {seed: 2}\ndata: {}\n", r"unknown params section\(s\) \['dat'\]"),
        (
            "base: {seed: 2}\n",
            r"has no 'data' section, which this stage reads \(write `data: \{\}`",
        ),
        ("base: {seed: 2}\ndata:\n", r"\['data'\] have nothing under them"),
    ],
)
def test_a_stage_needs_its_section_spelled_out(tmp_path, text, message):
    path = tmp_path / "params.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_section(path, "data")


@pytest.mark.parametrize("load", [load_params, lambda path: load_section(path, "data")])
def test_a_renamed_section_names_its_new_name(tmp_path, load):
    path = tmp_path / "params.yaml"
    path.write_text("base: {seed: 2}\ndata: {}\nrl_data: {max_questions: 4}\n")
    with pytest.raises(ConfigError, match=r"'rl_data' is now called 'grpo_data'"):
        load(path)


def test_an_explicit_empty_section_takes_the_defaults(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text("base: {seed: 2}\ndata: {}\n")
    assert load_section(path, "data").synth.n_databases == 50


def test_several_problems_are_all_reported(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text("base: {seed: x}\ndata: {synth: {n_databases: 0, typo: 1}}\n")
    with pytest.raises(ConfigError) as info:
        load_params(path)
    assert [line.split(":")[0].strip() for line in str(info.value).splitlines()[1:]] == [
        "base.seed",
        "data.synth.n_databases",
        "data.synth.typo",
    ]


def test_a_section_is_checked_alone(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text("base: {seed: 3}\ndata: {synth: {n_databases: 0}}\n")
    assert load_section(path, "base").seed == 3
    with pytest.raises(ConfigError, match=r"data\.synth\.n_databases"):
        load_section(path, "data")
    with pytest.raises(ConfigError, match=r"unknown params section 'policy_gradient'"):
        load_section(path, "policy_gradient")


@pytest.mark.parametrize(
    "text,message",
    [
        (None, "params file not found"),
        ("data: {source: [", "is not valid YAML"),
        ("- base\n- data\n", "must map section names to sections, got list"),
        ("", "params file .* is empty"),
        ("# only a comment\n", "params file .* is empty"),
        (b"base: {seed: 1}\n\xff\xfe\n", "cannot read params file"),
        ("folder", "is a folder; give the YAML file"),
    ],
)
def test_unreadable_files(tmp_path, text, message):
    path = tmp_path / "params.yaml"
    if text == "folder":
        path.mkdir()
    elif isinstance(text, bytes):
        path.write_bytes(text)
    elif text is not None:
        path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_params(path)


def _alias_bomb(levels: int) -> str:
    """`selection.tau` as nested aliases: a few hundred bytes that expand to 10**levels."""
    lines = ["selection:", "  tau:", "    - &a0 [0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1]"]
    for i in range(1, levels):
        lines.append(f"    - &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    return "\n".join(lines) + "\n"


def test_aliases_that_expand_past_a_small_size_are_refused(tmp_path):
    import time

    path = tmp_path / "bomb.yaml"
    path.write_text(_alias_bomb(6))  # a million values from 600 bytes; 9 levels: a billion
    start = time.monotonic()
    with pytest.raises(ConfigError, match="aliases expand") as refused:
        load_section(path, "selection")
    assert time.monotonic() - start < 1 and len(str(refused.value)) < 500
    path.write_text("selection:\n  tau: &x 0.1\n  temperature: *x\n")  # a few stay usable
    assert load_section(path, "selection").temperature == 0.1


def test_a_long_bad_value_is_cut_in_the_message(tmp_path):
    path = tmp_path / "long.yaml"
    path.write_text("selection:\n  tau: " + "x" * 100_000 + "\n")
    with pytest.raises(ConfigError, match="selection.tau") as refused:
        load_section(path, "selection")
    assert len(str(refused.value)) < 800 and "more characters" in str(refused.value)
