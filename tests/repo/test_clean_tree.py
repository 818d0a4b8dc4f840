"""After a run, `git status` shows only dvc.lock: every other file a stage writes is ignored.

The paths come from dvc.yaml itself (outs and metrics of every stage, `foreach` expanded over
the splits of params.yaml), so a new stage or output cannot slip through. dvc.lock is the
run's record and must stay visible to git: DVC refuses to work with an ignored one.
"""

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def _written_paths() -> list[str]:
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    paths = []
    for stage in stages.values():
        bodies = [stage]
        if "foreach" in stage:
            items = params["evaluate"]["splits"]
            assert stage["foreach"] == "${evaluate.splits}", "update this test's expansion"
            text = yaml.safe_dump(stage["do"])
            text = text.replace("${base.results_dir}", params["base"]["results_dir"])
            bodies = [yaml.safe_load(text.replace("${item}", item)) for item in items]
        for body in bodies:
            for entry in body.get("outs", []) + body.get("metrics", []):
                paths.append(next(iter(entry)) if isinstance(entry, dict) else entry)
    unresolved = [p for p in paths if "${" in p]
    assert not unresolved, f"update this test's expansion for {unresolved}"
    return paths


def test_the_written_paths_are_read_from_dvc_yaml():
    paths = _written_paths()
    assert {"models/grpo", "data/metrics.json", "results/test_ood/metrics.json"} <= set(paths)


@pytest.mark.skipif(
    shutil.which("git") is None or not (ROOT / ".git").exists(), reason="not a git checkout"
)
@pytest.mark.parametrize("path", _written_paths())
def test_what_a_stage_writes_is_ignored_by_git(path):
    ignored = subprocess.run(
        ["git", "check-ignore", "--no-index", "-q", path], cwd=ROOT, capture_output=True
    )
    assert ignored.returncode == 0, f"{path} is written by a run but not ignored by git"


@pytest.mark.skipif(
    shutil.which("git") is None or not (ROOT / ".git").exists(), reason="not a git checkout"
)
def test_dvc_lock_is_not_ignored():
    ignored = subprocess.run(
        ["git", "check-ignore", "--no-index", "-q", "dvc.lock"], cwd=ROOT, capture_output=True
    )
    assert ignored.returncode == 1, "DVC refuses to run with a git-ignored dvc.lock"


@pytest.mark.skipif(
    shutil.which("git") is None or not (ROOT / ".git").exists(), reason="not a git checkout"
)
def test_nothing_a_stage_writes_is_tracked():
    """An ignored file that is still tracked shows as modified after every run."""
    tracked = subprocess.run(
        ["git", "ls-files", "--", *_written_paths()], cwd=ROOT, capture_output=True, text=True
    )
    assert tracked.stdout.split() == []
