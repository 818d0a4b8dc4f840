"""One flow per DVC stage (`acesql-<stage>`), the values to change in its params.yaml section
a typed parameter.

Each flow takes the overrides of its stage's section (`flows.params_file.overrides_model` of
the pydantic class of acesql/config/: every field optional, none with a default, so the
Prefect UI shows a form that starts empty, each field with its description) and runs `dvc
repro <stage>`. A run given overrides writes them into params.yaml first: the fields it sets
replace params.yaml's, every other field keeps the file's value (from Python,
`sft_flow(sft={"learning_rate": 1e-4})` sets one), the result is validated, then written back
keeping the file's comments; the log shows each value that changed as `old -> new`. DVC reads
params from params.yaml alone (it has no per-run params file), so this is what keeps its
cache honest: the changed values are in the stage's dvc.lock entry, a later run with the same
values reuses the outputs, and the file is left as the run used it, as `dvc exp run
--set-param` leaves it. `git diff params.yaml` shows what a run changed; `git checkout
params.yaml` goes back (the next run then reruns the stage). Runs of one project folder take
turns (`flows.tasks.project_lock`): a second run waits until the first has written its
params, reproduced its stage and tagged its runs.

The shared sections (`base`, `prompt`, `base_model.reasoning`) are not parameters here: they
change every stage, so they are edited in params.yaml itself. The training flows (sft, grpo)
also take `distributed`: how many processes the stage trains with on the worker that runs it
(`torchrun` on a GPU pool's node, one process per GPU with `processes: 0`). It is not a DVC
dependency (the numbers are the same), so a stage already reproduced needs `force` to rerun.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable

from prefect import flow, get_run_logger, task

from acesql.config import (
    AgentGrpoSection,
    AgentSftSection,
    BaseModelSection,
    DataSection,
    DebugDataSection,
    DistributedSection,
    EvaluateSection,
    GrpoDataSection,
    GrpoSection,
    PrmDataSection,
    PrmSection,
    RankerDataSection,
    RankerSection,
    SftDataSection,
    SftSection,
)
from flows.params_file import PARAMS, UNSET, Overrides, merge_section, overrides_model
from flows.registry import BY_NAME, STAGES
from flows.tasks import project_lock, repro
from flows.tracking import tag_stage

# the flows' parameters: the values a run changes in each section
BaseModelOverrides = overrides_model(BaseModelSection)
DataOverrides = overrides_model(DataSection)
DebugDataOverrides = overrides_model(DebugDataSection)
SftDataOverrides = overrides_model(SftDataSection)
SftOverrides = overrides_model(SftSection)
GrpoDataOverrides = overrides_model(GrpoDataSection)
GrpoOverrides = overrides_model(GrpoSection)
EvaluateOverrides = overrides_model(EvaluateSection)
RankerDataOverrides = overrides_model(RankerDataSection)
RankerOverrides = overrides_model(RankerSection)
PrmDataOverrides = overrides_model(PrmDataSection)
PrmOverrides = overrides_model(PrmSection)
AgentSftOverrides = overrides_model(AgentSftSection)
AgentGrpoOverrides = overrides_model(AgentGrpoSection)
DistributedOverrides = overrides_model(DistributedSection)


@task(task_run_name="write {stage} params")
def write_params(stage: str, section: Overrides) -> None:
    """Merge the fields `section` sets into params.yaml's `stage` section; log each value that
    changed as `old -> new`.

    Raises ConfigError (and leaves the file alone) when the merged section is invalid.
    """
    logger = get_run_logger()
    overrides = section.model_dump(mode="json", exclude_unset=True)
    if not overrides:
        logger.info("%s: no values given, %s left as it is", stage, PARAMS)
        return
    changes = merge_section(stage, overrides, PARAMS)
    for name, old, new in changes:
        logger.info("%s: %s -> %s", name, _shown(old), _shown(new))
    if not changes:
        logger.info("%s: %s already holds the values given", stage, PARAMS)


def _shown(value) -> str:
    """A params.yaml value as a log line shows it (JSON: strings quoted, null)."""
    return value if value is UNSET else json.dumps(value)


STAGE_PARAMETERS = """
Args:
    {stage}: Values to change in params.yaml's `{stage}` section before the stage runs; a
        field left empty keeps the file's value. The merged section is validated, then
        written (comments kept; `git diff params.yaml` shows it) and used by `dvc repro`.
    force: Rerun the stage even when DVC finds its deps and params unchanged.
    parent_run_id: The MLflow run to nest the stage's run under (the pipeline sets it);
        empty: a run of its own.
"""
DISTRIBUTED_PARAMETER = """
    distributed: Values to change in params.yaml's `distributed` section: the processes the
        stage trains with on this worker (0: one per GPU). Not a DVC dependency: a stage
        already reproduced needs force to rerun.
"""


def stage_flow(stage: str) -> Callable:
    """`@flow(name="acesql-<stage>")`, described by the stage's line in `flows.registry` and
    the parameters' descriptions (the form shows them)."""

    def decorate(fn):
        fn.__doc__ = f"The {stage} stage: {BY_NAME[stage].does}\n" + STAGE_PARAMETERS.format(
            stage=stage
        )
        if "distributed" in inspect.signature(fn).parameters:
            fn.__doc__ = fn.__doc__.rstrip("\n") + DISTRIBUTED_PARAMETER
        return flow(name=f"acesql-{stage}")(fn)

    return decorate


def reproduce(
    stage: str,
    section: Overrides | None,
    force: bool,
    parent_run_id: str | None,
    distributed: Overrides | None = None,
) -> None:
    """What every stage flow does: its params (when given), `dvc repro`, its run's DVC tags."""
    with project_lock():
        if section is not None:
            write_params(stage, section)
        if distributed is not None:
            write_params("distributed", distributed)
        repro(stage, force, parent_run_id)
        tag_stage(stage, parent_run_id)


@stage_flow("base_model")
def base_model_flow(
    base_model: BaseModelOverrides | None = None,
    force: bool = False,
    parent_run_id: str | None = None,
) -> None:
    reproduce("base_model", base_model, force, parent_run_id)


@stage_flow("data")
def data_flow(
    data: DataOverrides | None = None, force: bool = False, parent_run_id: str | None = None
) -> None:
    reproduce("data", data, force, parent_run_id)


@stage_flow("debug_data")
def debug_data_flow(
    debug_data: DebugDataOverrides | None = None,
    force: bool = False,
    parent_run_id: str | None = None,
) -> None:
    reproduce("debug_data", debug_data, force, parent_run_id)


@stage_flow("sft_data")
def sft_data_flow(
    sft_data: SftDataOverrides | None = None,
    force: bool = False,
    parent_run_id: str | None = None,
) -> None:
    reproduce("sft_data", sft_data, force, parent_run_id)


@stage_flow("sft")
def sft_flow(
    sft: SftOverrides | None = None,
    force: bool = False,
    parent_run_id: str | None = None,
    distributed: DistributedOverrides | None = None,
) -> None:
    reproduce("sft", sft, force, parent_run_id, distributed)


@stage_flow("grpo_data")
def grpo_data_flow(
    grpo_data: GrpoDataOverrides | None = None,
    force: bool = False,
    parent_run_id: str | None = None,
) -> None:
    reproduce("grpo_data", grpo_data, force, parent_run_id)


@stage_flow("grpo")
def grpo_flow(
    grpo: GrpoOverrides | None = None,
    force: bool = False,
    parent_run_id: str | None = None,
    distributed: DistributedOverrides | None = None,
) -> None:
    reproduce("grpo", grpo, force, parent_run_id, distributed)


@stage_flow("evaluate")
def evaluate_flow(
    evaluate: EvaluateOverrides | None = None,
    force: bool = False,
    parent_run_id: str | None = None,
) -> None:
    reproduce("evaluate", evaluate, force, parent_run_id)


@stage_flow("ranker_data")
def ranker_data_flow(
    ranker_data: RankerDataOverrides | None = None,
    force: bool = False,
    parent_run_id: str | None = None,
) -> None:
    reproduce("ranker_data", ranker_data, force, parent_run_id)


@stage_flow("ranker")
def ranker_flow(
    ranker: RankerOverrides | None = None,
    force: bool = False,
    parent_run_id: str | None = None,
) -> None:
    reproduce("ranker", ranker, force, parent_run_id)


@stage_flow("prm_data")
def prm_data_flow(
    prm_data: PrmDataOverrides | None = None,
    force: bool = False,
    parent_run_id: str | None = None,
) -> None:
    reproduce("prm_data", prm_data, force, parent_run_id)


@stage_flow("prm")
def prm_flow(
    prm: PrmOverrides | None = None,
    force: bool = False,
    parent_run_id: str | None = None,
) -> None:
    reproduce("prm", prm, force, parent_run_id)


@stage_flow("reasoning_sft")
def reasoning_sft_flow(
    reasoning_sft: AgentSftOverrides | None = None,
    force: bool = False,
    parent_run_id: str | None = None,
) -> None:
    reproduce("reasoning_sft", reasoning_sft, force, parent_run_id)


@stage_flow("agent_sft")
def agent_sft_flow(
    agent_sft: AgentSftOverrides | None = None,
    force: bool = False,
    parent_run_id: str | None = None,
) -> None:
    reproduce("agent_sft", agent_sft, force, parent_run_id)


@stage_flow("reasoning_grpo")
def reasoning_grpo_flow(
    reasoning_grpo: AgentGrpoOverrides | None = None,
    force: bool = False,
    parent_run_id: str | None = None,
) -> None:
    reproduce("reasoning_grpo", reasoning_grpo, force, parent_run_id)


@stage_flow("agent_grpo")
def agent_grpo_flow(
    agent_grpo: AgentGrpoOverrides | None = None,
    force: bool = False,
    parent_run_id: str | None = None,
) -> None:
    reproduce("agent_grpo", agent_grpo, force, parent_run_id)


# the flow of every stage of the registry, in its order
STAGE_FLOWS = {stage: globals()[f"{stage}_flow"] for stage in STAGES}
