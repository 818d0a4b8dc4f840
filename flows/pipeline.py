"""The pipeline flow: the DVC stages in order, each a Prefect task wrapping `dvc repro <stage>`.

    python -m flows.pipeline [--stages data ...] [--force] [--gpu-deployments] [--profile long]

DVC decides what is stale (a stage reruns only when its deps or params changed) and owns the
cache; Prefect owns ordering, logs, retries and the UI. Without PREFECT_API_URL the flow runs
against Prefect's temporary local API, a server it starts and stops by itself. Run it from the
project root: DVC finds the project, and the stages their params and MLflow store, from there.

With `gpu_deployments` the sft and grpo stages run as flow runs of their GPU deployments
(`acesql-sft/gpu`, `acesql-grpo/gpu` of prefect.yaml, picked up by a worker of the `gpu` pool)
and the flow waits for each; the others run here. The deployments work in the same project
folder (a shared disk, or the same machine), so DVC sees their outputs and lock entries.

With `profile`, the values of `profiles/<profile>.yaml` are first set in params.yaml (comments
kept, the whole file validated before it is replaced): `cpu` is the 30-minute default of a
2-core machine, `long` a run of about 3 hours there. `dvc params diff` shows what changed.

MLflow: one parent run per pipeline run, the stages' runs its children (flows/tracking.py);
after the evaluate stage the evaluated model is registered as `registered_model`.

Retries are for transient failures only: DVC's repository lock held by another process, an
unreachable tracking store. A stage command that fails is not retried; the task fails with
the last lines of its stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Sequence
from pathlib import Path

# Without PREFECT_API_URL a temporary API server starts, migrating a new database on its first
# start: slower than Prefect's 20-second wait on a busy 2-core machine. Read at import.
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")

from prefect import flow, get_run_logger, task  # noqa: E402
from prefect.deployments import run_deployment
from prefect.runtime import flow_run
from prefect.tasks import exponential_backoff

from acesql.tracking import FLOW_RUN_ENV, PARENT_RUN_ENV
from flows.params_file import apply_profile
from flows.tracking import close_pipeline_run, open_pipeline_run, register_model, tag_stage

# the stages of dvc.yaml, in pipeline order
STAGES = ("base_model", "data", "sft_data", "sft", "rl_data", "grpo", "evaluate")
GPU_STAGES = ("sft", "grpo")  # the stages prefect.yaml deploys to the gpu work pool
STDERR_TAIL = 20  # lines of stderr a failed stage reports
DVC_LOCK_BUSY = "Unable to acquire lock"  # dvc/lock.py: another DVC process holds the repo


PROJECT_LOCK = Path(".dvc/tmp/acesql-flow.lock")


@contextlib.contextmanager
def project_lock():
    """Hold the project folder for one flow's params write + `dvc repro` + tags.

    A stage flow given overrides writes them into params.yaml, and DVC reads params.yaml when
    its stage runs and again when it writes dvc.lock: a second run writing the file in between
    would have the first stage's lock entry record values it never ran with. Runs of one
    project folder therefore take turns here (an flock on a file in .dvc/tmp, released when
    the process dies). A GPU stage the pipeline hands to a deployment is not held: the
    deployment's own flow takes the lock when it runs, maybe on this machine. Not reentrant:
    take it once per stage, around tasks, never around another flow.
    """
    PROJECT_LOCK.parent.mkdir(parents=True, exist_ok=True)
    with PROJECT_LOCK.open("a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            get_run_logger().info("another flow run holds %s: waiting for it", PROJECT_LOCK)
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


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
def repro(stage: str, force: bool = False, parent_run_id: str | None = None) -> None:
    """`dvc repro <stage>` (and what it depends on, when stale), output sent to the task's log.

    With `force` the stage itself reruns even when nothing changed (`--force --single-item`);
    its upstream stages are left alone, since the flow runs each listed stage in turn. The
    stage's MLflow run becomes a child of `parent_run_id`, tagged with this flow run's id.
    """
    logger = get_run_logger()
    options = ["--force", "--single-item"] if force else []
    command = [sys.executable, "-m", "dvc", "repro", *options, stage]
    # dvc.yaml says `python`: make it this interpreter, whether or not the venv is activated.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env[FLOW_RUN_ENV] = str(flow_run.id)
    env.pop(PARENT_RUN_ENV, None)
    if parent_run_id:
        env[PARENT_RUN_ENV] = parent_run_id
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


@task(task_run_name="run {stage} on {deployment}")
def dispatch(stage: str, deployment: str, force: bool, parent_run_id: str | None) -> None:
    """Run the stage's flow as a run of `deployment` (a worker picks it up) and wait for it.

    Not retried: the remote flow retries its own transient failures.
    """
    parameters = {"force": force, "parent_run_id": parent_run_id}
    remote = run_deployment(deployment, parameters=parameters, timeout=None)
    state = remote.state
    if state is None or not state.is_completed():
        ended = f"{state.name}: {state.message}" if state else "without a state"
        raise StageFailed(
            f"{stage} ran as flow run {remote.name!r} of {deployment} and ended {ended}"
        )


@flow(name="acesql-pipeline")
def pipeline(
    stages: Sequence[str] = STAGES,
    force: bool = False,
    gpu_deployments: bool = False,
    registered_model: str = "acesql",
    log_model_weights: bool = False,
    profile: str | None = None,
) -> None:
    """Reproduce the given DVC stages in pipeline order; stop at the first that fails.

    `gpu_deployments`: run sft and grpo on the gpu work pool's deployments. After evaluate,
    the evaluated model is registered in MLflow as `registered_model` (its weights copied to
    the tracking store only with `log_model_weights`; see flows/tracking.py).
    """
    unknown = sorted(set(stages) - set(STAGES))
    if unknown:
        raise ValueError(f"unknown stages {unknown}; the pipeline has {list(STAGES)}")
    if profile:
        with project_lock():
            use_profile(profile)
    options = {"stages": list(stages), "force": force, "gpu_deployments": gpu_deployments}
    parent = open_pipeline_run(options)
    status = "FAILED"
    try:
        for stage in STAGES:
            if stage not in stages:
                continue
            if gpu_deployments and stage in GPU_STAGES:
                dispatch(stage, gpu_deployment(stage), force, parent)
            else:
                with project_lock():
                    repro(stage, force, parent)
                    tag_stage(stage, parent)
        if "evaluate" in stages:
            register_model(parent, registered_model, log_model_weights)
        status = "FINISHED"
    finally:
        close_pipeline_run(parent, status)


@task(task_run_name="use profile {profile}")
def use_profile(profile: str) -> None:
    """Set the values of a profile in params.yaml (see the module doc)."""
    names = apply_profile(profile)
    get_run_logger().info("profile %s: %d values set in params.yaml", profile, len(names))


def gpu_deployment(stage: str) -> str:
    """The prefect.yaml deployment of a stage on the gpu pool, as `flow/deployment`."""
    return f"acesql-{stage}/gpu"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m flows.pipeline", description=__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--stages", nargs="+", default=list(STAGES), choices=STAGES)
    parser.add_argument("--force", action="store_true", help="rerun even if nothing changed")
    parser.add_argument(
        "--gpu-deployments",
        action="store_true",
        help="run sft and grpo on the gpu pool's deployments (needs a Prefect server)",
    )
    parser.add_argument("--registered-model", default="acesql", help="registry name [acesql]")
    parser.add_argument(
        "--log-model-weights", action="store_true", help="copy the weights to MLflow too"
    )
    parser.add_argument(
        "--profile", help="set profiles/PROFILE.yaml's values in params.yaml first (cpu, long)"
    )
    args = parser.parse_args(argv)
    state = pipeline(
        args.stages,
        args.force,
        args.gpu_deployments,
        args.registered_model,
        args.log_model_weights,
        args.profile,
        return_state=True,
    )
    sys.exit(0 if state.is_completed() else 1)


if __name__ == "__main__":
    main()
