"""scripts/heldout on finished evaluations: it reads them back, says what it skips, compares."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ROWS = ROOT / "docs" / "heldout"


@pytest.mark.skipif(not (ROOT / ".venv" / "bin" / "acesql").exists(), reason="needs make setup")
def test_heldout_reads_finished_evaluations_back_and_says_spider_is_skipped(tmp_path):
    out = tmp_path / "heldout"
    for model in ("base", "grpo"):  # finished folders: metrics.json and rows.jsonl
        shutil.copytree(ROWS / f"test_ood-{model}-long", out / f"{model}-test_ood")
    proc = subprocess.run(
        ["sh", str(ROOT / "scripts" / "heldout"), str(tmp_path / "run"), str(out)],
        env={
            "PATH": "/usr/bin:/bin",
            "MODELS": "base grpo",
            "SPIDER": str(tmp_path / "none"),
            "DEV_LIMIT": "0",
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"no Spider at {tmp_path / 'none'}" in proc.stderr
    assert "done: " + str(out / "base-test_ood") in proc.stdout  # read back, not evaluated
    assert "== test_ood: base -> grpo" in proc.stdout
    side_by_side, paired = [x for x in proc.stdout.splitlines() if x.startswith("pipeline EX")]
    assert side_by_side.split()[2:] == ["13.0%", "31.0%", "+18.0"]
    assert paired.split()[2:7] == ["13.0%", "31.0%", "+18.0", "[+12.5,", "+24.0]"]
