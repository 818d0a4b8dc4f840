"""Running the GPU stages on the `gpu` work pool: where they go, a bounded wait, cancelling.

The pipeline's `gpu_deployments` chooses where sft and grpo run:

- `never` (`make run`): in the pipeline's own process, like every other stage;
- `auto` (the `acesql-pipeline/pipeline-cpu` deployment): on their deployments when a worker
  is polling the `gpu` pool when the pipeline starts, else here, saying so in the log;
- `always`: on their deployments; with no worker on the pool the pipeline stops at once,
  naming the command that starts one.

A dispatched run that no worker picks up within `start_timeout_s` is cancelled and fails the
pipeline with what it waited for and where; while a run waits or runs, the log says so every
minute. Dispatched runs carry the tag `acesql.pipeline:<flow run id>`, which is how
`cancel_dispatched` finds them when the pipeline itself is cancelled or killed.
"""

from __future__ import annotations

import time
from typing import Literal

from prefect import get_run_logger, task
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterTags
from prefect.client.schemas.objects import StateType, WorkerStatus
from prefect.deployments import run_deployment
from prefect.exceptions import ObjectNotFound
from prefect.runtime import flow_run
from prefect.states import Cancelled, Cancelling

from flows.registry import GPU_STAGES  # the training stages
from flows.tasks import StageFailed

GpuMode = Literal["never", "auto", "always"]
GPU_POOL = "gpu"  # prefect.yaml's pool of the sft and grpo deployments
START_TIMEOUT_S = 900.0  # how long a dispatched run may wait for a worker to pick it up
REPORT_EVERY_S = 60.0
POLL_S = 5.0
WORKER_COMMAND = f"make worker POOL={GPU_POOL}"


def gpu_deployment(stage: str) -> str:
    """The prefect.yaml deployment of a stage on the gpu pool, as `flow/deployment`."""
    return f"acesql-{stage}/{stage}-{GPU_POOL}"


def dispatch_tag(pipeline_run_id) -> str:
    """The tag a pipeline run puts on the flow runs it dispatches."""
    return f"acesql.pipeline:{pipeline_run_id}"


def pool_workers(pool: str) -> tuple[int, str]:
    """(online workers, what that means) of work pool `pool`; 0 when it is missing or paused."""
    with get_client(sync_client=True) as client:
        try:
            work_pool = client.read_work_pool(pool)
        except ObjectNotFound:
            return 0, f"there is no work pool {pool!r} (prefect work-pool create {pool})"
        if work_pool.is_paused:
            return 0, f"work pool {pool!r} is paused (prefect work-pool resume {pool})"
        workers = client.read_workers_for_work_pool(pool)
    online = sum(1 for worker in workers if worker.status == WorkerStatus.ONLINE)
    if not online:
        return 0, f"no worker polls work pool {pool!r} (on the GPU machine: {WORKER_COMMAND})"
    return online, f"{online} worker(s) online on work pool {pool!r}"


@task(task_run_name="choose where sft and grpo run ({mode})")
def use_gpu_deployments(mode: GpuMode) -> bool:
    """Whether the GPU stages go to their deployments (see the module doc)."""
    if mode == "never":
        return False
    logger = get_run_logger()
    online, why = pool_workers(GPU_POOL)
    if online:
        logger.info(
            "%s: the training stages run on %s", why, [gpu_deployment(s) for s in GPU_STAGES]
        )
        return True
    if mode == "always":
        raise StageFailed(
            f"gpu_deployments is 'always' but {why}. Start one, or run the pipeline with "
            "gpu_deployments 'auto' (runs them here when no worker is there) or 'never'."
        )
    logger.warning("%s: the training stages run here, in the pipeline's process", why)
    return False


@task(task_run_name="run {stage} on {deployment}")
def dispatch(
    stage: str,
    deployment: str,
    force: bool,
    parent_run_id: str | None,
    start_timeout_s: float = START_TIMEOUT_S,
) -> None:
    """Run the stage's flow as a run of `deployment` (a worker picks it up) and wait for it.

    Not retried: the remote flow retries its own transient failures.
    """
    parameters = {"force": force, "parent_run_id": parent_run_id}
    try:
        remote = run_deployment(
            deployment, parameters=parameters, timeout=0, tags=[dispatch_tag(flow_run.id)]
        )
    except ObjectNotFound:
        raise StageFailed(
            f"deployment {deployment} not found: run `prefect deploy --all` in the project folder"
        ) from None
    state = watch(remote, deployment, start_timeout_s, POLL_S)
    if not state.is_completed():
        raise StageFailed(
            f"{stage} ran as flow run {remote.name!r} of {deployment} and ended "
            f"{state.name}: {state.message}"
        )


def watch(remote, deployment: str, start_timeout_s: float, poll_s: float = POLL_S):
    """Wait for flow run `remote` to end; its final state.

    Cancels it and raises StageFailed when no worker has picked it up after `start_timeout_s`.
    """
    logger = get_run_logger()
    started = last_report = time.monotonic()
    state = remote.state
    with get_client(sync_client=True) as client:
        while state is None or not state.is_final():
            time.sleep(poll_s)
            state = client.read_flow_run(remote.id).state
            waited = time.monotonic() - started
            waiting = state is None or state.type == StateType.SCHEDULED
            if waiting and waited > start_timeout_s:
                client.set_flow_run_state(
                    remote.id, Cancelled(message="no worker picked it up"), force=True
                )
                _, why = pool_workers(GPU_POOL)
                raise StageFailed(
                    f"flow run {remote.name!r} of {deployment} was not picked up within "
                    f"{start_timeout_s:.0f} s ({why}); it was cancelled"
                )
            if time.monotonic() - last_report >= REPORT_EVERY_S:
                last_report = time.monotonic()
                name = state.name if state else "without a state"
                logger.info(
                    "waiting for flow run %r of %s on work pool %r: %s after %.0f s%s",
                    remote.name,
                    deployment,
                    GPU_POOL,
                    name,
                    waited,
                    f" (gives up at {start_timeout_s:.0f} s unless a worker takes it)"
                    if waiting
                    else "",
                )
    return state


def cancel_dispatched(pipeline_run_id) -> list[str]:
    """Cancel the unfinished flow runs a pipeline run dispatched; their names.

    A run still waiting for a worker is cancelled outright; one that started is set to
    Cancelling, which its worker acts on by stopping it.
    """
    cancelled = []
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                tags=FlowRunFilterTags(all_=[dispatch_tag(pipeline_run_id)])
            )
        )
        for run in runs:
            if run.state is None or run.state.is_final():
                continue
            message = "the pipeline that dispatched it was cancelled"
            waiting = run.state.type == StateType.SCHEDULED
            state = Cancelled(message=message) if waiting else Cancelling(message=message)
            client.set_flow_run_state(run.id, state, force=True)
            cancelled.append(run.name)
    return cancelled
