"""The `agent_grpo` stage: agentic RL of the SQL agent, GRPO over whole trajectories.

    python -m acesql.stages.agent_grpo [--params params.yaml]

Reads `base` and `agent_grpo`; `{data_dir}/debug/train.jsonl`, `{data_dir}/prepared/train.jsonl`
and the model `agent_grpo.model` (by default the agent_sft stage's). Trains on a mixture of
debugging tasks and text-to-SQL questions (`question_ratio` per task), each rolled out
`group_size` times per step on private replica views (`acesql.agent.trainer`). Writes
`{models_dir}/agent_grpo` and `{models_dir}/agent_grpo_metrics.json` (rewards, success,
turns per step), also logged to MLflow.
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path

from tqdm import tqdm

from acesql.data.loaders import read_prepared
from acesql.errors import DataError
from acesql.stages.common import run_stage, write_metrics


def work(s: dict, tracker) -> dict:
    from acesql.agent.evaluate import spread
    from acesql.agent.tasks import DebugAgentTask, QuestionAgentTask
    from acesql.agent.trainer import AgentGrpoTrainer
    from acesql.debug.task import read_tasks
    from acesql.sql.replicas import ReplicaPool

    base, cfg = s["base"], s["agent_grpo"]
    model = Path(cfg.model)
    if not model.is_dir():
        raise DataError(
            f"{model} not found: run the agent_sft stage first, or set agent_grpo.model"
        )
    debug = spread(read_tasks(base.data_dir / "debug" / "train.jsonl"), cfg.max_tasks)
    questions = read_prepared(base.data_dir / "prepared" / "train.jsonl")
    rng = random.Random(f"{base.seed}:agent_grpo")
    rng.shuffle(questions)
    tasks = [DebugAgentTask(t) for t in debug]
    tasks += [QuestionAgentTask(e) for e in questions[: round(cfg.question_ratio * len(debug))]]
    with (
        tempfile.TemporaryDirectory(prefix="acesql-replicas-") as scratch,
        ReplicaPool(scratch, timeout_s=cfg.timeout_s) as pool,
    ):
        trainer = AgentGrpoTrainer(model, tasks, pool, cfg, seed=base.seed, tracker=tracker)
        bar = tqdm(total=cfg.steps, desc="agent_grpo", unit="step")
        try:
            summary = trainer.train(base.models_dir / "agent_grpo", progress=bar.update)
        finally:
            bar.close()
    metrics = {"debug_tasks": len(debug), "questions": len(tasks) - len(debug), **summary}
    write_metrics(base.models_dir / "agent_grpo_metrics.json", metrics)
    return {k: v for k, v in metrics.items() if k != "history"}


def main(argv=None) -> None:
    run_stage("agent_grpo", __doc__, ("base", "agent_grpo"), work, argv)


if __name__ == "__main__":
    main()
