"""The pipeline flow: the DVC stages in order, each a Prefect task wrapping `dvc repro <stage>`.

    python -m flows.pipeline [--stages data ...] [--force] [--gpu-deployments] [--profile long]

DVC decides what is stale (a stage reruns only when its deps or params changed) and owns the
cache; Prefect owns ordering, logs, retries and the UI. Without PREFECT_API_URL the flow runs
against Prefect's temporary local API, a server it starts and stops by itself. Run it from the
project root: DVC finds the project, and the stages their params and MLflow store, from there.

`gpu_deployments` (never | auto | always, flows/dispatch.py) says whether the sft and grpo
stages run as flow runs of their GPU deployments (`acesql-sft/sft-gpu`, `acesql-grpo/grpo-gpu`
of prefect.yaml, picked up by a worker of the `gpu` pool) or here; `auto` sends them only when a
worker polls that pool. The flow waits for each dispatched run, at most `gpu_start_timeout_s`
for a worker to pick it up. The deployments work in the same project folder (a shared disk,
or the same machine), so DVC sees their outputs and lock entries.

A pipeline that is cancelled (the Prefect UI, `prefect flow-run cancel`) or killed (SIGTERM,
Ctrl-C) stops the stage it runs, cancels the runs it dispatched and ends its MLflow run, and
the stage runs under it, as KILLED.

With `profile`, a named variant runs as a DVC experiment and the tracked files stay the
default: params.yaml and dvc.lock are kept aside, the values of `profiles/<profile>.yaml` set in
params.yaml (comments kept, the whole file validated before it is replaced) as `dvc exp run
--set-param` would, the finished run saved as the DVC experiment `<profile>-<date>-<time>`
(params, dvc.lock and the stages' outputs), and then params.yaml, dvc.lock and the outputs put
back as they were, as `dvc exp run --temp` leaves them. `make exps` (`dvc exp show
--only-changed`) compares the experiments, `dvc exp apply <name>` brings one into the
workspace. A profile run that stops keeps its values in params.yaml: the same command again
resumes it (DVC keeps the finished stages) and restores the default at the end. `long` is a
run of about an hour on 2 cores (65 minutes measured with AMX), `wide` training on wide
schemas (hours).

MLflow: one parent run per pipeline run, the stages' runs its children (flows/tracking.py);
after the evaluate stage the evaluated model is registered as `registered_model`.

Retries are for transient failures only: DVC's repository lock held by another process, an
unreachable tracking store. A stage command that fails is not retried; the task fails with
the last lines of its stderr.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import time
from collections.abc import Sequence
from datetime import datetime

# Without PREFECT_API_URL a temporary API server starts, migrating a new database on its first
# start: slower than Prefect's 20-second wait on a busy 2-core machine. Read at import.
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")

from prefect import flow, get_run_logger, task  # noqa: E402
from prefect.runtime import flow_run  # noqa: E402

from flows.dispatch import (  # noqa: E402
    GPU_STAGES,
    START_TIMEOUT_S,
    GpuMode,
    cancel_dispatched,
    dispatch,
    gpu_deployment,
    use_gpu_deployments,
)
from flows.params_file import apply_profile  # noqa: E402
from flows.registry import MAIN_STAGES, STAGES  # noqa: E402
from flows.tasks import (  # noqa: E402
    experiment_name,
    forget_default,
    keep_default,
    profile_left_over,
    project_lock,
    repro,
    restore_default,
    save_experiment,
)
from flows.tracking import (  # noqa: E402
    close_pipeline_run,
    end_killed_pipeline_run,
    log_stage_time,
    open_pipeline_run,
    register_model,
    tag_stage,
)

# what `make run`'s folder grows to (18 GB measured): environment, models, checkpoints and
# DVC's cached copies of the final models
RUN_DISK_GB = 20


def disk_warning(free_bytes: int, need_gb: float = RUN_DISK_GB) -> str | None:
    """What to say before a run when the disk has less room than a run takes, or None.

    >>> disk_warning(50 * 2**30) is None
    True
    >>> print(disk_warning(6 * 2**30))
    6.0 GB free here and a run's folder grows to about 20 GB (models, checkpoints, DVC's \
cached copies): a stage may stop on a full disk. Free space, or drop old cached versions \
with `dvc gc --workspace`
    """
    free = free_bytes / 2**30
    if free >= need_gb:
        return None
    return (
        f"{free:.1f} GB free here and a run's folder grows to about {need_gb} GB (models, "
        "checkpoints, DVC's cached copies): a stage may stop on a full disk. Free space, or "
        "drop old cached versions with `dvc gc --workspace`"
    )


@flow(name="acesql-pipeline")
def pipeline(
    stages: Sequence[str] = MAIN_STAGES,
    force: bool = False,
    gpu_deployments: GpuMode = "never",
    registered_model: str = "acesql",
    log_model_weights: bool = False,
    profile: str | None = None,
    gpu_start_timeout_s: float = START_TIMEOUT_S,
) -> None:
    """Reproduce the given DVC stages in pipeline order; stop at the first that fails.

    The stages run with params.yaml as it is (a `profile` first sets its values there); a
    stage's own deployment changes values of its section.

    Args:
        stages: The DVC stages to reproduce, run in pipeline order; base_model through
            evaluate unless the ranker's, the process reward model's or the agent's are named.
        force: Rerun every stage named even when DVC finds its deps and params unchanged.
        gpu_deployments: Where the training stages run: never (here), auto (on the gpu work
            pool's deployments when a worker polls it, else here), always (there, or stop).
        registered_model: The MLflow model name the evaluated model is registered under.
        log_model_weights: Copy the weights into the MLflow version too (by default it
            points at the DVC output that holds them).
        profile: A profile of profiles/ (long, wide) or a YAML file whose values the run
            uses, saved as a DVC experiment, the tracked files restored after; empty:
            params.yaml as it is.
        gpu_start_timeout_s: Seconds a dispatched training stage may wait for a gpu worker
            to pick it up before the pipeline cancels it and fails.
    """
    unknown = sorted(set(stages) - set(STAGES))
    if unknown:
        raise ValueError(f"unknown stages {unknown}; the pipeline has {list(STAGES)}")
    if profile:
        with project_lock():
            use_profile(profile)
    elif left_over := profile_left_over():
        get_run_logger().warning(left_over)
    short = disk_warning(shutil.disk_usage(".").free)
    if short:
        get_run_logger().warning(short)
    remote = any(s in GPU_STAGES for s in stages) and use_gpu_deployments(gpu_deployments)
    options = {"stages": list(stages), "force": force, "gpu_deployments": gpu_deployments}
    parent = open_pipeline_run(options)
    status = "FAILED"
    try:
        for stage in STAGES:
            if stage not in stages:
                continue
            started = time.monotonic()
            if remote and stage in GPU_STAGES:
                dispatch(stage, gpu_deployment(stage), force, parent, gpu_start_timeout_s)
            else:
                with project_lock():
                    repro(stage, force, parent)
                    tag_stage(stage, parent)
            log_stage_time(parent, stage, time.monotonic() - started)
        if "evaluate" in stages:
            register_model(parent, registered_model, log_model_weights)
        if profile:
            with project_lock():
                saved = save_experiment(
                    experiment_name(profile, datetime.now()),
                    [stage for stage in STAGES if stage in stages],
                    f"the pipeline with profile {profile}",
                )
                if saved:
                    restore_default(saved)
                else:  # the workspace is the run's only copy: left as it is
                    forget_default()
        status = "FINISHED"
    except BaseException as exc:
        if not isinstance(exc, Exception):  # cancelled, terminated, interrupted
            status = "KILLED"
            end_killed(parent)
        raise
    finally:
        if status != "KILLED":
            close_pipeline_run(parent, status)


def end_killed(parent_run_id: str | None) -> None:
    """What a cancelled or killed pipeline leaves in order: no dispatched run left waiting or
    running, its MLflow run and the stage runs under it ended as KILLED.

    Plain calls, not tasks: the flow is being torn down.
    """
    logger = get_run_logger()
    try:
        cancelled = cancel_dispatched(flow_run.id)
        if cancelled:
            logger.info("cancelled the runs this pipeline dispatched: %s", cancelled)
    except Exception as exc:  # noqa: BLE001 (teardown goes on to MLflow whatever failed here)
        logger.warning("could not cancel the runs this pipeline dispatched: %s", exc)
    try:
        end_killed_pipeline_run(parent_run_id)
    except Exception as exc:  # noqa: BLE001 (the flow's own error is the one to raise)
        logger.warning("could not end MLflow run %s as KILLED: %s", parent_run_id, exc)


@task(task_run_name="use profile {profile}")
def use_profile(profile: str) -> None:
    """Set the values of a profile in params.yaml, the default kept aside first (see the module
    doc); a profile that is refused leaves both as they were."""
    logger = get_run_logger()
    kept_now = keep_default()
    if not kept_now:
        logger.info("resuming a stopped profile run: the default kept then is restored at the end")
    try:
        names = apply_profile(profile)
    except Exception:
        if kept_now:
            forget_default()
        raise
    logger.info("profile %s: %d values set in params.yaml", profile, len(names))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m flows.pipeline", description=__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--stages", nargs="+", default=list(MAIN_STAGES), choices=STAGES)
    parser.add_argument("--force", action="store_true", help="rerun even if nothing changed")
    parser.add_argument(
        "--gpu-deployments",
        choices=("never", "auto", "always"),
        default="never",
        nargs="?",
        const="always",
        help="where sft and grpo run: never (here) [default], auto (the gpu pool's deployments "
        "when a worker polls it), always (there; alone: always). Needs a Prefect server",
    )
    parser.add_argument(
        "--gpu-start-timeout",
        type=float,
        default=START_TIMEOUT_S,
        metavar="S",
        help=f"seconds a dispatched run may wait for a gpu worker [{START_TIMEOUT_S:.0f}]",
    )
    parser.add_argument("--registered-model", default="acesql", help="registry name [acesql]")
    parser.add_argument(
        "--log-model-weights", action="store_true", help="copy the weights to MLflow too"
    )
    parser.add_argument(
        "--profile", help="run profiles/PROFILE.yaml's values (long, wide) as a DVC experiment"
    )
    args = parser.parse_args(argv)
    # Prefect turns SIGTERM into a crash of the flow and then re-sends it to the handler it
    # found: this one exits through Python's normal shutdown, which stops the temporary API
    # server this process started (the default handler would leave it running).
    signal.signal(signal.SIGTERM, _exit_on_signal)
    state = pipeline(
        args.stages,
        args.force,
        args.gpu_deployments,
        args.registered_model,
        args.log_model_weights,
        args.profile,
        args.gpu_start_timeout,
        return_state=True,
    )
    sys.exit(0 if state.is_completed() else 1)


def _exit_on_signal(signum, frame):
    raise SystemExit(128 + signum)


if __name__ == "__main__":
    main()
