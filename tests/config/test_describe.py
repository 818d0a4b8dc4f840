"""`acesql params` and the rule it serves: params.yaml writes only what differs from the typed
defaults, plus the values dvc.yaml reads by name."""

import json
from pathlib import Path

import yaml
from click.testing import CliRunner

from acesql.cli import cli
from acesql.config import Params, load_params
from acesql.config.describe import describe
from acesql.config.params import read_params_file

ROOT = Path(__file__).resolve().parents[2]
PARAMS = ROOT / "params.yaml"


def _dvc_reads() -> set[str]:
    """The dotted params dvc.yaml names one by one or interpolates (`${section.key}`)."""
    text = (ROOT / "dvc.yaml").read_text()
    names = {name for name in _interpolated(text) if name != "item"}
    for stage in yaml.safe_load(text)["stages"].values():
        names |= {p for p in stage.get("params", []) if isinstance(p, str) and "." in p}
    return names


def _interpolated(text: str) -> list[str]:
    return [part.split("}")[0] for part in text.split("${")[1:]]


def test_params_yaml_writes_no_default_but_what_dvc_yaml_reads():
    reads = _dvc_reads()
    assert {"base.seed", "evaluate.model", "base.results_dir"} <= reads
    lines = describe(load_params(PARAMS), read_params_file(PARAMS))
    repeated = [x.name for x in lines if x.written and x.value == x.default and x.name not in reads]
    assert repeated == [], f"params.yaml repeats these defaults: {repeated}"
    written = {x.name for x in lines if x.written}
    assert reads - {"evaluate.splits"} <= written | {n for n in reads if n.endswith(".model")}


def test_every_field_is_described_once_with_its_default():
    lines = describe(Params(), {})
    names = [x.name for x in lines]
    assert len(names) == len(set(names)) and len(names) > 250
    assert all(x.description for x in lines), [x.name for x in lines if not x.description]
    assert all(x.value == x.default and not x.written for x in lines)
    by_name = {x.name: x for x in lines}
    assert by_name["grpo.length_penalty.low"].value == 512  # sub-sections walked into
    assert by_name["sft_data.generation.temperature"].default == 1.0  # the parent's default


def _params(tmp_path, text):
    path = tmp_path / "params.yaml"
    path.write_text(text)
    return path


def test_acesql_params_marks_what_the_file_writes(tmp_path):
    path = _params(tmp_path, "sft:\n  learning_rate: 0.001\n  epochs: 1.0\n")
    result = CliRunner().invoke(cli, ["params", "sft", "--file", str(path)])
    assert result.exit_code == 0, result.output
    lines = {line[2:].split()[0]: line for line in result.output.splitlines()}
    assert (
        lines["sft.learning_rate"].startswith("* ")
        and "(default 5e-05)" in lines["sft.learning_rate"]
    )
    assert (
        lines["sft.epochs"].startswith("* ") and "default" not in lines["sft.epochs"].split("  ")[1]
    )
    assert (
        lines["sft.batch_size"].startswith("  ")
        and "Sequences per micro-batch" in lines["sft.batch_size"]
    )
    assert all(name.startswith("sft.") for name in lines)
    result = CliRunner().invoke(cli, ["params", "--written", "--json", "--file", str(path)])
    rows = [json.loads(line) for line in result.output.splitlines()]
    assert [(r["name"], r["value"], r["default"]) for r in rows] == [
        ("sft.epochs", 1.0, 1.0),
        ("sft.learning_rate", 0.001, 5e-05),
    ]


def test_acesql_params_says_what_is_wrong(tmp_path):
    result = CliRunner().invoke(cli, ["params", "--file", str(tmp_path / "none.yaml")])
    assert result.exit_code == 2 and "none.yaml not found" in result.output
    path = _params(tmp_path, "sft: {}\n")
    result = CliRunner().invoke(cli, ["params", "nope", "--file", str(path)])
    assert result.exit_code == 2 and "unknown section(s) ['nope']" in result.output
    path = _params(tmp_path, "sft:\n  learning_rate: -1\n")
    result = CliRunner().invoke(cli, ["params", "--file", str(path)])
    assert "sft.learning_rate: Input should be greater than 0" in str(result.exception)
