"""Tracking: runs logged to a temporary MLflow sqlite store and read back; the null tracker."""

import json
import subprocess
from pathlib import Path

import pytest
import torch
from matplotlib.figure import Figure
from mlflow import MlflowClient

from acesql.config import BaseSection
from acesql.tracking import (
    FLOW_RUN_ENV,
    FLOW_RUN_TAG,
    GIT_COMMIT_TAG,
    PARENT_RUN_ENV,
    PARENT_RUN_TAG,
    MlflowTracker,
    NullTracker,
    git_commit,
    make_tracker,
)
from flows.runs import MlflowRuns, NullRuns, dvc_out_md5, dvc_stage_tags, pipeline_runs


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
        tracker.log_metrics({"train.n": 12, "loss": 0.5, "sigma.(0,0.5]": 2})
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
    assert run.data.metrics == {"train.n": 12.0, "loss": 0.25, "sigma._0_0.5_": 2.0}
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
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True)
    assert commit == head.stdout.strip() and len(commit) == 40
    (tmp_path / "sub").mkdir()
    assert git_commit(tmp_path / "sub") == commit  # found from a subfolder, as git does
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


def test_null_tracker_accepts_everything_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where a default store, ./mlruns or an artifact would land
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'env.db'}")  # off wins
    (tmp_path / "a.txt").write_text("x")
    tracker = make_tracker(BaseSection(tracking_uri=None))
    assert isinstance(tracker, NullTracker) and tracker.run_id is None
    with tracker.start_run("x", {"a": {"b": 1}}, {"t": "1"}, nested=True):
        assert tracker.run_id is None
        tracker.log_metrics({"m": 1.0}, step=3)
        tracker.log_artifact("a.txt")
        tracker.log_artifact("nowhere.txt")
        tracker.log_figure(Figure(), "f.png")
        tracker.log_dict({"k": 1}, "d.json")
    assert tracker.run_id is None
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]
    # a failing stage still fails
    with pytest.raises(KeyError, match="the block's own"), tracker.start_run("y"):
        raise KeyError("the block's own")


def test_make_tracker_uses_the_base_section(store):
    uri, experiment = store
    tracker = make_tracker(BaseSection(tracking_uri=uri, experiment=experiment))
    assert isinstance(tracker, MlflowTracker)
    assert MlflowClient(uri).get_experiment_by_name(experiment) is not None


def test_mlflow_tracking_uri_takes_the_place_of_params_but_not_of_off(store, monkeypatch):
    uri, experiment = store
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    params_default = BaseSection(experiment=experiment)  # sqlite:///mlflow.db in the cwd
    tracker = make_tracker(params_default)
    assert isinstance(tracker, MlflowTracker) and tracker.client.tracking_uri == uri
    assert isinstance(make_tracker(BaseSection(tracking_uri=None)), NullTracker)


def test_a_repository_without_commits_has_no_commit(tmp_path):
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    assert git_commit(tmp_path) is None


# ------------------------------------------------ what an orchestrator hands a stage process


def test_stage_runs_take_the_parent_and_flow_run_from_the_environment(store):
    uri, experiment = store
    base = BaseSection(tracking_uri=uri, experiment=experiment)
    runs = pipeline_runs(base)
    parent = runs.open_run("pipeline", {"flow": {"stages": ["data"]}}, {"stage": "p"})
    environ = {PARENT_RUN_ENV: parent, FLOW_RUN_ENV: "flow-1", "HOME": "/root"}
    tracker = make_tracker(base, environ)
    with tracker.start_run("data", tags={"stage": "data"}), tracker.start_run("step", nested=True):
        pass
    runs.close_run(parent)
    client, runs = _runs(store)
    by_name = {run.info.run_name: run for run in runs}
    assert by_name["pipeline"].info.status == "FINISHED"
    assert by_name["pipeline"].data.params == {"flow.stages": "['data']"}
    assert by_name["data"].data.tags[PARENT_RUN_TAG] == parent
    assert by_name["data"].data.tags[FLOW_RUN_TAG] == "flow-1"
    # a nested run's parent is the run around it, not the pipeline
    assert by_name["step"].data.tags[PARENT_RUN_TAG] == by_name["data"].info.run_id
    assert FLOW_RUN_TAG not in by_name["step"].data.tags


def test_the_stage_entry_point_tags_its_run_from_the_environment(store, tmp_path, monkeypatch):
    from acesql.stages.common import run_stage

    uri, experiment = store
    params = tmp_path / "params.yaml"
    params.write_text(f"base: {{tracking_uri: '{uri}', experiment: {experiment}}}\n")
    monkeypatch.setenv(PARENT_RUN_ENV, "parent-7")
    monkeypatch.setenv(FLOW_RUN_ENV, "flow-7")
    argv = ["--params", str(params)]
    run_stage("demo", "doc", ("base",), lambda s, tracker: {"ok": 1}, argv, run_name="demo@dev")
    _, [run] = _runs(store)
    assert run.info.run_name == "demo@dev" and run.data.tags["stage"] == "demo"
    assert run.data.tags[PARENT_RUN_TAG] == "parent-7"
    assert run.data.tags[FLOW_RUN_TAG] == "flow-7"
    # the host decides bf16 under `auto`: two runs on different CPUs can be told apart
    assert run.data.tags["host.cpu_native_bf16"] in ("true", "false")
    assert run.data.tags["host.torch"] == torch.__version__ and run.data.tags["host.cpu"]


def test_a_resumed_run_moves_under_the_pipeline_that_resumed_it(store):
    uri, experiment = store
    base = BaseSection(tracking_uri=uri, experiment=experiment)
    first = make_tracker(base, {PARENT_RUN_ENV: "first-pipeline"})
    with pytest.raises(KeyboardInterrupt), first.start_run("grpo", {"lr": 1}, {"stage": "grpo"}):
        run_id = first.run_id
        raise KeyboardInterrupt
    second = make_tracker(base, {PARENT_RUN_ENV: "second-pipeline"})
    with second.start_run("grpo", {"lr": 1}, {"stage": "grpo"}, run_id=run_id):
        pass
    _, [run] = _runs(store)
    assert run.info.run_id == run_id and run.info.status == "FINISHED"
    assert run.data.tags[PARENT_RUN_TAG] == "second-pipeline"
    assert run.data.tags["resumed"] == "true"


def test_finding_and_tagging_runs(store):
    tracker = MlflowRuns(*store)
    older = tracker.open_run("a", tags={"stage": "evaluate", "flow": "1"})
    newer = tracker.open_run("b", tags={"stage": "evaluate", "flow": "1"})
    tracker.open_run("c", tags={"stage": "evaluate", "flow": "2"})
    assert tracker.find_runs({"stage": "evaluate", "flow": "1"}) == [newer, older]
    assert tracker.find_runs({"stage": "sft"}) == []
    tracker.set_tags(older, {"dvc.stage_md5": "abc", "dvc.out.models/grpo": "d.dir"})
    assert tracker.find_runs({"dvc.stage_md5": "abc"}) == [older]
    with pytest.raises(ValueError, match="quote"):
        tracker.find_runs({"stage": "it's"})


def test_more_params_than_one_mlflow_batch_holds(store):
    params = {f"p{i:03d}": i for i in range(250)}
    with MlflowTracker(*store).start_run("wide", params):
        pass
    _, [run] = _runs(store)
    assert len(run.data.params) == 250 and run.data.params["p249"] == "249"


def test_with_tracking_off_there_are_no_runs_and_nothing_is_registered(tmp_path):
    assert isinstance(pipeline_runs(BaseSection(tracking_uri=None)), NullRuns)
    tracker = NullRuns()
    assert tracker.open_run("pipeline", {"a": 1}, {"t": "1"}) is None
    tracker.set_tags(None, {"t": "1"})
    tracker.close_run(None, "FAILED")
    assert tracker.find_runs({"t": "1"}) == []
    assert tracker.register_model("m", None, tmp_path, {"t": "1"}, "d") is None
    assert tracker.find_model_version("m", {"t": "1"}) is None


def test_a_registered_version_carries_its_folder_tags_and_description(store, tmp_path):
    tracker = MlflowRuns(*store)
    run_id = tracker.open_run("pipeline")
    folder = tmp_path / "staged"
    (folder / "eval").mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "eval" / "metrics.json").write_text('{"pipeline_ex": 0.5}')
    name = f"model-{store[1]}"
    first = tracker.register_model(name, run_id, folder, {"key": "a"}, "dev: pipeline 0.5")
    second = tracker.register_model(name, run_id, folder, {"key": "b"})
    assert (first, second) == ("1", "2")  # the registered model is created once
    assert tracker.find_model_version(name, {"key": "a"}) == "1"
    assert tracker.find_model_version(name, {"key": "c"}) is None
    client = tracker.client
    version = client.get_model_version(name, "1")
    assert version.description == "dev: pipeline 0.5" and version.run_id == run_id
    assert version.source == f"{client.get_run(run_id).info.artifact_uri}/model"
    local = client.download_artifacts(run_id, "model/eval/metrics.json", str(tmp_path))
    assert json.loads(Path(local).read_text()) == {"pipeline_ex": 0.5}


# ------------------------------------------------------------------------------ dvc.lock

LOCK = """\
schema: '2.0'
stages:
  sft:
    cmd: python -m acesql.stages.sft
    deps:
    - {path: data/sft, hash: md5, md5: aa.dir}
    params:
      params.yaml: {sft: {epochs: 1}}
    outs:
    - {path: models/sft, hash: md5, md5: bb.dir}
  evaluate@dev:
    cmd: python -m acesql.stages.evaluate --split dev
    deps:
    - {path: models/sft, hash: md5, md5: bb.dir}
    outs:
    - {path: results/dev/rows.jsonl, hash: md5, md5: cc}
  evaluate@test_ood:
    cmd: python -m acesql.stages.evaluate --split test_ood
    deps:
    - {path: models/sft, hash: md5, md5: bb.dir}
    outs:
    - {path: results/test_ood/rows.jsonl, hash: md5, md5: dd}
"""


def test_dvc_stage_tags_name_the_lock_entry(tmp_path):
    lock = tmp_path / "dvc.lock"
    lock.write_text(LOCK)
    tags = dvc_stage_tags(lock, "sft")
    assert set(tags) == {"dvc.stage_md5", "dvc.deps_md5", "dvc.params_md5", "dvc.out.models/sft"}
    assert tags["dvc.out.models/sft"] == "bb.dir"
    assert all(len(tags[k]) == 32 for k in ("dvc.stage_md5", "dvc.deps_md5", "dvc.params_md5"))
    changed = tmp_path / "changed.lock"
    changed.write_text(LOCK.replace("epochs: 1", "epochs: 2"))
    other = dvc_stage_tags(changed, "sft")
    assert other["dvc.params_md5"] != tags["dvc.params_md5"]
    assert other["dvc.stage_md5"] != tags["dvc.stage_md5"]
    assert other["dvc.deps_md5"] == tags["dvc.deps_md5"]


def test_a_foreach_stage_is_tagged_as_one(tmp_path):
    lock = tmp_path / "dvc.lock"
    lock.write_text(LOCK)
    tags = dvc_stage_tags(lock, "evaluate")
    assert tags["dvc.out.results/dev/rows.jsonl"] == "cc"
    assert tags["dvc.out.results/test_ood/rows.jsonl"] == "dd"
    lock.write_text(LOCK.replace("md5: dd", "md5: ee"))
    assert dvc_stage_tags(lock, "evaluate")["dvc.stage_md5"] != tags["dvc.stage_md5"]


def test_stages_dvc_has_not_recorded_have_no_tags(tmp_path):
    lock = tmp_path / "dvc.lock"
    assert dvc_stage_tags(lock, "sft") == {}  # no lock yet
    lock.write_text(LOCK)
    assert dvc_stage_tags(lock, "grpo") == {}
    assert dvc_stage_tags(lock, "eval") == {}  # a prefix of a name is not that stage


def test_dvc_out_md5_finds_the_output_holding_a_path(tmp_path):
    lock = tmp_path / "dvc.lock"
    lock.write_text(LOCK)
    assert dvc_out_md5(lock, "models/sft") == ("models/sft", "bb.dir")
    assert dvc_out_md5(lock, Path("models/sft/checkpoints")) == ("models/sft", "bb.dir")
    assert dvc_out_md5(lock, "models/grpo") is None
    assert dvc_out_md5(lock, "models") is None
