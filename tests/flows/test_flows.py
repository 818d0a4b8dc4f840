"""The flows around the stages: GPU dispatch, per-stage params, MLflow parent and child runs,
DVC hashes on runs and the model registry.

`dvc repro` is replaced by a fake that does what a stage process does for MLflow (a run
tagged from its environment) and what DVC then does (write the stage's dvc.lock entry), so
these tests run in a temporary project folder in seconds; tests/flows/test_dvc_repro.py runs the
real thing. Each test has its own sqlite MLflow store.
"""

import contextlib
import functools
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from mlflow import MlflowClient
from prefect.runtime import flow_run
from prefect.states import Completed, Failed

import flows.dispatch
import flows.params_file
import flows.pipeline
import flows.stages
import flows.tasks
from acesql.config import load_section
from acesql.errors import ConfigError
from acesql.tracking import FLOW_RUN_ENV, FLOW_RUN_TAG, PARENT_RUN_ENV, PARENT_RUN_TAG, make_tracker

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One sqlite MLflow store for the module (creating one takes seconds)."""
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


@pytest.fixture
def project(tmp_path, monkeypatch, request, store):
    """A project folder holding the repository's params.yaml, its MLflow experiment and
    registered model named after the test."""
    params = (ROOT / "params.yaml").read_text()
    base = f"base:\n  tracking_uri: {store}\n  experiment: {request.node.name}\n"
    params = params.replace("base:\n", base, 1)
    (tmp_path / "params.yaml").write_text(params)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def name(request):
    """The test's MLflow experiment, and the name it registers its model under."""
    return request.node.name


@pytest.fixture
def repro_calls(monkeypatch):
    """Stands in for `dvc repro`: a stage run as a stage process logs it, then a lock entry."""
    calls = []

    def fake_repro(stage, force=False, parent_run_id=None):
        calls.append((stage, force, parent_run_id))
        environ = {FLOW_RUN_ENV: str(flow_run.id), PARENT_RUN_ENV: parent_run_id or ""}
        tracker = make_tracker(load_section("params.yaml", "base"), environ)
        with tracker.start_run(stage, {"stage": {"n": len(calls)}}, tags={"stage": stage}):
            tracker.log_metrics({"done": 1})
        write_lock_entry(stage, f"{stage}-md5-{len(calls)}")

    monkeypatch.setattr(flows.pipeline, "repro", fake_repro)
    monkeypatch.setattr(flows.stages, "repro", fake_repro)
    return calls


def write_lock_entry(stage, md5, outs=()):
    lock = Path("dvc.lock")
    data = yaml.safe_load(lock.read_text()) if lock.is_file() else {"schema": "2.0", "stages": {}}
    data["stages"][stage] = {
        "cmd": f"python -m acesql.stages.{stage}",
        "deps": [{"path": f"acesql/stages/{stage}.py", "md5": md5}],
        "params": {"params.yaml": {stage: {"x": 1}}},
        "outs": [{"path": path, "md5": out_md5} for path, out_md5 in outs],
    }
    lock.write_text(yaml.safe_dump(data))


@pytest.fixture
def deployments(monkeypatch):
    """A fake `run_deployment`: records each call, answers with the state `answer` gives."""
    calls = []
    answer = {"state": Completed}

    def fake_run_deployment(name, parameters=None, timeout=None, **kwargs):
        calls.append({"name": name, "parameters": parameters, "timeout": timeout})
        return SimpleNamespace(id=None, name=f"remote-{len(calls)}", state=answer["state"]())

    monkeypatch.setattr(flows.dispatch, "run_deployment", fake_run_deployment)
    monkeypatch.setattr(flows.dispatch, "pool_workers", lambda pool: (1, "1 worker online"))
    return SimpleNamespace(calls=calls, answer=answer)


def mlflow_runs():
    base = load_section("params.yaml", "base")
    client = MlflowClient(base.tracking_uri)
    experiment = client.get_experiment_by_name(base.experiment)
    runs = client.search_runs([experiment.experiment_id], order_by=["attributes.start_time"])
    return client, {run.info.run_name.split(" ")[0]: run for run in runs}


def test_gpu_stages_are_dispatched_to_their_deployments(
    project, prefect_harness, repro_calls, deployments
):
    state = flows.pipeline.pipeline(
        ["sft_data", "sft", "grpo"], gpu_deployments="always", return_state=True
    )
    assert state.is_completed()
    _, runs = mlflow_runs()
    parent = runs["pipeline"].info.run_id
    assert repro_calls == [("sft_data", False, parent)]  # the CPU stage runs here
    assert deployments.calls == [
        {"name": name, "parameters": {"force": False, "parent_run_id": parent}, "timeout": 0}
        for name in ("acesql-sft/sft-gpu", "acesql-grpo/grpo-gpu")
    ]
    assert runs["pipeline"].info.status == "FINISHED"


def test_a_failed_remote_stage_fails_the_pipeline(
    project, prefect_harness, repro_calls, deployments
):
    deployments.answer["state"] = lambda: Failed(message="CUDA out of memory")
    state = flows.pipeline.pipeline(["sft", "grpo"], gpu_deployments="auto", return_state=True)
    assert state.is_failed()
    error = state.result(raise_on_failure=False)
    assert isinstance(error, flows.tasks.StageFailed)
    assert "acesql-sft/sft-gpu" in str(error) and "CUDA out of memory" in str(error)
    assert [call["name"] for call in deployments.calls] == ["acesql-sft/sft-gpu"]  # grpo never ran
    _, runs = mlflow_runs()
    assert runs["pipeline"].info.status == "FAILED"


def test_without_gpu_deployments_every_stage_is_reproduced_here(
    project, prefect_harness, repro_calls, deployments
):
    assert flows.pipeline.pipeline(["sft", "grpo"], force=True, return_state=True).is_completed()
    assert [(stage, force) for stage, force, _ in repro_calls] == [("sft", True), ("grpo", True)]
    assert deployments.calls == []


def _gpu_pool(with_worker: bool, deployment: bool = True):
    """The gpu work pool, with a worker that heartbeats but never polls, and acesql-sft/sft-gpu."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate

    with get_client(sync_client=True) as client:
        client.create_work_pool(WorkPoolCreate(name="gpu", type="process"), overwrite=True)
        if with_worker:
            client.send_worker_heartbeat("gpu", "idle-worker", heartbeat_interval_seconds=60)
        if deployment:
            flow_id = client.create_flow_from_name("acesql-sft")
            client.create_deployment(
                flow_id, "sft-gpu", entrypoint="flows/stages.py:sft_flow", work_pool_name="gpu"
            )


def _no_gpu_pool():
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client, contextlib.suppress(ObjectNotFound):
        client.delete_work_pool("gpu")


def test_auto_without_a_gpu_worker_runs_the_gpu_stages_here(
    project, prefect_harness, repro_calls, caplog
):
    _no_gpu_pool()
    state = flows.pipeline.pipeline(["sft", "grpo"], gpu_deployments="auto", return_state=True)
    assert state.is_completed()
    assert [stage for stage, _, _ in repro_calls] == ["sft", "grpo"]
    assert "there is no work pool 'gpu'" in caplog.text and "run here" in caplog.text


def test_a_run_on_a_nearly_full_disk_is_warned_and_goes_on(
    project, prefect_harness, repro_calls, caplog, monkeypatch
):
    room = {"free": 3 * 2**30}
    usage = lambda path: SimpleNamespace(total=100 * 2**30, used=0, free=room["free"])  # noqa: E731
    monkeypatch.setattr(flows.pipeline.shutil, "disk_usage", usage)
    assert flows.pipeline.pipeline(["sft"], return_state=True).is_completed()
    assert "3.0 GB free here and a run's folder grows to about 20 GB" in caplog.text
    assert [stage for stage, _, _ in repro_calls] == ["sft"]
    caplog.clear()
    room["free"] = 80 * 2**30
    assert flows.pipeline.pipeline(["sft"], return_state=True).is_completed()
    assert "GB free here" not in caplog.text


def test_always_without_a_gpu_worker_stops_at_once_naming_the_fix(
    project, prefect_harness, repro_calls
):
    _gpu_pool(with_worker=False, deployment=False)
    state = flows.pipeline.pipeline(["sft"], gpu_deployments="always", return_state=True)
    assert state.is_failed()
    message = str(state.result(raise_on_failure=False))
    assert "no worker polls work pool 'gpu'" in message
    assert "make worker POOL=gpu" in message and "'auto'" in message
    assert repro_calls == []


def test_a_run_no_worker_picks_up_is_cancelled_after_the_start_timeout(
    project, prefect_harness, repro_calls, monkeypatch
):
    from prefect.client.orchestration import get_client

    _gpu_pool(with_worker=True)
    monkeypatch.setattr(flows.dispatch, "POLL_S", 0.2)
    started = time.monotonic()
    state = flows.pipeline.pipeline(
        ["sft"], gpu_deployments="always", gpu_start_timeout_s=2, return_state=True
    )
    assert state.is_failed() and time.monotonic() - started < 60
    message = str(state.result(raise_on_failure=False))
    assert "of acesql-sft/sft-gpu was not picked up within 2 s" in message
    assert "it was cancelled" in message
    with get_client(sync_client=True) as client:
        [run] = [r for r in client.read_flow_runs() if r.name in message]
    assert run.state.type.value == "CANCELLED"
    _, runs = mlflow_runs()
    assert runs["pipeline"].info.status == "FAILED"


def test_a_killed_pipeline_cancels_its_dispatched_runs_and_ends_its_mlflow_runs_killed(
    project, prefect_harness, name
):
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment

    from flows.runs import pipeline_runs
    from flows.tracking import end_killed_pipeline_run

    _gpu_pool(with_worker=False)
    waiting = run_deployment(
        "acesql-sft/sft-gpu", timeout=0, tags=[flows.dispatch.dispatch_tag("pipe-1")]
    )
    other = run_deployment("acesql-sft/sft-gpu", timeout=0, tags=["someone-else"])
    assert flows.dispatch.cancel_dispatched("pipe-1") == [waiting.name]
    with get_client(sync_client=True) as client:
        assert client.read_flow_run(waiting.id).state.type.value == "CANCELLED"
        assert client.read_flow_run(other.id).state.type.value == "SCHEDULED"

    runs = pipeline_runs(load_section("params.yaml", "base"))
    parent = runs.open_run("pipeline x")
    runs.open_run("sft", tags={PARENT_RUN_TAG: parent})
    done = runs.open_run("sft_data", tags={PARENT_RUN_TAG: parent})
    runs.close_run(done, "FINISHED")
    end_killed_pipeline_run(parent)
    client, by_name = mlflow_runs()
    statuses = {n: run.info.status for n, run in by_name.items()}
    assert statuses == {"pipeline": "KILLED", "sft": "KILLED", "sft_data": "FINISHED"}


def test_the_pipeline_run_carries_each_stages_headline_numbers(
    project, prefect_harness, monkeypatch
):
    outputs = {
        "sft": ("models/sft_metrics.json", {"final_loss": 0.02, "steps": 21, "model": "m"}),
        "evaluate": ("results/test_ood/metrics.json", {"pipeline_ex": 0.18, "n": 200}),
    }

    def fake_repro(stage, force=False, parent_run_id=None):
        path, numbers = outputs[stage]
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(numbers))
        entry = "evaluate@test_ood" if stage == "evaluate" else stage
        write_lock_entry(entry, "md5", outs=[(path, "out-md5")])

    monkeypatch.setattr(flows.pipeline, "repro", fake_repro)
    monkeypatch.setattr(flows.pipeline, "register_model", lambda *args: None)  # tested on its own
    assert flows.pipeline.pipeline(["sft", "evaluate"], return_state=True).is_completed()
    _, runs = mlflow_runs()
    metrics = runs["pipeline"].data.metrics
    assert {k: v for k, v in metrics.items() if not k.startswith("wall_s.")} == {
        "sft.final_loss": 0.02,
        "sft.steps": 21.0,
        "evaluate.test_ood.pipeline_ex": 0.18,
        "evaluate.test_ood.n": 200.0,
    }
    assert {"wall_s.sft", "wall_s.evaluate"} <= set(metrics)


def test_a_profile_is_set_in_params_yaml_before_the_stages_run(
    project, prefect_harness, repro_calls, monkeypatch
):
    saved = []
    monkeypatch.setattr(flows.pipeline, "save_experiment", lambda *a: saved.append(a))
    profile = project / "quick.yaml"
    profile.write_text("sft:\n  time_budget_minutes: 1.5\nevaluate:\n  limit: 3\n")
    state = flows.pipeline.pipeline(["sft", "data"], profile=str(profile), return_state=True)
    assert state.is_completed()
    assert load_section("params.yaml", "sft").time_budget_minutes == 1.5
    assert load_section("params.yaml", "evaluate").limit == 3
    assert [stage for stage, _, _ in repro_calls] == ["data", "sft"]
    # the finished run is saved as an experiment named after the profile, its stages in order
    ((name, stages, message),) = saved
    assert re.fullmatch(r"quick-\d{8}-\d{6}", name) and stages == ["data", "sft"]
    assert message == f"the pipeline with profile {profile}"
    profile.write_text("sft:\n  time_budget_minutes: -1\n")
    assert not flows.pipeline.pipeline(
        ["sft"], profile=str(profile), return_state=True
    ).is_completed()
    assert len(repro_calls) == 2 and len(saved) == 1  # refused before any stage ran


def test_a_profile_run_saved_as_an_experiment_leaves_the_tracked_files_the_default(
    project, prefect_harness, monkeypatch
):
    write_lock_entry("data", "default-md5")
    before = {name: Path(name).read_text() for name in ("params.yaml", "dvc.lock")}
    budgets, fail = [], ["sft"]

    def fake_repro(stage, force=False, parent_run_id=None):
        budgets.append((stage, load_section("params.yaml", "sft").time_budget_minutes))
        if stage in fail:
            fail.remove(stage)
            raise RuntimeError("killed")
        write_lock_entry(stage, "profile-md5")

    monkeypatch.setattr(flows.pipeline, "repro", fake_repro)
    monkeypatch.setattr(flows.pipeline, "save_experiment", lambda name, *a: name)
    profile = project / "quick.yaml"
    profile.write_text("sft:\n  time_budget_minutes: 1.5\n")
    run = functools.partial(flows.pipeline.pipeline, ["data", "sft"], profile=str(profile))
    # a run that stops keeps the profile's values for its resumption, and the default aside
    assert not run(return_state=True).is_completed()
    assert load_section("params.yaml", "sft").time_budget_minutes == 1.5
    assert flows.tasks.DEFAULT_KEPT.is_dir()
    assert run(return_state=True).is_completed()
    assert budgets == [("data", 1.5), ("sft", 1.5), ("data", 1.5), ("sft", 1.5)]
    # the saved run: params.yaml and dvc.lock byte for byte the default again
    assert {name: Path(name).read_text() for name in before} == before
    assert not flows.tasks.DEFAULT_KEPT.exists()
    # a profile refused before any stage keeps nothing aside
    profile.write_text("sft:\n  time_budget_minutes: -1\n")
    assert not run(return_state=True).is_completed()
    assert {name: Path(name).read_text() for name in before} == before
    assert not flows.tasks.DEFAULT_KEPT.exists() and len(budgets) == 4


def test_stage_runs_are_children_of_the_pipeline_run_with_dvc_hashes(
    project, prefect_harness, repro_calls
):
    assert flows.pipeline.pipeline(["data", "sft_data"], return_state=True).is_completed()
    _, runs = mlflow_runs()
    parent = runs["pipeline"]
    for stage, md5_of_deps in (("data", "data-md5-1"), ("sft_data", "sft_data-md5-2")):
        child = runs[stage]
        assert child.data.tags[PARENT_RUN_TAG] == parent.info.run_id
        assert child.data.tags["stage"] == stage
        assert child.data.tags[FLOW_RUN_TAG] == parent.data.tags[FLOW_RUN_TAG]
        lock = yaml.safe_load(Path("dvc.lock").read_text())["stages"][stage]
        assert lock["deps"][0]["md5"] == md5_of_deps
        stage_md5 = child.data.tags["dvc.stage_md5"]
        assert len(stage_md5) == 32
        assert parent.data.tags[f"dvc.{stage}.stage_md5"] == stage_md5
    assert runs["data"].data.tags["dvc.stage_md5"] != runs["sft_data"].data.tags["dvc.stage_md5"]
    # the parent holds params.yaml as written and the flow's options
    assert parent.data.params["sft.learning_rate"] == "2e-05"
    assert parent.data.params["flow.stages"] == "['data', 'sft_data']"
    assert parent.info.status == "FINISHED"


def test_tracking_off_runs_the_stages_and_logs_nothing(project, prefect_harness, repro_calls, name):
    params = Path("params.yaml").read_text()
    uri = load_section("params.yaml", "base").tracking_uri
    Path("params.yaml").write_text(params.replace(f"tracking_uri: {uri}", "tracking_uri: null"))
    assert flows.pipeline.pipeline(["data"], return_state=True).is_completed()
    assert repro_calls == [("data", False, None)]
    assert MlflowClient(uri).get_experiment_by_name(name) is None


# ---------------------------------------------------------------------------- the registry


@pytest.fixture
def evaluated(project):
    """What the grpo and evaluate stages leave: a model folder, a lock, per-split results."""
    params = (project / "params.yaml").read_text()
    params = params.replace("  splits: [test_ood] ", "  splits: [dev, test_ood] ", 1)
    assert "splits: [dev, test_ood]" in params
    (project / "params.yaml").write_text(params)
    model = project / "models" / "grpo"
    (model / "pool").mkdir(parents=True)
    (model / "checkpoints" / "step-2").mkdir(parents=True)
    (model / "config.json").write_text('{"model_type": "llama"}')
    (model / "model.safetensors").write_bytes(b"\0" * 4096)
    (model / "checkpoints" / "step-2" / "model.safetensors").write_bytes(b"\0" * 4096)
    (model / "pool" / "step-000001.json").write_text("{}")
    (model / "pool" / "step-000002.json").write_text("{}")
    (model / "pool.json").write_text('{"q1": {}}')
    for split, ex in (("dev", 0.4), ("test_ood", 0.2)):
        folder = project / "results" / split
        folder.mkdir(parents=True)
        summary = {"split": split, "pipeline_ex": ex, "maj_ex": ex + 0.1, "generator_ex": 0.5}
        (folder / "metrics.json").write_text(json.dumps(summary))
    (project / "results" / "dev" / "report.html").write_text("<html>dev</html>")
    write_lock_entry("grpo", "grpo-deps", outs=[("models/grpo", "abc123.dir")])
    return model


def _registered(client, name, version="1"):
    found = client.get_model_version(name, version)
    files = set()
    pending = ["model"]
    while pending:
        for item in client.list_artifacts(found.run_id, pending.pop()):
            (pending.append if item.is_dir else files.add)(item.path)
    return found, files


def test_the_evaluated_model_is_registered_with_its_metrics(
    project, prefect_harness, repro_calls, evaluated, name
):
    state = flows.pipeline.pipeline(["evaluate"], registered_model=name, return_state=True)
    assert state.is_completed()
    client, runs = mlflow_runs()
    parent = runs["pipeline"]
    version, files = _registered(client, name)
    assert version.run_id == parent.info.run_id
    assert version.source.endswith(f"{parent.info.run_id}/artifacts/model")
    assert version.tags["eval.dev.pipeline_ex"] == "0.4"
    assert version.tags["eval.test_ood.generator_ex"] == "0.5"
    assert version.tags["dvc.model_out"] == "models/grpo"
    assert version.tags["dvc.model_md5"] == "abc123.dir"
    assert version.tags["dvc.evaluate.stage_md5"] == parent.data.tags["dvc.evaluate.stage_md5"]
    assert "dev: pipeline 0.4, maj 0.5, generator 0.5" in version.description
    assert files == {
        "model/config.json",
        "model/weights.json",  # the weights stay out: DVC has them
        "model/pool.json",  # the final pool
        "model/pool/step-000002.json",  # the latest snapshot
        "model/eval/dev/metrics.json",
        "model/eval/dev/report.html",  # test_ood has no report: none attached
        "model/eval/test_ood/metrics.json",
    }
    local = client.download_artifacts(parent.info.run_id, "model/weights.json", str(project))
    manifest = json.loads(Path(local).read_text())
    assert manifest == {
        "path": "models/grpo",
        "files": {"model.safetensors": 4096},
        "dvc_out": "models/grpo",
        "dvc_md5": "abc123.dir",
    }
    assert parent.data.tags["acesql.registered_model"] == f"{name}/1"


def test_an_unchanged_model_is_not_registered_twice(
    project, prefect_harness, evaluated, monkeypatch, name
):
    def same_evaluation(stage, force=False, parent_run_id=None):
        write_lock_entry(stage, "unchanged")

    def versions():
        client = MlflowClient(load_section("params.yaml", "base").tracking_uri)
        return [str(v.version) for v in client.search_model_versions(f"name = '{name}'")]

    monkeypatch.setattr(flows.pipeline, "repro", same_evaluation)
    for _ in range(2):
        state = flows.pipeline.pipeline(["evaluate"], registered_model=name, return_state=True)
        assert state.is_completed()
    assert versions() == ["1"]
    _, runs = mlflow_runs()
    assert runs["pipeline"].data.tags["acesql.registered_model"] == f"{name}/1"
    write_lock_entry("evaluate", "evaluated again")
    monkeypatch.setattr(flows.pipeline, "repro", lambda *args: None)
    state = flows.pipeline.pipeline(["evaluate"], registered_model=name, return_state=True)
    assert state.is_completed()
    assert sorted(versions()) == ["1", "2"]


def test_weights_are_copied_when_asked(project, prefect_harness, repro_calls, evaluated, name):
    state = flows.pipeline.pipeline(
        ["evaluate"], registered_model=name, log_model_weights=True, return_state=True
    )
    assert state.is_completed()
    client, _ = mlflow_runs()
    version, files = _registered(client, name)
    assert "model/model.safetensors" in files and "model/weights.json" not in files
    assert not any("checkpoints" in path for path in files)
    assert version.tags["acesql.weights"] == "artifact"


def test_registration_needs_the_evaluation_results(
    project, prefect_harness, repro_calls, evaluated
):
    (project / "results" / "test_ood" / "metrics.json").unlink()
    state = flows.pipeline.pipeline(["evaluate"], return_state=True)
    assert state.is_failed()
    assert "results/test_ood/metrics.json not found" in str(state.result(raise_on_failure=False))
    _, runs = mlflow_runs()
    assert runs["pipeline"].info.status == "FAILED"


# ---------------------------------------------------------------------- per-stage flows


def test_a_stage_flow_writes_the_fields_it_is_given_into_params_yaml(
    project, prefect_harness, repro_calls
):
    before = Path("params.yaml").read_text()
    state = flows.stages.sft_flow(
        sft={"learning_rate": 3.5e-4, "time_budget_minutes": None}, return_state=True
    )
    assert state.is_completed()
    after = Path("params.yaml").read_text()
    changed = [
        (old, new) for old, new in zip(before.splitlines(), after.splitlines()) if old != new
    ]
    assert sorted(new.split(":")[0] for _, new in changed) == [
        "  learning_rate",
        "  time_budget_minutes",
    ]
    for old, new in changed:  # the value changed, its comment stayed
        assert old.partition("#")[2] == new.partition("#")[2]
    sft = yaml.safe_load(after)["sft"]
    assert sft["learning_rate"] == 3.5e-4 and sft["time_budget_minutes"] is None
    assert len(before.splitlines()) == len(after.splitlines())
    assert repro_calls == [("sft", False, None)]
    _, runs = mlflow_runs()
    assert runs["sft"].data.tags["dvc.stage_md5"]  # a stage flow tags its run too
    assert PARENT_RUN_TAG not in runs["sft"].data.tags


def test_a_training_flow_sets_its_processes(project, prefect_harness, repro_calls):
    state = flows.stages.grpo_flow(distributed={"processes": 4}, force=True, return_state=True)
    assert state.is_completed()
    assert yaml.safe_load(Path("params.yaml").read_text())["distributed"] == {"processes": 4}
    distributed = load_section("params.yaml", "distributed")
    assert distributed.processes == 4 and distributed.sharding == "none"  # the rest stay
    assert repro_calls == [("grpo", True, None)]


def test_a_stage_flow_without_a_section_leaves_params_yaml_alone(
    project, prefect_harness, repro_calls
):
    before = Path("params.yaml").read_text()
    assert flows.stages.grpo_flow(force=True, parent_run_id=None, return_state=True).is_completed()
    assert Path("params.yaml").read_text() == before
    assert repro_calls == [("grpo", True, None)]


MISSING = object()


def form_payload(schema: dict, parameter: str, edits: dict) -> dict:
    """What the run form of Prefect's UI sends when the user opens the section `parameter`
    and sets `edits` in it (ui-v2, schema-form-property.tsx): every field the form shows
    starts at the `default` its schema gives, and the user's edits go on top."""
    values = {key: _form_value(prop, MISSING, schema) for key, prop in schema["properties"].items()}
    [section] = [option for option in schema["properties"][parameter]["anyOf"] if "$ref" in option]
    opened = _form_value(section, MISSING, schema)  # the section's option picked: no value yet
    values[parameter] = _deep_update({} if opened is MISSING else opened, edits)
    return {key: value for key, value in values.items() if value is not MISSING}


def _form_value(prop: dict, value, schema: dict):
    if "$ref" in prop:  # mergeSchemaPropertyDefinition: the definition, the property's keys on top
        name = prop["$ref"].removeprefix("#/definitions/")
        prop = {**schema["definitions"][name], **{k: v for k, v in prop.items() if k != "$ref"}}
    if value is MISSING and "default" in prop:
        value = json.loads(json.dumps(prop["default"]))
    if "properties" in prop and (value is MISSING or isinstance(value, dict)):
        values = {} if value is MISSING else dict(value)
        for key, sub in prop["properties"].items():
            filled = _form_value(sub, values.get(key, MISSING), schema)
            if filled is not MISSING:
                values[key] = filled
        value = values or MISSING  # an object input with no values sends none
    return value


def _deep_update(target: dict, edits: dict) -> dict:
    for key, value in edits.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _deep_update(target[key], value)
        else:
            target[key] = value
    return target


@pytest.mark.slow
def test_a_run_from_a_stage_form_changes_only_what_the_user_changed(
    project, prefect_harness, repro_calls, caplog
):
    """Through Prefect's API as the UI drives it: the deployment's schema read back from the
    server, a flow run made from the deployment with the form's payload, run as a worker's
    engine runs it. params.yaml changes in the one field the user set."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate
    from prefect.flow_engine import load_flow_run, run_flow
    from prefect.utilities.callables import parameter_schema

    stage_flow = flows.stages.data_flow
    with get_client(sync_client=True) as client:
        client.create_work_pool(WorkPoolCreate(name="cpu", type="process"), overwrite=True)
        deployment_id = client.create_deployment(
            client.create_flow_from_name(stage_flow.name),
            "form-test",
            entrypoint="flows/stages.py:data_flow",
            work_pool_name="cpu",
            parameter_openapi_schema=parameter_schema(stage_flow).model_dump_for_openapi(),
            enforce_parameter_schema=True,
        )
        deployment = client.read_deployment(deployment_id)
        old = load_section("params.yaml", "data").synth.questions_per_db
        payload = form_payload(
            deployment.parameter_openapi_schema, "data", {"synth": {"questions_per_db": old + 3}}
        )
        created = client.create_flow_run_from_deployment(deployment_id, parameters=payload)
    before = Path("params.yaml").read_text()
    try:
        state = run_flow(stage_flow, flow_run=load_flow_run(created.id), return_type="state")
    finally:  # the session's server is shared: other tests count its deployments
        with get_client(sync_client=True) as client:
            client.delete_deployment(deployment_id)
    assert state.is_completed(), state
    after = Path("params.yaml").read_text()
    # one line added (params.yaml writes no default), nothing else touched
    removed = [line for line in before.splitlines() if line not in after.splitlines()]
    added = [line.strip() for line in after.splitlines() if line not in before.splitlines()]
    assert removed == [] and added == [f"questions_per_db: {old + 3}"]
    assert f"data.synth.questions_per_db: {old} -> {old + 3}" in caplog.text
    assert repro_calls == [("data", False, None)]


HOLD_THE_LOCK = """
import fcntl, sys, time
from pathlib import Path
fh = open(".dvc/tmp/acesql-flow.lock", "a")
fcntl.flock(fh, fcntl.LOCK_EX)
Path("held").touch()
while not Path("release").exists():
    time.sleep(0.05)
"""


def test_runs_of_one_project_folder_take_turns(project, prefect_harness, repro_calls):
    """A flow run waits while another process holds the project; none of its params are
    written before then, so the other run's `dvc repro` reads the file it wrote."""
    Path(".dvc/tmp").mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", HOLD_THE_LOCK])
    deadline = time.monotonic() + 30
    while not Path("held").exists():
        assert holder.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    before = Path("params.yaml").read_text()
    result = {}
    waiting = threading.Thread(
        target=lambda: result.update(
            state=flows.stages.sft_flow(sft={"learning_rate": 2e-4}, return_state=True)
        )
    )
    waiting.start()
    waiting.join(timeout=3)
    assert waiting.is_alive() and repro_calls == []
    assert Path("params.yaml").read_text() == before
    Path("release").touch()
    holder.wait(timeout=30)
    waiting.join(timeout=60)
    assert result["state"].is_completed()
    assert repro_calls == [("sft", False, None)]
    assert yaml.safe_load(Path("params.yaml").read_text())["sft"]["learning_rate"] == 2e-4


def test_overrides_that_break_the_section_are_refused_before_the_stage_runs(
    project, prefect_harness, repro_calls
):
    params = yaml.safe_load(Path("params.yaml").read_text())
    Path("spider").mkdir()
    params["data"].update(source="spider", path="spider")
    params["data"]["splits"] = {"train": "train", "dev": "dev", "test_ood": None}
    Path("params.yaml").write_text(yaml.safe_dump(params))
    before = Path("params.yaml").read_text()
    # valid alone (the synthetic source has test_ood), not once merged with source: spider
    state = flows.stages.data_flow(data={"splits": {"test_ood": "test_ood"}}, return_state=True)
    assert state.is_failed()
    error = state.result(raise_on_failure=False)
    assert isinstance(error, ConfigError) and "data.splits.test_ood" in str(error)
    assert Path("params.yaml").read_text() == before
    assert repro_calls == []
    assert [p.name for p in Path().iterdir() if p.name.endswith(".tmp")] == []


def test_every_stage_has_a_flow_whose_parameter_is_its_section():
    """...as overrides: a form built from the schema starts empty (no field has a default),
    each field with its section's description."""
    from prefect.utilities.callables import parameter_schema

    from acesql.config import Params

    assert list(flows.stages.STAGE_FLOWS) == list(flows.pipeline.STAGES)
    for stage, stage_flow in flows.stages.STAGE_FLOWS.items():
        assert stage_flow.name == f"acesql-{stage}"
        schema = parameter_schema(stage_flow).model_dump()
        training = ["distributed"] if stage in ("sft", "grpo") else []
        assert list(schema["properties"]) == [stage, "force", "parent_run_id", *training]
        section = Params.model_fields[stage].annotation
        overrides = f"{section.__name__}Overrides"
        assert schema["properties"][stage]["anyOf"][0] == {"$ref": f"#/definitions/{overrides}"}
        fields = schema["definitions"][overrides]["properties"]
        assert set(fields) == set(section.model_fields)
        for name, field in fields.items():
            assert field.get("description") == section.model_fields[name].description
        for definition in schema["definitions"].values():
            assert [k for k, v in definition["properties"].items() if "default" in v] == []


def test_every_flow_parameter_is_described_in_the_form():
    from prefect.utilities.callables import parameter_schema

    for stage_flow in [flows.pipeline.pipeline, *flows.stages.STAGE_FLOWS.values()]:
        properties = parameter_schema(stage_flow).model_dump()["properties"]
        undescribed = [name for name, prop in properties.items() if not prop.get("description")]
        assert undescribed == [], stage_flow.name


def test_merge_section_returns_each_changed_value_old_and_new(tmp_path):
    params = tmp_path / "params.yaml"
    params.write_text((ROOT / "params.yaml").read_text())
    sft = yaml.safe_load(params.read_text())["sft"]
    given = {"max_steps": sft["max_steps"] + 1, "train_layers": sft["train_layers"], "epochs": 2}
    changes = flows.params_file.merge_section("sft", given, params)
    assert changes == [
        ("sft.epochs", 1.0, 2),  # a default params.yaml did not write: the value it ran with
        ("sft.max_steps", sft["max_steps"], sft["max_steps"] + 1),
    ]


def test_repro_hands_the_parent_run_to_the_stage_process(prefect_harness, monkeypatch, tmp_path):
    """The real task: the stage command sees the parent run and the flow run in its env."""
    seen = tmp_path / "env.json"
    script = (
        "import json, os, sys; "
        f"json.dump({{k: os.environ.get(k) for k in ({PARENT_RUN_ENV!r}, {FLOW_RUN_ENV!r})}}, "
        f"open({str(seen)!r}, 'w'))"
    )
    real_popen = flows.tasks.subprocess.Popen

    def popen(command, *args, **kwargs):
        return real_popen([command[0], "-c", script], *args, **kwargs)

    monkeypatch.setattr(flows.tasks.subprocess, "Popen", popen)
    monkeypatch.setenv(PARENT_RUN_ENV, "stale-parent")

    from prefect import flow

    @flow
    def one_stage(parent):
        flows.pipeline.repro("data", parent_run_id=parent)
        return str(flow_run.id)

    flow_run_id = one_stage("parent-123")
    assert json.loads(seen.read_text()) == {PARENT_RUN_ENV: "parent-123", FLOW_RUN_ENV: flow_run_id}
    one_stage(None)  # no parent: none leaks in from the flow's own environment
    assert json.loads(seen.read_text())[PARENT_RUN_ENV] is None
    assert os.environ[PARENT_RUN_ENV] == "stale-parent"


# ------------------------------------------------------------------------------ retries


def _mlflow_error(message, code="INTERNAL_ERROR"):
    """As MLflow raises it: the code given as its protobuf value, read back as its name."""
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import ErrorCode

    return MlflowException(message, error_code=ErrorCode.Value(code))


def _s3_error(code):
    from botocore.exceptions import ClientError

    return ClientError({"Error": {"Code": code, "Message": code}}, "PutObject")


def _boto_connection_error():
    from botocore.exceptions import EndpointConnectionError

    return EndpointConnectionError(endpoint_url="http://minio:9000")


def _requests_error(name):
    import requests.exceptions

    return getattr(requests.exceptions, name)("boom")


TRANSIENT = [
    ConnectionRefusedError(),
    TimeoutError(),
    _requests_error("ConnectionError"),
    _requests_error("ReadTimeout"),
    _boto_connection_error(),
    _s3_error("SlowDown"),
    _s3_error("ServiceUnavailable"),
    _mlflow_error(
        "API request to http://127.0.0.1:5000/api/2.0/mlflow/runs/create failed with "
        "exception HTTPConnectionPool: Max retries exceeded"
    ),
    _mlflow_error("busy", "TEMPORARILY_UNAVAILABLE"),
    _mlflow_error("(sqlite3.OperationalError) database is locked"),
]
DETERMINISTIC = [
    None,
    FileNotFoundError("models/grpo"),
    ValueError("bad"),
    ConfigError("params.yaml is invalid"),
    flows.tasks.StageFailed("dvc repro data exited with 2"),
    _s3_error("AccessDenied"),
    _s3_error("NoSuchBucket"),
    _mlflow_error("Invalid model version source", "INVALID_PARAMETER_VALUE"),
    _mlflow_error(
        "API request to endpoint /api/2.0/mlflow/x failed with error code 404 != 200",
        "ENDPOINT_NOT_FOUND",
    ),
    _mlflow_error("Run 'abc' not found", "RESOURCE_DOES_NOT_EXIST"),
]


@pytest.mark.parametrize("error", TRANSIENT, ids=repr)
def test_transient_store_errors(error):
    from flows.tracking import is_transient

    assert is_transient(error)


@pytest.mark.parametrize("error", DETERMINISTIC, ids=repr)
def test_errors_that_would_repeat(error):
    from flows.tracking import is_transient

    assert not is_transient(error)


@pytest.mark.parametrize("error, transient", [(TRANSIENT[0], True), (DETERMINISTIC[-1], False)])
def test_tracking_tasks_retry_only_transient_errors(
    project, prefect_harness, repro_calls, monkeypatch, error, transient
):
    """The first tag write fails: a transient error is retried, another fails the flow."""
    import flows.tracking
    from flows.runs import MlflowRuns

    writes = []
    real_set_tags = MlflowRuns.set_tags

    def flaky_set_tags(self, run_id, tags):
        writes.append(run_id)
        if len(writes) == 1:
            raise error
        real_set_tags(self, run_id, tags)

    monkeypatch.setattr(MlflowRuns, "set_tags", flaky_set_tags)
    monkeypatch.setattr(
        flows.pipeline, "tag_stage", flows.tracking.tag_stage.with_options(retry_delay_seconds=0)
    )
    state = flows.pipeline.pipeline(["data"], return_state=True)
    assert state.is_completed() == transient
    # retried: the failed write, then the child's and the parent's tags
    assert len(writes) == (3 if transient else 1)
    if not transient:
        assert state.result(raise_on_failure=False) is error


def test_stopping_a_stage_waits_for_the_process_under_dvc(tmp_path):
    """The group's leader (DVC) exits at once on SIGTERM; the stage under it takes a while to
    end its run. stop_group returns only once that child is gone too."""
    child_pid = tmp_path / "child.pid"
    child = (
        "import os, signal, sys, time\n"
        "def slow(*_):\n"
        "    time.sleep(1.5)\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGTERM, slow)\n"
        f"open({str(child_pid)!r}, 'w').write(str(os.getpid()))\n"
        "time.sleep(60)\n"
    )
    leader = (
        "import subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', {child!r}])\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", leader], start_new_session=True)
    for _ in range(100):
        if child_pid.exists() and child_pid.read_text():
            break
        time.sleep(0.1)
    pid = int(child_pid.read_text())
    flows.tasks.stop_group(proc, grace_s=10.0)
    assert proc.returncode is not None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def _dvc_project(root: Path) -> None:
    """A git repository with one committed DVC stage that writes its param to a metric."""

    def run(*command):
        subprocess.run(command, cwd=root, check=True, capture_output=True)

    run("git", "init", "-q")
    run("git", "config", "user.email", "t@example.com")
    run("git", "config", "user.name", "t")
    run(sys.executable, "-m", "dvc", "init", "-q")
    (root / "params.yaml").write_text("train:\n  steps: 1\n  rate: 0.5\n")
    write = "import yaml, json; p = yaml.safe_load(open('params.yaml'))['train']; "
    write += "json.dump({'loss': 1 / (1 + p['steps'])}, open('headline.json', 'w'))"
    stage = {"cmd": f'{sys.executable} -c "{write}"', "params": ["train"]}
    stage["metrics"] = [{"headline.json": {"cache": False}}]
    (root / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"train": stage}}))
    run(sys.executable, "-m", "dvc", "repro", "-q")
    run("git", "add", "-A")
    run("git", "commit", "-qm", "baseline")


def test_a_profile_run_is_saved_as_a_dvc_experiment_that_exp_show_compares(
    tmp_path, monkeypatch, prefect_harness
):
    _dvc_project(tmp_path)
    monkeypatch.chdir(tmp_path)
    default = {name: (tmp_path / name).read_text() for name in flows.tasks.TRACKED}
    assert flows.tasks.keep_default() and not flows.tasks.keep_default()  # kept once
    (tmp_path / "params.yaml").write_text("train:\n  steps: 3\n  rate: 0.5\n")  # the profile
    subprocess.run([sys.executable, "-m", "dvc", "repro", "-q"], check=True)
    name = flows.tasks.save_experiment("fast-20261206-120000", ["train"], "the pipeline, fast")
    assert name == "fast-20261206-120000"
    flows.tasks.restore_default(name)
    assert {name: (tmp_path / name).read_text() for name in default} == default
    assert not flows.tasks.DEFAULT_KEPT.exists()
    show = subprocess.run(
        [sys.executable, "-m", "dvc", "exp", "show", "--only-changed", "--csv"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    header, *rows = [line.split(",") for line in show.strip().splitlines()]
    # only what differs: the param the profile changed and the metric it moved, not `rate`
    assert "train.steps" in header and "loss" in header and "train.rate" not in header
    saved = next(row for row in rows if row[header.index("Experiment")] == name)
    assert saved[header.index("train.steps")] == "3" and float(saved[header.index("loss")]) == 0.25
    # outside a git repository it says why and the run still counts
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert flows.tasks.save_experiment("x-1", ["train"], "m") is None


def test_a_flow_started_without_make_reports_nothing_and_keeps_prefect_in_the_project():
    """`python -m flows.pipeline` outside `make`: the privacy and home settings of the Makefile
    are there before Prefect is imported; a value the user set wins."""
    root = Path(flows.pipeline.__file__).resolve().parents[1]
    keys = ("PREFECT_SERVER_ANALYTICS_ENABLED", "MLFLOW_DISABLE_TELEMETRY", "DO_NOT_TRACK")
    env = {k: v for k, v in os.environ.items() if k not in (*keys, "PREFECT_HOME")}
    show = "import flows, os, json; print(json.dumps({k: os.environ.get(k) for k in %r}))"
    names = (*keys, "PREFECT_HOME")
    code = show % (names,)
    plain = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True)
    assert json.loads(plain.stdout) == {
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "MLFLOW_DISABLE_TELEMETRY": "true",
        "DO_NOT_TRACK": "1",
        "PREFECT_HOME": str(root / ".prefect"),
    }
    assert flows.telemetry_defaults() == {k: json.loads(plain.stdout)[k] for k in keys}
    env["PREFECT_HOME"] = "/elsewhere"
    mine = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True)
    assert json.loads(mine.stdout)["PREFECT_HOME"] == "/elsewhere"


def test_the_makefile_exports_telemetry_env(tmp_path):
    """The Makefile includes telemetry.env: the commands it runs see each of its settings."""
    root = Path(flows.__file__).resolve().parents[1]
    show = tmp_path / "show.mk"
    show.write_text("show:\n\t@env\n")
    keys = flows.telemetry_defaults()
    env = {k: v for k, v in os.environ.items() if k not in keys}
    out = subprocess.run(
        ["make", "-s", "-f", "Makefile", "-f", str(show), "show"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    seen = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    assert keys and {k: seen.get(k) for k in keys} == keys


def test_telemetry_defaults_read_key_value_lines(tmp_path):
    path = tmp_path / "t.env"
    path.write_text("# a comment\n\nA=1\nB = x=y\n")
    assert flows.telemetry_defaults(path) == {"A": "1", "B": "x=y"}
    assert flows.telemetry_defaults(tmp_path / "missing.env") == {}
