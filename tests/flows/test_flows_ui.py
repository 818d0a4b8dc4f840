"""`make ui`'s start and stop, with small HTTP servers standing in for Prefect and MLflow."""

import json
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from flows.ui import Server, answers, default_servers, running_pid, start, stop


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _web(name: str, port: int, root: Path, api: bool = False) -> Server:
    """`python -m http.server` on `port`, healthy once `root/health` is served."""
    (root / "health").write_text("ok")
    url = f"http://127.0.0.1:{port}"
    command = (sys.executable, "-m", "http.server", str(port), "-b", "127.0.0.1", "-d", str(root))
    return Server(name, command, f"{url}/health", url, f"{url}/api" if api else None)


@pytest.fixture
def servers(tmp_path):
    made = [_web("alpha", _free_port(), tmp_path, api=True), _web("beta", _free_port(), tmp_path)]
    yield made
    stop(made, tmp_path / ".ui")


def test_start_waits_until_both_answer_and_stop_ends_them(servers, tmp_path):
    folder = tmp_path / ".ui"
    start(servers, folder, timeout_s=60)
    assert all(answers(server.health_url) for server in servers)
    pids = [running_pid(folder, server.name) for server in servers]
    assert all(pids)
    assert (folder / "alpha.api").read_text() == f"{servers[0].url}/api\n"
    assert not (folder / "beta.api").exists()
    assert (folder / "alpha.log").is_file()

    start(servers, folder, timeout_s=60)  # already running: nothing new is started
    assert [running_pid(folder, server.name) for server in servers] == pids

    assert stop(servers, folder) == ["alpha", "beta"]
    assert not any(answers(server.health_url) for server in servers)
    assert sorted(p.name for p in folder.iterdir()) == ["alpha.log", "beta.log"]
    assert stop(servers, folder) == []


def test_a_port_taken_by_something_else_is_refused(servers, tmp_path):
    start(servers[:1], tmp_path / "other", timeout_s=60)
    with pytest.raises(RuntimeError, match="already answers"):
        start(servers[:1], tmp_path / ".ui", timeout_s=60)
    stop(servers[:1], tmp_path / "other")


def test_a_server_that_never_answers_is_stopped_and_named(tmp_path):
    folder = tmp_path / ".ui"
    broken = Server(
        "broken",
        (sys.executable, "-c", "import time; time.sleep(60)"),
        f"http://127.0.0.1:{_free_port()}/health",
        "http://127.0.0.1",
    )
    with pytest.raises(RuntimeError, match=r"broken did not answer .*/broken\.log"):
        start([broken], folder, timeout_s=2)
    assert running_pid(folder, "broken") is None


def test_the_default_servers_are_prefect_and_mlflow_on_loopback():
    prefect, mlflow = default_servers()
    assert prefect.command[1:] == ("server", "start", "--host", "127.0.0.1", "--port", "4200")
    assert prefect.api_url == "http://127.0.0.1:4200/api"
    assert mlflow.command[1:] == (
        *("ui", "--backend-store-uri", "sqlite:///mlflow.db"),
        *("--host", "127.0.0.1", "--port", "5000"),
        *("--workers", "1"),
    )
    assert dict(mlflow.env) == {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    assert mlflow.health_url == "http://127.0.0.1:5000/health"


@pytest.mark.slow
def test_the_mlflow_ui_is_small_and_serves_artifacts_of_a_moved_store(tmp_path, monkeypatch):
    from acesql.tracking import MlflowTracker

    monkeypatch.chdir(tmp_path)
    note = tmp_path / "note.txt"
    note.write_text("hello")
    tracker = MlflowTracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "acesql")
    with tracker.start_run("r"):
        tracker.log_artifact(note)
        run_id = tracker.run_id
    _, mlflow = default_servers(mlflow_port=_free_port())
    start([mlflow], tmp_path / ".ui")
    try:
        group = running_pid(tmp_path / ".ui", "mlflow")
        ps = subprocess.run(["ps", "-o", "pid=", "-g", str(group)], capture_output=True, text=True)
        assert len(ps.stdout.split()) <= 2, ps.stdout  # the CLI and one uvicorn worker
        listing = f"{mlflow.url}/ajax-api/2.0/mlflow/artifacts/list?run_id={run_id}"
        with urllib.request.urlopen(listing, timeout=30) as answer:
            files = json.load(answer)["files"]
        assert [f["path"] for f in files] == ["note.txt"]
    finally:
        stop([mlflow], tmp_path / ".ui")
