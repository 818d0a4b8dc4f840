"""The pipeline's stages, in one place: their order (dvc.yaml's), what each does, where it runs.

The flows read it: `flows.pipeline` runs the stages in this order (those marked `main` unless
asked for others by name), `flows.dispatch` sends the `gpu` ones to the gpu pool's
deployments, and `flows.stages` describes each stage's flow with its line here. Adding a stage:
its module `acesql/stages/<name>.py`, its params section (a class in acesql/config/, a field of
`Params`, a block in params.yaml), its `dvc.yaml` entry, a line here, its flow in
flows/stages.py and its deployment in prefect.yaml. `tests/flows/test_stage_registry.py` checks that
they agree.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Stage:
    name: str
    does: str  # one line: the flow's description
    pool: str = "cpu"  # the work pool that runs it: gpu for the training stages
    distributed: bool = False  # trains with the `distributed` section's processes
    main: bool = False  # part of a plain pipeline run


REGISTRY: tuple[Stage, ...] = (
    Stage("base_model", "fetch and convert the model both roles start from.", main=True),
    Stage("data", "generate or load the dataset, filter it, write the prepared splits.", main=True),
    Stage("debug_data", "SQL debugging tasks drawn from the prepared splits.", main=True),
    Stage("sft_data", "the supervised targets of both roles.", main=True),
    Stage(
        "sft",
        "fine-tune both roles from the base model (resumes after a kill).",
        pool="gpu",
        distributed=True,
        main=True,
    ),
    Stage(
        "grpo_data",
        "the questions the SFT model solves only sometimes, and their pools.",
        main=True,
    ),
    Stage(
        "grpo",
        "joint dual-role GRPO from the SFT model (resumes after a kill).",
        pool="gpu",
        distributed=True,
        main=True,
    ),
    Stage(
        "evaluate", "pipeline EX and generator ability of `evaluate.model`, per split.", main=True
    ),
    Stage("ranker_data", "pairs of a correct and a wrong candidate for the ranker role."),
    Stage("ranker", "GRPO of the ranker role for position consistency (resumes).", pool="gpu"),
    Stage("prm_data", "Chain-of-CTE prefixes labelled by Monte Carlo from execution."),
    Stage("prm", "the trajectory score model of the process reward.", pool="gpu"),
    Stage("reasoning_sft", "the agent curriculum's imitation in one turn.", pool="gpu"),
    Stage("agent_sft", "imitation for the multi-turn SQL agent.", pool="gpu"),
    Stage("reasoning_grpo", "the agent curriculum's RL in one turn.", pool="gpu"),
    Stage("agent_grpo", "agentic RL of the SQL agent over whole trajectories.", pool="gpu"),
)
BY_NAME = {stage.name: stage for stage in REGISTRY}
STAGES = tuple(stage.name for stage in REGISTRY)  # dvc.yaml's order
MAIN_STAGES = tuple(stage.name for stage in REGISTRY if stage.main)
GPU_STAGES = tuple(stage.name for stage in REGISTRY if stage.pool == "gpu")
