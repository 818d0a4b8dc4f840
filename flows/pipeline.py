"""The pipeline flow: the DVC stages in order, each a Prefect task wrapping `dvc repro <stage>`.

    python -m flows.pipeline [--stages data ...] [--force]

DVC decides what is stale (a stage reruns only when its deps or params changed) and owns the
cache; Prefect owns ordering, logs, retries and the UI. Without PREFECT_API_URL the flow runs
against Prefect's temporary local API, a server it starts and stops by itself. Run it from the
project root: DVC finds the project, and the stages their params and MLflow store, from there.

Retries are for transient failures only: DVC's repository lock held by another process. A
stage command that fails is not retried; the task fails with the last lines of its stderr.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Sequence
from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.tasks import exponential_backoff

# the stages of dvc.yaml, in pipeline order
STAGES = ("base_model", "data", "sft_data", "sft", "rl_data", "grpo", "evaluate")
STDERR_TAIL = 20  # lines of stderr a failed stage reports
DVC_LOCK_BUSY = "Unable to acquire lock"  # dvc/lock.py: another DVC process holds the repo


class StageFailed(RuntimeError):
    """The stage's command exited non-zero: rerunning it as is would fail again."""


class DvcBusy(RuntimeError):
    """Another DVC process holds the repository lock: worth retrying a little later."""


def _retry_only_if_busy(task, task_run, state) -> bool:
    """Prefect's retry condition: retry only when the failure was a busy DVC lock."""
    return isinstance(state.result(raise_on_failure=False), DvcBusy)


@task(
    task_run_name="dvc repro {stage}",
    retries=3,
    retry_delay_seconds=exponential_backoff(backoff_factor=10),
    retry_jitter_factor=0.5,
    retry_condition_fn=_retry_only_if_busy,
)
def repro(stage: str, force: bool = False) -> None:
    """`dvc repro <stage>` (and what it depends on, when stale), output sent to the task's log.

    With `force` the stage itself reruns even when nothing changed (`--force --single-item`);
    its upstream stages are left alone, since the flow runs each listed stage in turn.
    """
    logger = get_run_logger()
    options = ["--force", "--single-item"] if force else []
    command = [sys.executable, "-m", "dvc", "repro", *options, stage]
    # dvc.yaml says `python`: make it this interpreter, whether or not the venv is activated.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    logger.info("$ %s", " ".join(command[2:]))
    proc = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    tail: deque[str] = deque(maxlen=STDERR_TAIL)

    def pump_stderr():
        for line in proc.stderr:
            tail.append(line.rstrip())
            logger.info(line.rstrip())

    reader = threading.Thread(target=pump_stderr, daemon=True)
    reader.start()
    for line in proc.stdout:
        logger.info(line.rstrip())
    reader.join()
    code = proc.wait()
    if code != 0:
        message = f"dvc repro {stage} exited with {code}; last lines of stderr:\n" + "\n".join(tail)
        busy = any(DVC_LOCK_BUSY in line for line in tail)
        raise (DvcBusy if busy else StageFailed)(message)


@flow(name="acesql-pipeline")
def pipeline(stages: Sequence[str] = STAGES, force: bool = False) -> None:
    """Reproduce the given DVC stages in pipeline order; stop at the first that fails."""
    unknown = sorted(set(stages) - set(STAGES))
    if unknown:
        raise ValueError(f"unknown stages {unknown}; the pipeline has {list(STAGES)}")
    for stage in STAGES:
        if stage in stages:
            repro(stage, force)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m flows.pipeline", description=__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--stages", nargs="+", default=list(STAGES), choices=STAGES)
    parser.add_argument("--force", action="store_true", help="rerun even if nothing changed")
    args = parser.parse_args(argv)
    state = pipeline(args.stages, args.force, return_state=True)
    sys.exit(0 if state.is_completed() else 1)


if __name__ == "__main__":
    main()
