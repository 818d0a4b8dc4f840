"""The `agent_grpo` stage: agentic RL, the agent curriculum's 4th stage (see agent_sft.py).

    python -m acesql.stages.agent_grpo [--params params.yaml]

`reasoning_grpo` (the 3rd stage) runs this module's code with its own section, one turn.

Reads `base` and `agent_grpo`; `{data_dir}/debug/train.jsonl`, `{data_dir}/prepared/train.jsonl`
and the model `agent_grpo.model` (by default the agent_sft stage's). Trains on a mixture of
debugging tasks and text-to-SQL questions (`question_ratio` per task), each rolled out
`group_size` times per step on private replica views (`acesql.agent.trainer`). Writes
`{models_dir}/agent_grpo` and `{models_dir}/agent_grpo_metrics.json` (rewards, success,
turns per step), also logged to MLflow.
"""

from __future__ import annotations

import tempfile

from tqdm import tqdm

from acesql.agent.tasks import DebugAgentTask, QuestionAgentTask, require_model, training_mix
from acesql.agent.trainer import AgentGrpoTrainer
from acesql.sql.replicas import Replicas
from acesql.stages.common import run_stage, write_metrics


def stage(name: str):
    """The work of an RL stage whose section and outputs are called `name`."""

    def work(s: dict, tracker) -> dict:

        base, cfg = s["base"], s[name]
        model = require_model(cfg, name)
        debug, questions, _ = training_mix(base.data_dir, cfg, f"{base.seed}:{name}")
        tasks = [DebugAgentTask(t) for t in debug] + [QuestionAgentTask(e) for e in questions]
        with (
            tempfile.TemporaryDirectory(prefix="acesql-replicas-") as scratch,
            Replicas(scratch, timeout_s=cfg.timeout_s) as replicas,
        ):
            trainer = AgentGrpoTrainer(model, tasks, replicas, cfg, seed=base.seed, tracker=tracker)
            bar = tqdm(total=cfg.steps, desc=name, unit="step")
            try:
                summary = trainer.train(base.models_dir / name, progress=bar.update)
            finally:
                bar.close()
        metrics = {"debug_tasks": len(debug), "questions": len(tasks) - len(debug), **summary}
        write_metrics(base.models_dir / f"{name}_metrics.json", metrics, name)
        return {k: v for k, v in metrics.items() if k != "history"}

    return work


def main(argv=None) -> None:
    run_stage("agent_grpo", __doc__, ("base", "agent_grpo"), stage("agent_grpo"), argv)


if __name__ == "__main__":
    main()
