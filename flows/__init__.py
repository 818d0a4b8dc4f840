"""Prefect flows: they orchestrate the DVC stages; the library (`acesql`) knows nothing of them.

However a flow is started (`make run`, `python -m flows.pipeline`, a worker), no usage report
leaves the machine and Prefect keeps its database in the project's `.prefect/`, as the Makefile
sets them; a value already in the environment wins.
"""

import os
from pathlib import Path

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_HOME", str(Path(__file__).resolve().parents[1] / ".prefect"))
