"""The pipeline as a user runs it: `dvc repro` in a fresh clone, and the Prefect flow around it.

The clone is made from the working tree as git would commit it (tracked files plus untracked
ones that are not ignored), so these tests check what a fresh checkout would do, uncommitted
changes included. Its params.yaml is shrunk to a tiny synthetic dataset.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
import zc.lockfile

from acesql.config import load_section

ROOT = Path(__file__).resolve().parents[2]
GIT_USER = ["-c", "user.name=test", "-c", "user.email=test@example.com"]
TEXT = {"capture_output": True, "text": True, "timeout": 300}
TINY = {"profile": "tiny", "n_databases": 4, "questions_per_db": 3}


def _git(*args, cwd):
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)


def _dvc(*args, cwd):
    """`dvc ARGS` as a user with the project's environment activated runs it."""
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ["PATH"]}
    return subprocess.run(
        [sys.executable, "-m", "dvc", *args], cwd=cwd, env=env, capture_output=True, text=True
    )


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    snapshot = tmp_path_factory.mktemp("snapshot")
    files = _git("ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=ROOT).stdout
    for name in filter(None, files.split("\0")):
        source = ROOT / name
        if source.is_file():  # a tracked file deleted in the working tree is not copied
            (snapshot / name).parent.mkdir(parents=True, exist_ok=True)
            (snapshot / name).write_bytes(source.read_bytes())
    _git("init", "-q", cwd=snapshot)
    _git("add", "-A", cwd=snapshot)
    _git(*GIT_USER, "commit", "-qm", "snapshot", cwd=snapshot)
    target = tmp_path_factory.mktemp("clone") / "acesql"
    _git("clone", "-q", str(snapshot), str(target), cwd=snapshot)
    params = yaml.safe_load((target / "params.yaml").read_text())
    params["data"]["synth"].update(TINY)
    (target / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return target


@pytest.fixture
def bad_params(clone):
    """Params the data stage refuses, restored afterwards."""
    path = clone / "params.yaml"
    good = path.read_text()
    params = yaml.safe_load(good)
    params["data"]["source"] = "bird"
    path.write_text(yaml.safe_dump(params))
    yield
    path.write_text(good)


@pytest.fixture
def calls(monkeypatch):
    """The commands the flow's tasks start (each still runs for real)."""
    import flows.pipeline
    import flows.tasks

    started = []
    real = subprocess.Popen

    def popen(command, *args, **kwargs):
        started.append(list(command))
        return real(command, *args, **kwargs)

    monkeypatch.setattr(flows.tasks.subprocess, "Popen", popen)
    return started


@pytest.mark.slow
def test_dvc_repro_in_a_fresh_clone(clone):
    first = _dvc("repro", "data", cwd=clone)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "Running stage 'data'" in first.stdout
    for name in ("train", "dev", "test_ood"):
        assert (clone / "data" / "prepared" / f"{name}.jsonl").stat().st_size > 0
    assert (clone / "data" / "metrics.json").is_file()
    # `dvc metrics show` prints the headline (the split sizes), not the hundreds of numbers
    # of metrics.json, in a line a terminal holds
    shown = _dvc("metrics", "show", cwd=clone)
    assert shown.returncode == 0, shown.stderr
    assert "data/headline.json" in shown.stdout and "data/metrics.json" not in shown.stdout
    assert "splits.train.n" in shown.stdout and max(map(len, shown.stdout.splitlines())) < 120
    # what git sees: the lock, the metrics and DVC's own ignore file; no caches, stores or data
    status = _git("status", "--porcelain", "--untracked-files=all", cwd=clone).stdout.split("\n")
    changed = {line[3:] for line in status if line}
    assert "params.yaml" in changed  # the tiny params of this test
    assert changed <= {"params.yaml", "data/.gitignore", "dvc.lock"}
    again = _dvc("repro", "data", cwd=clone)
    assert again.returncode == 0, again.stderr
    assert "Stage 'data' didn't change, skipping" in again.stdout
    assert "Running stage" not in again.stdout


@pytest.mark.slow  # a whole stage (or several) in subprocesses
def test_dvc_repro_from_a_shell_without_the_venv(clone):
    """`.venv/bin/dvc repro` with no venv on PATH runs the stage with the project's python; an
    interpreter that cannot run the stages stops naming the fix, and nothing is lost."""
    dvc = str(Path(sys.executable).parent / "dvc")
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "ACESQL_PYTHON")}
    env["PATH"] = os.pathsep.join(("/usr/bin", "/bin"))
    metrics = clone / "data" / "metrics.json"
    venv = clone / ".venv"
    venv.symlink_to(Path(sys.executable).parents[1])  # the project's venv, where `make` puts it
    try:
        ran = subprocess.run([dvc, "repro", "--force", "data"], cwd=clone, env=env, **TEXT)
        assert ran.returncode == 0, ran.stdout + ran.stderr
        assert metrics.is_file()
        before = metrics.read_text()
    finally:
        venv.unlink()
    # no .venv and a python3 on PATH without acesql: a clear stop, then `dvc checkout`
    failed = subprocess.run([dvc, "repro", "--force", "data"], cwd=clone, env=env, **TEXT)
    assert failed.returncode != 0
    assert "cannot run acesql's stages" in failed.stderr and "make setup" in failed.stderr
    restored = subprocess.run([dvc, "checkout", "data"], cwd=clone, env=env, **TEXT)
    assert restored.returncode == 0, restored.stderr
    assert metrics.read_text() == before


@pytest.mark.slow
def test_the_flow_runs_the_stage(clone, prefect_harness, monkeypatch, calls):
    from flows.pipeline import pipeline

    monkeypatch.chdir(clone)
    metrics = clone / "data" / "metrics.json"
    _dvc("repro", "data", cwd=clone)  # up to date, whichever tests ran before
    calls.clear()
    before = metrics.stat().st_mtime_ns
    assert pipeline(["data"], return_state=True).is_completed()
    assert metrics.stat().st_mtime_ns == before  # nothing changed: DVC skipped the stage
    assert pipeline(["data"], force=True, return_state=True).is_completed()
    assert metrics.stat().st_mtime_ns > before
    assert [c[-1] for c in calls] == ["data", "data"]
    assert "--force" in calls[1]


def test_a_failed_stage_fails_the_flow_once(clone, prefect_harness, monkeypatch, calls, bad_params):
    from flows.pipeline import pipeline
    from flows.tasks import StageFailed

    monkeypatch.chdir(clone)
    state = pipeline(["data"], return_state=True)
    assert state.is_failed()
    error = state.result(raise_on_failure=False)
    assert isinstance(error, StageFailed)
    assert "data.path: required when source is bird" in str(error)
    assert len(calls) == 1  # a failed stage command is not retried


def test_a_busy_dvc_lock_is_retried(clone, prefect_harness, monkeypatch, calls):
    import flows.pipeline
    import flows.tasks

    monkeypatch.chdir(clone)
    monkeypatch.setattr(
        flows.pipeline, "repro", flows.pipeline.repro.with_options(retries=1, retry_delay_seconds=0)
    )
    (clone / ".dvc" / "tmp").mkdir(exist_ok=True)
    lock = zc.lockfile.LockFile(str(clone / ".dvc" / "tmp" / "lock"))
    try:
        state = flows.pipeline.pipeline(["data"], return_state=True)
    finally:
        lock.close()
    assert isinstance(state.result(raise_on_failure=False), flows.tasks.DvcBusy)
    assert len(calls) == 2


def test_unknown_stages_are_refused_before_anything_runs(prefect_harness, calls):
    from flows.pipeline import pipeline

    with pytest.raises(ValueError, match=r"unknown stages \['policy_gradient'\]"):
        pipeline(["data", "policy_gradient"])
    assert calls == []


@pytest.mark.slow
def test_python_m_flows_pipeline_uses_a_temporary_api(clone):
    """No harness: the flow starts (and stops) Prefect's temporary local server itself."""
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    proc = subprocess.run(
        [sys.executable, "-m", "flows.pipeline", "--stages", "data"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Starting temporary server" in proc.stdout + proc.stderr
    assert "Finished in state Completed()" in proc.stdout + proc.stderr


@pytest.mark.slow
def test_a_terminated_pipeline_stops_its_stage_and_ends_its_runs_killed(clone):
    """SIGTERM (what a worker sends a cancelled flow run) while `dvc repro data` runs."""
    from mlflow import MlflowClient

    path = clone / "params.yaml"
    tiny = path.read_text()
    params = yaml.safe_load(tiny)
    params["data"]["synth"].update({"n_databases": 50, "questions_per_db": 40})  # ~30 s
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env["PYTHONUNBUFFERED"] = "1"  # each log line as it is written
    command = [sys.executable, "-m", "flows.pipeline", "--stages", "data", "--force"]
    proc = subprocess.Popen(
        command, cwd=clone, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    client = MlflowClient(f"sqlite:///{clone / 'mlflow.db'}")

    def runs():
        experiment = client.get_experiment_by_name("acesql")
        found = client.search_runs([experiment.experiment_id], order_by=["attributes.start_time"])
        parent = [r for r in found if r.info.run_name.startswith("pipeline")][-1]
        under = [r for r in found if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
        return parent, under

    seen = []
    try:
        for line in proc.stdout:
            seen.append(line)
            if "Running stage 'data'" in line:
                break
        for _ in range(240):  # until the stage process has opened its MLflow run
            if runs()[1]:
                break
            time.sleep(0.25)
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=120)
    finally:
        proc.kill()
        path.write_text(tiny)
    out = "".join(seen) + rest
    assert proc.returncode == 128 + signal.SIGTERM, out[-3000:]
    assert "Stopping temporary server" in out  # not left running
    left = subprocess.run(["pgrep", "-f", "acesql.stages.data"], capture_output=True, text=True)
    assert left.stdout.strip() == "", out[-3000:]
    parent, [stage] = runs()
    assert (parent.info.status, stage.info.status) == ("KILLED", "KILLED"), out[-3000:]


@pytest.mark.slow
@pytest.mark.timeout(900)  # five stages in subprocesses: minutes, more on a shared machine
def test_the_whole_pipeline_with_a_tiny_model(clone, tiny_model_dir):
    """base_model -> data -> sft_data -> sft -> evaluate, end to end, in minutes."""
    params = yaml.safe_load((clone / "params.yaml").read_text())
    params["base_model"]["name"] = str(tiny_model_dir)
    params["sft_data"].update(max_examples=12)  # the default mode samples the base model
    params["sft_data"]["generation"]["max_new_tokens"] = 16
    params["sft"].update(time_budget_minutes=0.3, batch_size=2, grad_accum=1, checkpoint_every=1)
    params["sft"]["train_layers"] = params["grpo"]["train_layers"] = 1  # of the tiny model's 2
    params["evaluate"].update(limit=3, splits=["dev", "test_ood"])  # foreach over both
    params["evaluate"]["generation"]["max_new_tokens"] = 8
    (clone / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    proc = _dvc("repro", "evaluate", cwd=clone)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for split in ("dev", "test_ood"):  # evaluate@dev, evaluate@test_ood
        metrics = json.loads((clone / "results" / split / "metrics.json").read_text())
        rows = (clone / "results" / split / "rows.jsonl").read_text().splitlines()
        right = sum(json.loads(row)["pipeline_match"] for row in rows)
        # the metric DVC tracks is the share of the 3 rows whose SQL matched
        assert metrics["usable"] == len(rows) == 3
        assert metrics["pipeline_ex"] == round(right / 3, 4)
        selection = load_section(clone / "params.yaml", "selection")
        voted = selection.method != "greedy"  # candidates is absent when greedy
        assert metrics.get("candidates", 0) == (selection.candidates if voted else 0)
        assert (clone / "results" / split / "report.html").stat().st_size > 10_000
        assert json.loads((clone / "results" / split / "predict_dev.json").read_text())
    assert (clone / "models" / "sft" / "model.safetensors").is_file()
    # checkpoints stay for a resume but DVC neither hashes nor caches them (.dvcignore)
    assert list((clone / "models" / "sft" / "checkpoints").glob("step-*/trainer_state.json"))
    lock = yaml.safe_load((clone / "dvc.lock").read_text())
    md5 = next(o["md5"] for o in lock["stages"]["sft"]["outs"] if o["path"] == "models/sft")
    manifest = clone / ".dvc" / "cache" / "files" / "md5" / md5[:2] / md5[2:]
    cached = [entry["relpath"] for entry in json.loads(manifest.read_text())]
    assert "model.safetensors" in cached
    assert not [name for name in cached if name.startswith("checkpoints")]
