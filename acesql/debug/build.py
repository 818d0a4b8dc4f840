"""Debugging tasks generated from a text-to-SQL dataset's prepared splits (by default the
synthetic one): real gold queries and real databases, broken on purpose.

For each database of a split, `tasks_per_db` tasks in the categories' shares:
- `query`: a gold SELECT of the split with one bug of `acesql.debug.bugs`;
- `management`: a data-management intent of `acesql.debug.intents.MANAGEMENT`;
- `personalization`: a view wrapping a broken query, or an audit trigger on the wrong event.

A draft becomes a task only when running it shows what the task claims: the solution runs
and does something (rows returned, rows changed, a view or log that is not empty), the
solution passes its own check, and the broken SQL fails it. The issue text then describes
the symptom the broken SQL produced. Tasks keep the split of their database, so test_ood
tasks are on domains never seen in train, as for the text-to-SQL data.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from acesql.data.loaders import Example
from acesql.debug.bugs import QUERY_BUGS, inject
from acesql.debug.check import check_fix
from acesql.debug.intents import MANAGEMENT, PERSONALIZATION, Draft, view_draft
from acesql.debug.issues import describe_symptom, write_issue
from acesql.debug.task import CATEGORIES, DebugTask
from acesql.errors import ConfigError
from acesql.sql.replicas import Replicas
from acesql.sql.sandbox import open_sandboxed
from acesql.sql.schema import Schema

ATTEMPTS_PER_TASK = 6


@dataclass
class BuildConfig:
    tasks_per_db: int = 12
    shares: tuple[float, float, float] = (0.5, 0.3, 0.2)  # query, management, personalization
    seed: int = 0

    def __post_init__(self):
        if self.tasks_per_db < 1:
            raise ConfigError(f"tasks_per_db must be at least 1, got {self.tasks_per_db}")
        if len(self.shares) != 3 or min(self.shares) < 0 or sum(self.shares) <= 0:
            raise ConfigError(f"shares must be 3 numbers >= 0 with a positive sum: {self.shares}")

    def counts(self) -> dict[str, int]:
        """Tasks per category for one database (largest remainders, summing to tasks_per_db)."""
        total = sum(self.shares)
        exact = [self.tasks_per_db * s / total for s in self.shares]
        counts = [int(x) for x in exact]
        for i in sorted(range(3), key=lambda i: counts[i] - exact[i])[
            : self.tasks_per_db - sum(counts)
        ]:
            counts[i] += 1
        return dict(zip(CATEGORIES, counts))


def build_tasks(
    examples: list[Example], split: str, replicas: Replicas, config: BuildConfig
) -> tuple[list[DebugTask], Counter]:
    """The tasks drawn from one split's prepared examples, and why drafts were dropped."""
    by_db: dict[str, list[Example]] = {}
    for example in examples:
        if not example.unusable:
            by_db.setdefault(example.db_id, []).append(example)
    tasks, rejected = [], Counter()
    for db_id in sorted(by_db):
        db_path = Path(by_db[db_id][0].db_path)
        if not db_path.is_file():
            rejected["database_missing"] += 1
            continue
        builder = _DatabaseTasks(db_id, db_path, split, by_db[db_id], replicas, config, rejected)
        tasks += builder.build()
    return tasks, rejected


class _DatabaseTasks:
    """The tasks of one database: drafts tried in a seeded order until each category is full."""

    def __init__(self, db_id, db_path, split, examples, replicas, config, rejected):
        self.db_id, self.db_path, self.split = db_id, db_path, split
        self.examples, self.replicas, self.rejected = examples, replicas, rejected
        self.counts = config.counts()
        self.rng = random.Random(f"{config.seed}:{db_id}")
        self.schema = Schema.from_sqlite(db_path, db_id)
        self.bug_use: Counter = Counter()
        self.seen: set = set()

    def build(self) -> list[DebugTask]:
        conn = open_sandboxed(self.db_path)
        try:
            tasks = []
            for category, count in self.counts.items():
                drafts = self._drafts(category, conn)
                made = 0
                for _ in range(count * ATTEMPTS_PER_TASK):
                    if made >= count:
                        break
                    draft = next(drafts, None)
                    if draft is None:
                        break
                    task = self._verify(draft, f"{self.db_id}/{len(tasks)}")
                    if task is not None:
                        tasks.append(task)
                        made += 1
                self.rejected[f"{category}_short"] += count - made
            return tasks
        finally:
            conn.close()

    def _drafts(self, category: str, conn):
        if category == "query":
            for example in self._shuffled(self.examples):
                draft = self._query_draft(example)
                if draft is not None:
                    yield draft
        else:
            rules = list((MANAGEMENT if category == "management" else PERSONALIZATION).values())
            examples = iter(self._shuffled(self.examples))
            misses = 0
            while misses < 4 * (len(rules) + 1):  # no rule fits this database any more
                if category == "personalization" and self.rng.random() < 0.5:
                    example = next(examples, None)
                    draft = self._query_draft(example, view=True) if example else None
                else:
                    draft = self.rng.choice(rules)(self.schema, conn, self.rng)
                misses = misses + 1 if draft is None else 0
                if draft is not None:
                    yield draft

    def _query_draft(self, example: Example, view: bool = False) -> Draft | None:
        names = sorted(QUERY_BUGS, key=lambda n: (self.bug_use[n], self.rng.random()))
        question = (
            f"{example.question} ({example.evidence})" if example.evidence else example.question
        )
        for name in names:
            broken = inject(example.sql, name, self.schema, self.rng)
            if broken is None:
                continue
            if view:
                view_name = f"my_view_{len(self.seen)}"
                return view_draft(question, example.sql, broken, name, view_name)
            return Draft("query", name, question, [example.sql], [broken])
        return None

    def _verify(self, draft: Draft, task_id: str) -> DebugTask | None:
        key = (tuple(draft.solution_sql), tuple(draft.issue_sql))
        if key in self.seen:
            self.rejected["duplicate"] += 1
            return None
        self.seen.add(key)
        task = DebugTask(
            task_id=task_id,
            db_id=self.db_id,
            db_path=str(self.db_path),
            category=draft.category,
            issue="",
            issue_sql=draft.issue_sql,
            solution_sql=draft.solution_sql,
            preprocess_sql=draft.preprocess_sql,
            checks=draft.checks,
            bug=draft.bug,
            split=self.split,
            source="synth",
        )
        broken = check_fix(task, task.issue_sql, self.replicas)
        problem = _problem(task, broken)
        if problem is None and not check_fix(task, task.solution_sql, self.replicas).passed:
            problem = "solution_not_reproducible"
        if problem:
            self.rejected[problem] += 1
            return None
        self.bug_use[draft.bug.removeprefix("view_")] += 1
        symptom = describe_symptom(broken, task.category)
        task.issue = write_issue(draft.intent, task.issue_sql, symptom, self.rng)
        return task

    def _shuffled(self, items: list) -> list:
        items = list(items)
        self.rng.shuffle(items)
        return items


def _problem(task: DebugTask, broken) -> str | None:
    """Why a draft is not a task, from the check of its broken SQL; None when it is one."""
    if not broken.usable:
        return "solution_fails"
    if broken.passed:
        return "bug_has_no_effect"
    solution = broken.solution_results[-1] if broken.solution_results else None
    if task.category == "query" and not (solution and solution.rows):
        return "solution_returns_nothing"
    if task.category == "management" and not (solution and solution.rows_affected > 0):
        return "solution_changes_nothing"
    if task.checks and broken.checks and not broken.checks[-1][1].rows:
        return "solution_check_returns_nothing"
    return None


def summarize(tasks: list[DebugTask], rejected: Counter) -> dict:
    """Counts by split, category and bug, and the drafts dropped by reason."""
    return {
        "tasks": len(tasks),
        "by_split": dict(Counter(t.split for t in tasks)),
        "by_category": dict(Counter(t.category for t in tasks)),
        "by_bug": dict(sorted(Counter(t.bug for t in tasks).items())),
        "rejected": dict(sorted(rejected.items())),
    }
