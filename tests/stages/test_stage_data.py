"""The data stage end to end: generated (tiny) and Spider-layout sources, files and MLflow run."""

import json
import re
from pathlib import Path

import pytest
import yaml
from mlflow import MlflowClient

from acesql.stages.data import main

TINY_SYNTH = {"profile": "tiny", "n_databases": 6, "questions_per_db": 4}


@pytest.fixture(scope="module")
def uri(tmp_path_factory):
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


@pytest.fixture
def run_stage(tmp_path, monkeypatch, uri, request):
    """Write params (merged over tiny defaults) into a fresh working directory and run the stage."""
    monkeypatch.chdir(tmp_path)

    def run(data: dict, base: dict | None = None):
        params = {
            "base": {"tracking_uri": uri, "experiment": request.node.name, **(base or {})},
            "data": {"synth": TINY_SYNTH, **data},
        }
        Path("params.yaml").write_text(yaml.safe_dump(params))
        main(["--params", "params.yaml"])
        data_dir = Path((base or {}).get("data_dir", "data"))
        return json.loads((data_dir / "metrics.json").read_text())

    return run


def _jsonl(path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def _run(uri, experiment):
    client = MlflowClient(uri)
    found = client.get_experiment_by_name(experiment)
    [run] = client.search_runs([found.experiment_id])
    return client, run


def test_synthetic_source(run_stage, uri, request, capsys):
    metrics = run_stage({})
    prepared = Path("data/prepared")
    assert sorted(p.name for p in prepared.iterdir()) == [
        "dev.jsonl",
        "distribution.png",
        "test_ood.jsonl",
        "train.jsonl",
    ]
    assert (prepared / "distribution.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert Path("data/synth/tables.json").is_file()
    for split in ("train", "dev", "test_ood"):
        rows = _jsonl(prepared / f"{split}.jsonl")
        assert len(rows) == metrics["splits"][split]["n"] == 4 * (4 if split == "train" else 1)
        for row in rows:
            assert row["db_path"].startswith("data/synth/databases/")  # relative: portable outs
            assert Path(row["db_path"]).is_file() and row["unusable"] is None
            assert row["complexity"] and row["domain"] and isinstance(row["gold_columns"], list)
    assert metrics["source"] == "synth"
    assert metrics["filtering"] == {"before": 16, "after": 16}
    assert metrics["generator"]["n_examples"] == 24
    assert sum(metrics["splits"]["train"]["by_complexity"].values()) == 16
    assert json.loads(capsys.readouterr().out) == metrics  # what run_stage prints

    client, run = _run(uri, request.node.name)
    assert run.info.status == "FINISHED" and run.data.tags["stage"] == "data"
    assert run.data.params["data.synth.profile"] == "tiny"
    assert run.data.params["base.seed"] == "0"
    assert run.data.metrics["splits.train.n"] == 16
    assert run.data.metrics["generator.n_examples"] == 24
    assert run.data.metrics["generator.seconds"] > 0  # MLflow only, see the next test
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert artifacts == {"distribution.png", "metrics.json"}


def test_filtering_applies_to_train_only(run_stage):
    metrics = run_stage({"filtering": {"max_per_db": 1}})
    assert metrics["filtering"] == {"before": 16, "after": 4}
    assert metrics["splits"]["train"]["databases"] == 4
    assert metrics["splits"]["dev"]["n"] == 4


def test_the_same_params_give_the_same_files(run_stage):
    """metrics.json included: a clock in it would change dvc.lock on every rerun."""
    run_stage({})
    files = ["data/metrics.json", *sorted(Path("data/prepared").glob("*.jsonl"))]
    first = {str(p): Path(p).read_bytes() for p in files}
    run_stage({})
    assert {str(p): Path(p).read_bytes() for p in files} == first


def test_spider_layout_source(run_stage, sample_dir, uri, request):
    data = {
        "source": "spider",
        "path": str(sample_dir),
        "splits": {"train": "dev", "test_ood": None},
    }
    metrics = run_stage(data, base={"data_dir": "out"})
    prepared = Path("out/prepared")
    assert not (prepared / "test_ood.jsonl").exists() and not Path("out/synth").exists()
    assert set(metrics["splits"]) == {"train", "dev"} and "generator" not in metrics
    train = _jsonl(prepared / "train.jsonl")
    assert len(train) == 14 and {r["db_id"] for r in train} == {"school", "shop"}
    assert all(Path(r["db_path"]).is_file() for r in train)
    assert metrics["splits"]["train"]["by_complexity"] == {"unlabeled": 14}
    _, run = _run(uri, request.node.name)
    assert run.data.tags["source"] == "spider"


def test_tracking_off(run_stage, tmp_path):
    run_stage({}, base={"tracking_uri": None})
    assert Path("data/metrics.json").is_file()
    assert not list(tmp_path.glob("*.db")) and not (tmp_path / "mlruns").exists()


@pytest.mark.parametrize(
    "data,message",
    [
        (
            {"filtering": {"complexities": ["challenging"]}},
            r"data\.filtering\.complexities: synth examples carry no such label",
        ),
        ({"synth": {**TINY_SYNTH, "n_databases": 0}}, r"data\.synth\.n_databases: .* equal to 1"),
        (
            {"synth": {**TINY_SYNTH, "ood_domains": ["moon"]}},
            r"data\.synth: ood_domains \['moon'\]",
        ),
        (
            {"source": "bird", "path": "nowhere", "splits": {"test_ood": None}},
            r"data\.path: no such folder \(the bird dataset\)",
        ),
    ],
    ids=["filtered-out", "bad-param", "generator-refuses", "missing-folder"],
)
def test_errors_exit_2_with_a_message(run_stage, capsys, uri, data, message):
    run_stage({}, base={"tracking_uri": None})
    before = _tree(Path("data"))
    assert "metrics.json" in before and "prepared/train.jsonl" in before
    with pytest.raises(SystemExit) as info:
        run_stage(data, base={"tracking_uri": None})
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    assert re.search(message, err), err
    assert _tree(Path("data")) == before  # the earlier outputs are untouched, nothing is left


def test_a_failed_generation_keeps_the_earlier_outputs(run_stage, monkeypatch):
    from acesql.stages import data as data_stage

    run_stage({}, base={"tracking_uri": None})
    before = _tree(Path("data"))

    def half_then_fail(root, config, progress=False):
        (root / "databases").mkdir()
        (root / "tables.json").write_text("[]")
        raise RuntimeError("killed halfway")

    monkeypatch.setattr(data_stage, "generate_dataset", half_then_fail)  # where the stage calls it
    with pytest.raises(RuntimeError, match="killed halfway"):
        run_stage({"synth": {**TINY_SYNTH, "n_databases": 7}}, base={"tracking_uri": None})
    assert _tree(Path("data")) == before


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}
