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
import os
import sys
from collections.abc import Sequence

# Without PREFECT_API_URL a temporary API server starts, migrating a new database on its first
# start: slower than Prefect's 20-second wait on a busy 2-core machine. Read at import.
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")

from prefect import flow, get_run_logger, task  # noqa: E402
from prefect.deployments import run_deployment

from flows.params_file import apply_profile
from flows.tasks import StageFailed, project_lock, repro
from flows.tracking import close_pipeline_run, open_pipeline_run, register_model, tag_stage

# the stages of dvc.yaml, in pipeline order
STAGES = ("base_model", "data", "sft_data", "sft", "rl_data", "grpo", "evaluate")
GPU_STAGES = ("sft", "grpo")  # the stages prefect.yaml deploys to the gpu work pool


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
