"""One flow per DVC stage (`acesql-<stage>`), its params.yaml section a typed parameter.

Each flow takes the stage's own section (the pydantic class of acesql/config/, so the
Prefect UI shows it as a form) and runs `dvc repro <stage>`. A run given a section writes it
into params.yaml first: the fields it sets replace params.yaml's (the UI's form sets them all;
from Python, `sft_flow(sft={"learning_rate": 1e-4})` sets one), the result is validated, then
written back keeping the file's comments. DVC reads params from params.yaml alone (it has no
per-run params file), so this is what keeps its cache honest: the changed values are in the
stage's dvc.lock entry, a later run with the same values reuses the outputs, and the file is
left as the run used it, as `dvc exp run --set-param` leaves it. `git diff params.yaml` shows
what a run changed; `git checkout params.yaml` goes back (the next run then reruns the stage).
Runs of one project folder take turns (`flows.tasks.project_lock`): a second run waits
until the first has written its params, reproduced its stage and tagged its runs.

The shared sections (`base`, `prompt`, `base_model.reasoning`) are not parameters here: they
change every stage, so they are edited in params.yaml itself. The training flows (sft, grpo)
also take `distributed`: how many processes the stage trains with on the worker that runs it
(`torchrun` on a GPU pool's node, one process per GPU with `processes: 0`). It is not a DVC
dependency (the numbers are the same), so a stage already reproduced needs `force` to rerun.
"""

from __future__ import annotations

from prefect import flow, get_run_logger, task

from acesql.config import (
    AgentGrpoSection,
    AgentSftSection,
    BaseModelSection,
    DataSection,
    DebugDataSection,
    DistributedSection,
    EvaluateSection,
    GrpoSection,
    PrmDataSection,
    PrmSection,
    RankerDataSection,
    RankerSection,
    RlDataSection,
    Section,
    SftDataSection,
    SftSection,
)
from flows.params_file import PARAMS, merge_section
from flows.tasks import project_lock, repro
from flows.tracking import tag_stage


@task(task_run_name="write {stage} params")
def write_params(stage: str, section: Section) -> None:
    """Merge the fields `section` sets into params.yaml's `stage` section.

    Raises ConfigError (and leaves the file alone) when the merged section is invalid.
    """
    overrides = section.model_dump(mode="json", exclude_unset=True)
    names = merge_section(stage, overrides, PARAMS)
    get_run_logger().info("%s: %s set in %s", stage, names, PARAMS)


def reproduce(
    stage: str,
    section: Section | None,
    force: bool,
    parent_run_id: str | None,
    distributed: DistributedSection | None = None,
) -> None:
    """What every stage flow does: its params (when given), `dvc repro`, its run's DVC tags."""
    with project_lock():
        if section is not None:
            write_params(stage, section)
        if distributed is not None:
            write_params("distributed", distributed)
        repro(stage, force, parent_run_id)
        tag_stage(stage, parent_run_id)


@flow(name="acesql-base_model")
def base_model_flow(
    base_model: BaseModelSection | None = None,
    force: bool = False,
    parent_run_id: str | None = None,
) -> None:
    """The base_model stage: fetch and convert the model both roles start from."""
    reproduce("base_model", base_model, force, parent_run_id)


@flow(name="acesql-data")
def data_flow(
    data: DataSection | None = None, force: bool = False, parent_run_id: str | None = None
) -> None:
    """The data stage: generate or load the dataset, filter it, write the prepared splits."""
    reproduce("data", data, force, parent_run_id)


@flow(name="acesql-debug_data")
def debug_data_flow(
    debug_data: DebugDataSection | None = None,
    force: bool = False,
    parent_run_id: str | None = None,
) -> None:
    """The debug_data stage: SQL debugging tasks drawn from the prepared splits."""
    reproduce("debug_data", debug_data, force, parent_run_id)


@flow(name="acesql-sft_data")
def sft_data_flow(
    sft_data: SftDataSection | None = None,
    force: bool = False,
    parent_run_id: str | None = None,
) -> None:
    """The sft_data stage: the supervised targets of both roles."""
    reproduce("sft_data", sft_data, force, parent_run_id)


@flow(name="acesql-sft")
def sft_flow(
    sft: SftSection | None = None,
    force: bool = False,
    parent_run_id: str | None = None,
    distributed: DistributedSection | None = None,
) -> None:
    """The sft stage: fine-tune both roles from the base model (resumes after a kill)."""
    reproduce("sft", sft, force, parent_run_id, distributed)


@flow(name="acesql-rl_data")
def rl_data_flow(
    rl_data: RlDataSection | None = None, force: bool = False, parent_run_id: str | None = None
) -> None:
    """The rl_data stage: the questions the SFT model solves only sometimes, and their pools."""
    reproduce("rl_data", rl_data, force, parent_run_id)


@flow(name="acesql-grpo")
def grpo_flow(
    grpo: GrpoSection | None = None,
    force: bool = False,
    parent_run_id: str | None = None,
    distributed: DistributedSection | None = None,
) -> None:
    """The grpo stage: joint dual-role GRPO from the SFT model (resumes after a kill)."""
    reproduce("grpo", grpo, force, parent_run_id, distributed)


@flow(name="acesql-evaluate")
def evaluate_flow(
    evaluate: EvaluateSection | None = None,
    force: bool = False,
    parent_run_id: str | None = None,
) -> None:
    """The evaluate stage: pipeline EX and generator ability of `evaluate.model`, per split."""
    reproduce("evaluate", evaluate, force, parent_run_id)


@flow(name="acesql-ranker_data")
def ranker_data_flow(
    ranker_data: RankerDataSection | None = None,
    force: bool = False,
    parent_run_id: str | None = None,
) -> None:
    """The ranker_data stage: pairs of a correct and a wrong candidate for the ranker role."""
    reproduce("ranker_data", ranker_data, force, parent_run_id)


@flow(name="acesql-ranker")
def ranker_flow(
    ranker: RankerSection | None = None,
    force: bool = False,
    parent_run_id: str | None = None,
) -> None:
    """The ranker stage: GRPO of the ranker role for position consistency (resumes)."""
    reproduce("ranker", ranker, force, parent_run_id)


@flow(name="acesql-prm_data")
def prm_data_flow(
    prm_data: PrmDataSection | None = None,
    force: bool = False,
    parent_run_id: str | None = None,
) -> None:
    """The prm_data stage: Chain-of-CTE prefixes labelled by Monte Carlo from execution."""
    reproduce("prm_data", prm_data, force, parent_run_id)


@flow(name="acesql-prm")
def prm_flow(
    prm: PrmSection | None = None,
    force: bool = False,
    parent_run_id: str | None = None,
) -> None:
    """The prm stage: the trajectory score model of the process reward."""
    reproduce("prm", prm, force, parent_run_id)


@flow(name="acesql-reasoning_sft")
def reasoning_sft_flow(
    reasoning_sft: AgentSftSection | None = None,
    force: bool = False,
    parent_run_id: str | None = None,
) -> None:
    """The reasoning_sft stage: the agent curriculum's imitation in one turn."""
    reproduce("reasoning_sft", reasoning_sft, force, parent_run_id)


@flow(name="acesql-agent_sft")
def agent_sft_flow(
    agent_sft: AgentSftSection | None = None,
    force: bool = False,
    parent_run_id: str | None = None,
) -> None:
    """The agent_sft stage: imitation for the multi-turn SQL agent."""
    reproduce("agent_sft", agent_sft, force, parent_run_id)


@flow(name="acesql-reasoning_grpo")
def reasoning_grpo_flow(
    reasoning_grpo: AgentGrpoSection | None = None,
    force: bool = False,
    parent_run_id: str | None = None,
) -> None:
    """The reasoning_grpo stage: the agent curriculum's RL in one turn."""
    reproduce("reasoning_grpo", reasoning_grpo, force, parent_run_id)


@flow(name="acesql-agent_grpo")
def agent_grpo_flow(
    agent_grpo: AgentGrpoSection | None = None,
    force: bool = False,
    parent_run_id: str | None = None,
) -> None:
    """The agent_grpo stage: agentic RL of the SQL agent over whole trajectories."""
    reproduce("agent_grpo", agent_grpo, force, parent_run_id)


STAGE_FLOWS = {
    "base_model": base_model_flow,
    "data": data_flow,
    "debug_data": debug_data_flow,
    "sft_data": sft_data_flow,
    "sft": sft_flow,
    "rl_data": rl_data_flow,
    "grpo": grpo_flow,
    "evaluate": evaluate_flow,
    "ranker_data": ranker_data_flow,
    "ranker": ranker_flow,
    "prm_data": prm_data_flow,
    "prm": prm_flow,
    "reasoning_sft": reasoning_sft_flow,
    "agent_sft": agent_sft_flow,
    "reasoning_grpo": reasoning_grpo_flow,
    "agent_grpo": agent_grpo_flow,
}
