"""The pipeline's MLflow runs and registration against a tracking server (`mlflow server` on a
free loopback port, sqlite behind it, serving its artifacts), as a team shares one.

The flow runs for real, `dvc repro` included, in a small DVC project whose two stages (`grpo`
writes a model folder, `evaluate` its metrics and report) log through the stage entry point,
`acesql.stages.common.run_stage`, as the real stages do. tests/flows/test_flows.py checks the same
against the local sqlite store.
"""

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml
from mlflow import MlflowClient

from acesql.tracking import FLOW_RUN_TAG, GIT_COMMIT_TAG, PARENT_RUN_TAG
from flows.runs import dvc_stage_tags

STAGES = """\
import json, sys
from pathlib import Path
from acesql.stages.common import run_stage

def grpo(s, tracker):
    out = Path("models/grpo")
    (out / "pool").mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text("{}")
    (out / "model.safetensors").write_bytes(bytes(2048))
    (out / "pool.json").write_text("{}")
    (out / "pool" / "step-000001.json").write_text("{}")
    tracker.log_metrics({"reward": 0.5})
    return {}

def evaluate(s, tracker):
    out = Path("results/dev")
    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.json").write_text(json.dumps({"pipeline_ex": 0.25, "generator_ex": 0.5}))
    (out / "report.html").write_text("<html>report</html>")
    tracker.log_metrics({"dev/pipeline_ex": 0.25})
    return {}

stage = sys.argv[1]
run_stage(stage, "", ("base", stage), {"grpo": grpo, "evaluate": evaluate}[stage], [])
"""
DVC_YAML = {
    "stages": {
        "grpo": {"cmd": "python stages.py grpo", "deps": ["stages.py"], "outs": ["models/grpo"]},
        "evaluate": {
            "cmd": "python stages.py evaluate",
            "deps": ["stages.py", "models/grpo"],
            "params": ["evaluate"],
            "outs": ["results/dev/report.html"],
            "metrics": [{"results/dev/metrics.json": {"cache": False}}],
        },
    }
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`mlflow server` with a sqlite backend and served artifacts, in a temporary folder."""
    root = tmp_path_factory.mktemp("mlflow-server")
    port = _free_port()
    command = [
        *(str(Path(sys.executable).parent / "mlflow"), "server"),
        *("--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}"),
        *("--serve-artifacts", "--artifacts-destination", str(root / "artifacts")),
        *("--host", "127.0.0.1", "--port", str(port), "--workers", "1"),
    ]
    log = (root / "server.log").open("wb")
    proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(
                        "mlflow server did not start:\n" + (root / "server.log").read_text()
                    )
                time.sleep(0.5)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A git + DVC project with the two stages above, committed."""
    (tmp_path / "stages.py").write_text(STAGES)
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump(DVC_YAML))
    (tmp_path / ".gitignore").write_text("mlflow.db\nmlruns/\n")
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ["PATH"]}
    for command in (
        ["git", "init", "-q"],
        [sys.executable, "-m", "dvc", "init", "-q"],
        [sys.executable, "-m", "dvc", "config", "core.analytics", "false"],
        ["git", "add", "-A"],
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "project"],
    ):
        subprocess.run(command, cwd=tmp_path, env=env, check=True, capture_output=True)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.slow
def test_parent_and_child_runs_and_the_registered_model(server, project, prefect_harness):
    from flows.pipeline import pipeline

    experiment = "pipeline"
    params = {
        "base": {"tracking_uri": server, "experiment": experiment},
        "grpo": {"max_steps": 2},
        "evaluate": {"model": "models/grpo", "splits": ["dev"]},
    }
    (project / "params.yaml").write_text(yaml.safe_dump(params))
    state = pipeline(["grpo", "evaluate"], registered_model=experiment, return_state=True)
    assert state.is_completed(), state.result(raise_on_failure=False)

    client = MlflowClient(server)
    found = client.get_experiment_by_name(experiment)
    runs = {r.info.run_name.split(" ")[0]: r for r in client.search_runs([found.experiment_id])}
    assert set(runs) == {"pipeline", "grpo", "evaluate"}
    parent = runs["pipeline"]
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True)
    for stage in ("grpo", "evaluate"):
        child = runs[stage]
        assert child.info.status == "FINISHED"
        assert child.data.tags[PARENT_RUN_TAG] == parent.info.run_id
        assert child.data.tags[FLOW_RUN_TAG] == parent.data.tags[FLOW_RUN_TAG]
        assert child.data.tags[GIT_COMMIT_TAG] == commit.stdout.strip()
        recorded = dvc_stage_tags("dvc.lock", stage)  # what `dvc repro` wrote
        assert {k: child.data.tags.get(k) for k in recorded} == recorded
        assert parent.data.tags[f"dvc.{stage}.stage_md5"] == recorded["dvc.stage_md5"]
    assert runs["grpo"].data.params["grpo.max_steps"] == "2"
    assert runs["evaluate"].data.metrics == {"dev/pipeline_ex": 0.25}
    assert parent.info.status == "FINISHED"
    assert parent.data.tags[GIT_COMMIT_TAG] == commit.stdout.strip()

    version = client.get_model_version(experiment, "1")
    assert version.run_id == parent.info.run_id
    assert version.tags["eval.dev.pipeline_ex"] == "0.25"
    assert (
        version.tags["dvc.model_md5"] == dvc_stage_tags("dvc.lock", "grpo")["dvc.out.models/grpo"]
    )
    assert parent.data.tags["acesql.registered_model"] == f"{experiment}/1"
    files = {a.path for a in client.list_artifacts(parent.info.run_id, "model")}
    assert "model/weights.json" in files and "model/model.safetensors" not in files
    report = client.download_artifacts(
        parent.info.run_id, "model/eval/dev/report.html", str(project / "downloaded")
    )
    assert Path(report).read_text() == "<html>report</html>"
    assert version.source.startswith("mlflow-artifacts:")  # the server's, not a local path
