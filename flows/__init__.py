"""Prefect flows: they orchestrate the DVC stages; the library (`acesql`) knows nothing of them.

However a flow is started (`make run`, `python -m flows.pipeline`, a worker), no usage report
leaves the machine (`telemetry.env`, which the Makefile includes too) and Prefect keeps its
database in the project's `.prefect/`; a value already in the environment wins.
"""

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def telemetry_defaults(path: Path = ROOT / "telemetry.env") -> dict[str, str]:
    """The `KEY=value` lines of `telemetry.env`; none where the file is not there (a worker
    image sets them in its own environment)."""
    if not path.is_file():
        return {}
    lines = (line.strip() for line in path.read_text().splitlines())
    pairs = (line.split("=", 1) for line in lines if line and not line.startswith("#"))
    return {key.strip(): value.strip() for key, value in pairs}


for _key, _value in telemetry_defaults().items():
    os.environ.setdefault(_key, _value)
os.environ.setdefault("PREFECT_HOME", str(ROOT / ".prefect"))
