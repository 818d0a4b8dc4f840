"""Tracking: runs logged to a temporary MLflow sqlite store and read back; the null tracker."""

import json
import subprocess
from pathlib import Path

import pytest
from matplotlib.figure import Figure
from mlflow import MlflowClient

from acesql.config import BaseSection
from acesql.tracking import (
    GIT_COMMIT_TAG,
    PARENT_RUN_TAG,
    MlflowTracker,
    NullTracker,
    git_commit,
    make_tracker,
)


@pytest.fixture(scope="module")
def uri(tmp_path_factory):
    """One temporary sqlite store for the module (creating one takes a second)."""
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


@pytest.fixture
def store(uri, tmp_path, monkeypatch, request):
    """(uri, experiment): an experiment of its own per test; artifacts go under tmp_path."""
    monkeypatch.chdir(tmp_path)  # MLflow puts an experiment's artifacts in ./mlruns
    return uri, request.node.name


def _runs(store):
    uri, experiment = store
    client = MlflowClient(uri)
    found = client.get_experiment_by_name(experiment)
    return client, client.search_runs([found.experiment_id], order_by=["attributes.start_time"])


def test_a_run_with_params_metrics_and_artifacts(store, tmp_path):
    tracker = MlflowTracker(*store)
    note = tmp_path / "note.txt"
    note.write_text("hello")
    fig = Figure()
    fig.subplots().plot([1, 2, 3])
    params = {"data": {"synth": {"profile": "tiny", "ood_domains": ["hotel"]}}, "seed": 3}
    with tracker.start_run("data", params, tags={"stage": "data"}):
        tracker.log_metrics({"train.n": 12, "loss": 0.5})
        tracker.log_metrics({"loss": 0.25}, step=1)
        tracker.log_artifact(note)
        tracker.log_figure(fig, "plots/curve.png")
        tracker.log_dict({"a": 1}, "summary.json")

    client, [run] = _runs(store)
    assert run.info.status == "FINISHED" and run.info.run_name == "data"
    assert run.data.params == {
        "data.synth.profile": "tiny",
        "data.synth.ood_domains": "['hotel']",
        "seed": "3",
    }
    assert run.data.metrics == {"train.n": 12.0, "loss": 0.25}
    history = client.get_metric_history(run.info.run_id, "loss")
    assert [(m.step, m.value) for m in history] == [(0, 0.5), (1, 0.25)]
    assert run.data.tags["stage"] == "data"
    paths = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert paths == {"note.txt", "plots", "summary.json"}
    local = client.download_artifacts(run.info.run_id, "summary.json", str(tmp_path))
    assert json.loads(Path(local).read_text()) == {"a": 1}


def test_runs_are_tagged_with_the_git_commit(store, tmp_path):
    subprocess.run(["git", "init", "-q"], check=True)
    (tmp_path / "f").write_text("x")
    subprocess.run(["git", "add", "f"], check=True)
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"], check=True
    )
    commit = git_commit()
    assert commit and len(commit) == 40
    with MlflowTracker(*store).start_run("tagged"):
        pass
    _, [run] = _runs(store)
    assert run.data.tags[GIT_COMMIT_TAG] == commit


def test_outside_git_there_is_no_commit_tag(store):
    assert git_commit() is None
    with MlflowTracker(*store).start_run("untagged"):
        pass
    _, [run] = _runs(store)
    assert GIT_COMMIT_TAG not in run.data.tags


def test_nested_runs_and_a_failed_run(store):
    tracker = MlflowTracker(*store)
    with pytest.raises(ValueError), tracker.start_run("pipeline"):
        with tracker.start_run("child", nested=True):
            tracker.log_metrics({"x": 1})
        raise ValueError("boom")
    _, (parent, child) = _runs(store)
    assert parent.info.status == "FAILED" and child.info.status == "FINISHED"
    assert child.data.tags[PARENT_RUN_TAG] == parent.info.run_id
    assert child.data.metrics == {"x": 1.0} and parent.data.metrics == {}


def test_the_experiment_is_reused(store):
    first = MlflowTracker(*store).experiment_id
    assert MlflowTracker(*store).experiment_id == first


def test_logging_outside_a_run_is_a_programming_error(store):
    with pytest.raises(RuntimeError, match="start_run"):
        MlflowTracker(*store).log_metrics({"x": 1})


def test_null_tracker_accepts_everything():
    tracker = make_tracker(BaseSection(tracking_uri=None))
    assert isinstance(tracker, NullTracker)
    with tracker.start_run("x", {"a": {"b": 1}}, {"t": "1"}, nested=True):
        tracker.log_metrics({"m": 1.0}, step=3)
        tracker.log_artifact("nowhere.txt")
        tracker.log_figure(Figure(), "f.png")
        tracker.log_dict({}, "d.json")


def test_make_tracker_uses_the_base_section(store):
    uri, experiment = store
    tracker = make_tracker(BaseSection(tracking_uri=uri, experiment=experiment))
    assert isinstance(tracker, MlflowTracker)
    assert MlflowClient(uri).get_experiment_by_name(experiment) is not None
