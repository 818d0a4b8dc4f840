"""The `reasoning_grpo` stage: reasoning RL, the agent curriculum's 3rd stage.

    python -m acesql.stages.reasoning_grpo [--params params.yaml]

The same code as `agent_grpo` with the `reasoning_grpo` section: one turn per trajectory
(`max_turns: 1`), so the policy learns to diagnose and fix before it learns to explore.
Writes `{models_dir}/reasoning_grpo` and `{models_dir}/reasoning_grpo_metrics.json`.
"""

from __future__ import annotations

from acesql.stages.agent_grpo import stage
from acesql.stages.common import run_stage


def main(argv=None) -> None:
    run_stage("reasoning_grpo", __doc__, ("base", "reasoning_grpo"), stage("reasoning_grpo"), argv)


if __name__ == "__main__":
    main()
