"""The agent's two kinds of task: a debugging task, and a text-to-SQL question.

Both open with the system message of `templates/prompts.yaml`'s `agent` section and a user
message holding the schema (without sample values: the agent can look at the data itself).
"""

from __future__ import annotations

import random
from functools import cache
from pathlib import Path

from acesql.agent.episode import AgentTask, Score
from acesql.data.loaders import Example, read_prepared
from acesql.debug.check import check_fix
from acesql.debug.task import DebugTask, read_tasks, spread
from acesql.errors import DataError
from acesql.models.prompts import templates
from acesql.sql.columns import has_order_by
from acesql.sql.matching import execution_match
from acesql.sql.replicas import Replicas, split_statements
from acesql.sql.sandbox import execute
from acesql.sql.schema import Schema


@cache
def _schema_text(db_path: str) -> str:
    return Schema.from_sqlite(db_path, n_samples=0).render(None, samples=False)


def _only_turn(max_turns: int) -> str:
    """What the opening adds when the first turn is also the last (one-turn stages): without
    it, a policy taught to explore first spends its only turn on a probe."""
    return templates()["agent"]["only_turn"] if max_turns == 1 else ""


def _opening(user: str) -> list[dict]:
    return [
        {"role": "system", "content": templates()["agent"]["system"]},
        {"role": "user", "content": user},
    ]


class DebugAgentTask(AgentTask):
    """A `DebugTask` for the agent: the issue to fix, checked by `acesql.debug.check`."""

    def __init__(self, task: DebugTask):
        self.task = task
        self.task_id, self.db_path = task.task_id, task.db_path
        self.setup_sql = list(task.preprocess_sql)

    def messages(self, max_turns: int) -> list[dict]:
        setup = ""
        if self.setup_sql:
            setup = "\n\nAlready run on this database:\n" + "\n".join(
                s.rstrip().rstrip(";") + ";" for s in self.setup_sql
            )
        user = templates()["agent"]["debug"].format(
            schema=_schema_text(self.db_path),
            setup=setup,
            issue=self.task.issue,
            turns=max_turns,
            last_call=_only_turn(max_turns),
        )
        return _opening(user)

    def score(self, submission: str, replicas: Replicas) -> Score:
        verdict = check_fix(self.task, submission, replicas)
        query = self.task.category == "query"
        got = verdict.fix_results[-1] if query and verdict.fix_results else None
        expected = verdict.solution_results[-1] if query and verdict.solution_results else None
        return Score(verdict.passed, verdict.reason, got, expected)


class QuestionAgentTask(AgentTask):
    """A text-to-SQL question for the agent: it may probe, then submits one query, matched
    against the gold query's result under `match_mode`."""

    def __init__(self, example: Example, match_mode: str = "multiset", timeout_s: float = 30.0):
        self.example, self.match_mode, self.timeout_s = example, match_mode, timeout_s
        self.task_id, self.db_path = f"{example.db_id}/{example.index}", example.db_path

    def messages(self, max_turns: int) -> list[dict]:
        ex = self.example
        hint = f"\nHint: {ex.evidence.strip()}" if ex.evidence.strip() else ""
        user = templates()["agent"]["text2sql"].format(
            schema=_schema_text(self.db_path),
            question=ex.question.strip(),
            hint=hint,
            turns=max_turns,
            last_call=_only_turn(max_turns),
        )
        return _opening(user)

    def score(self, submission: str, replicas: Replicas) -> Score:
        statements = split_statements(submission)
        if len(statements) != 1:
            return Score(False, f"submit exactly one query, got {len(statements)} statements")
        with replicas.lease(self.db_path) as view:
            got = view.execute(statements[0])
        gold = execute(self.db_path, self.example.sql, timeout_s=self.timeout_s)
        ordered = has_order_by(self.example.sql)
        match = execution_match(got, gold, self.match_mode, ordered=ordered)
        return Score(match.match, match.reason, got, gold)


def require_model(cfg, name: str) -> Path:
    """A curriculum stage's starting model folder, or DataError naming the fix."""
    model = Path(cfg.model)
    if not model.is_dir():
        raise DataError(f"{model} not found: run the stage that makes it, or set {name}.model")
    return model


def training_mix(data_dir: Path, cfg, seed: str) -> tuple[list, list, random.Random]:
    """A curriculum stage's data: `cfg.max_tasks` train debugging tasks spread over
    databases, `cfg.question_ratio` train questions per task, and the stage's seeded rng."""
    tasks = spread(read_tasks(Path(data_dir) / "debug" / "train.jsonl"), cfg.max_tasks)
    questions = read_prepared(Path(data_dir) / "prepared" / "train.jsonl")
    rng = random.Random(seed)
    rng.shuffle(questions)
    return tasks, questions[: round(cfg.question_ratio * len(tasks))], rng
