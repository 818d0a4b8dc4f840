"""The `agent_sft` stage: tool-use imitation, the agent curriculum's 2nd stage.

    python -m acesql.stages.agent_sft [--params params.yaml]

The curriculum (BIRD-RL's four stages): `reasoning_sft` (imitation in one turn: diagnose and
submit) -> `agent_sft` (imitation over several turns: run, look, submit) -> `reasoning_grpo`
(RL in one turn) -> `agent_grpo` (RL over whole trajectories). The imitation stages run this
module's code with their own section (`reasoning_sft` has `max_turns: 1`).

Reads `base` and `agent_sft`; `{data_dir}/debug/train.jsonl` (the debug_data stage),
`{data_dir}/prepared/train.jsonl` (questions) and the model `agent_sft.model`. Builds
demonstrations (`acesql.agent.demos`), run for real on replicas so that each observation is
what the database returned: every chosen debugging task worked over `max_turns` turns (run
the reported SQL, look, submit), a `single_turn_share` of them also in one turn (diagnose and
submit), and `question_ratio` text-to-SQL questions per task (look, submit). One SFT record
per turn; observations are in the prompt, never in the loss. Trains with `training` (the
`sft` trainer: checkpoints, resume, time budget) and writes `{models_dir}/agent_sft` and
`{models_dir}/agent_sft_metrics.json`.
"""

from __future__ import annotations

import tempfile

from tqdm import tqdm

from acesql.agent.demos import debug_demonstration, question_demonstration
from acesql.agent.tasks import DebugAgentTask, QuestionAgentTask, require_model, training_mix
from acesql.models.base_model import load_tokenizer
from acesql.sft.trainer import train_sft
from acesql.sql.replicas import Replicas
from acesql.stages.common import run_stage, write_metrics


def build_records(base, cfg, tokenizer, name: str) -> tuple[list[dict], dict]:

    tasks, questions, rng = training_mix(base.data_dir, cfg, f"{base.seed}:{name}")
    single = set(rng.sample(range(len(tasks)), round(cfg.single_turn_share * len(tasks))))
    records, counts = [], {"debug_tasks": len(tasks), "single_turn": len(single)}
    with (
        tempfile.TemporaryDirectory(prefix="acesql-replicas-") as scratch,
        Replicas(scratch, timeout_s=cfg.timeout_s) as replicas,
    ):
        for i, task in enumerate(tqdm(tasks, desc="demonstrations", unit="task")):
            agent_task = DebugAgentTask(task)
            records += debug_demonstration(agent_task, replicas, tokenizer, cfg.max_turns)
            if i in single:
                records += debug_demonstration(agent_task, replicas, tokenizer, 1)
        for example in questions:
            records += question_demonstration(
                QuestionAgentTask(example), replicas, tokenizer, cfg.max_turns
            )
    counts["questions"] = len(questions)
    counts["records"] = len(records)
    rng.shuffle(records)
    return records, counts


def stage(name: str):
    """The work of an imitation stage whose section and outputs are called `name`."""

    def work(s: dict, tracker) -> dict:

        base, cfg = s["base"], s[name]
        model = require_model(cfg, name)
        records, counts = build_records(base, cfg, load_tokenizer(model), name)
        summary = train_sft(
            model, records, base.models_dir / name, cfg.training, tracker, seed=base.seed
        )
        metrics = {**counts, **{k: v for k, v in summary.items() if k != "losses"}}
        write_metrics(base.models_dir / f"{name}_metrics.json", metrics, name)
        tracker.log_metrics(
            {f"{name}/{k}": v for k, v in metrics.items() if isinstance(v, int | float)}
        )
        return metrics

    return work


def main(argv=None) -> None:
    run_stage("agent_sft", __doc__, ("base", "agent_sft"), stage("agent_sft"), argv)


if __name__ == "__main__":
    main()
