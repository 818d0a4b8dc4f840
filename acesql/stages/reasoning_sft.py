"""The `reasoning_sft` stage: reasoning imitation, the agent curriculum's 1st stage.

    python -m acesql.stages.reasoning_sft [--params params.yaml]

The same code as `agent_sft` (see it for the curriculum) with the `reasoning_sft` section:
its demonstrations take one turn (`max_turns: 1`): say what is wrong, submit the fix. Writes
`{models_dir}/reasoning_sft` and `{models_dir}/reasoning_sft_metrics.json`.
"""

from __future__ import annotations

from acesql.stages.agent_sft import stage
from acesql.stages.common import run_stage


def main(argv=None) -> None:
    run_stage("reasoning_sft", __doc__, ("base", "reasoning_sft"), stage("reasoning_sft"), argv)


if __name__ == "__main__":
    main()
