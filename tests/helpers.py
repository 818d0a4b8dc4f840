"""What several test modules share: running a stage as DVC does, and a project's prepared
splits from the generated fixture dataset. The stand-ins for engines, judges and tokenizers
are in tests/fakes.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from acesql.data.loaders import load_dataset


def run_stage(name: str, params: Path, timeout: float = 280) -> subprocess.CompletedProcess:
    """`python -m acesql.stages.<name> --params <params>` in a subprocess, output captured."""
    env = dict(os.environ, MLFLOW_DISABLE_TELEMETRY="true", TOKENIZERS_PARALLELISM="false")
    return subprocess.run(
        [sys.executable, "-m", f"acesql.stages.{name}", "--params", str(params)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


def write_prepared(data_dir: Path, synth_dir: Path, splits: tuple[str, ...]) -> None:
    """`data_dir/prepared/<split>.jsonl` for each split of the fixture's synthetic dataset."""
    (data_dir / "prepared").mkdir(parents=True, exist_ok=True)
    for split in splits:
        examples = load_dataset(synth_dir, "synth", split).examples
        (data_dir / "prepared" / f"{split}.jsonl").write_text(
            "".join(json.dumps(e.to_dict()) + "\n" for e in examples)
        )
