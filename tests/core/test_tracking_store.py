"""Artifact locations relative to the tracking store: a moved checkout keeps its artifacts."""

import shutil
import subprocess
import sys

import pytest
from mlflow import MlflowClient
from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

from acesql.tracking import MlflowTracker
from acesql.tracking_store import (
    StoreRelativeArtifactRepository,
    artifact_root,
    experiment_id,
    local_path,
)
from flows.runs import MlflowRuns


def _log_a_run(uri: str, name: str, text: str, tmp_path) -> str:
    tracker = MlflowTracker(uri, "acesql")
    note = tmp_path / f"{name}.txt"
    note.write_text(text)
    with tracker.start_run(name):
        tracker.log_artifact(note)
        return tracker.run_id


AFTER_THE_MOVE = """
import sys
import mlflow
from pathlib import Path
from mlflow import MlflowClient
from acesql.tracking import MlflowTracker

first, version, scratch = sys.argv[1:]
note = Path(scratch) / "second.txt"
note.write_text("after the move")
tracker = MlflowTracker("sqlite:///mlflow.db", "acesql")
with tracker.start_run("second"):
    tracker.log_artifact(note)
    print(tracker.run_id)
MlflowClient("sqlite:///mlflow.db").download_artifacts(first, "first.txt", scratch)
mlflow.set_tracking_uri("sqlite:///mlflow.db")
mlflow.artifacts.download_artifacts(f"models:/acesql/{version}", dst_path=scratch + "/model")
"""


def test_a_moved_checkout_reads_and_writes_its_artifacts_where_it_now_is(tmp_path, monkeypatch):
    old, new, scratch = tmp_path / "old", tmp_path / "new", tmp_path / "scratch"
    old.mkdir()
    scratch.mkdir()
    # MLflow keeps one engine per store URI in a process: the absolute path keeps this test's
    # store its own; the process after the move uses params.yaml's relative one
    uri = f"sqlite:///{old / 'mlflow.db'}"
    monkeypatch.chdir(old)
    first = _log_a_run(uri, "first", "before the move", tmp_path)
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    version = MlflowRuns(uri, "acesql").register_model("acesql", first, folder)
    monkeypatch.chdir(tmp_path)
    shutil.move(old, new)

    # a new process in the moved folder, as a moved checkout or a remounted container runs
    done = subprocess.run(
        [sys.executable, "-c", AFTER_THE_MOVE, first, version, str(scratch)],
        cwd=new,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    second = done.stdout.split()[-1]
    assert not old.exists()  # nothing wrote into the old folder
    assert (new / "mlruns" / "acesql" / second / "artifacts" / "second.txt").is_file()
    assert (scratch / "first.txt").read_text() == "before the move"
    assert (scratch / "model" / "config.json").is_file()


def test_a_store_named_by_absolute_path_is_found_from_any_folder(tmp_path, monkeypatch):
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    project.mkdir()
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    uri = f"sqlite:///{project / 'mlflow.db'}"
    tracker = MlflowTracker(uri, "acesql")
    note = tmp_path / "n.txt"
    note.write_text("x")
    with tracker.start_run("r"):
        tracker.log_artifact(note)
        run_id = tracker.run_id
    assert (project / "mlruns" / "acesql" / run_id / "artifacts" / "n.txt").is_file()
    assert not (elsewhere / "mlruns").exists()


def test_the_scheme_is_registered_with_mlflow():
    repo = get_artifact_repository("acesql-store:mlruns/e/r/artifacts", "sqlite:////srv/p/m.db")
    assert isinstance(repo, StoreRelativeArtifactRepository)
    assert repo.artifact_dir == "/srv/p/mlruns/e/r/artifacts"


@pytest.mark.parametrize("uri", ["acesql-store:", "acesql-store:/abs", "file:///x", "mlruns/x"])
def test_malformed_store_uris_are_refused(uri):
    with pytest.raises(ValueError, match="acesql-store:<relative path>"):
        local_path(uri, "sqlite:///m.db")


def test_a_server_keeps_its_own_artifact_root():
    assert artifact_root("http://127.0.0.1:5000", "acesql") is None
    assert artifact_root("sqlite:///m.db", "..") == "acesql-store:mlruns/experiment"


def test_an_old_store_with_a_vanished_absolute_root_is_named(tmp_path, caplog):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    client.create_experiment("old", artifact_location=str(tmp_path / "gone" / "mlruns"))
    with caplog.at_level("WARNING"):
        experiment_id(client, uri, "old")
    assert "does not exist" in caplog.text and "gone" in caplog.text
