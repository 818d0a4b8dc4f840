"""After a run, `git status` shows nothing: every file a stage writes is ignored by git.

The paths come from dvc.yaml itself (outs and metrics of every stage, `foreach` expanded over
the splits of params.yaml), plus dvc.lock, so a new stage or output cannot slip through.
"""

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def _written_paths() -> list[str]:
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    paths = ["dvc.lock"]
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
    assert {"dvc.lock", "models/grpo", "data/metrics.json", "results/test_ood/metrics.json"} <= set(
        paths
    )


@pytest.mark.skipif(
    shutil.which("git") is None or not (ROOT / ".git").exists(), reason="not a git checkout"
)
@pytest.mark.parametrize("path", _written_paths())
def test_what_a_stage_writes_is_ignored_by_git(path):
    ignored = subprocess.run(
        ["git", "check-ignore", "--no-index", "-q", path], cwd=ROOT, capture_output=True
    )
    assert ignored.returncode == 0, f"{path} is written by a run but not ignored by git"
