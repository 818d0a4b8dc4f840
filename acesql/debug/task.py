"""The SQL debugging task: what a user reports, the SQL that misbehaves, and how a fix is judged.

Three categories, as BIRD-CRITIC sorts them:
- `query`: a SELECT that errs or returns the wrong rows; a fix passes when its result equals
  the solution's (the `spider` match rule: rows as a bag, in order when the solution orders
  them, columns in any order).
- `management`: statements that change data (UPDATE, DELETE, INSERT); a fix passes when the
  database it leaves behind equals the one the solution leaves (every table's rows, as bags).
- `personalization`: statements that add the user's own objects (views, triggers, indexes);
  judged on the state like `management`, after the `checks` statements ran on both sides
  (reading a view, deleting a row so that a trigger fires), whose results must agree too.

Each statement list runs in order on a private view of a replica (`acesql.sql.replicas`),
after `preprocess_sql`; nothing ever writes the user's database.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

from acesql.errors import DataError

CATEGORIES = ("query", "management", "personalization")


@dataclass
class DebugTask:
    """One debugging task. `db_path` is the SQLite file the statements run on."""

    task_id: str
    db_id: str
    db_path: str
    category: str  # one of CATEGORIES
    issue: str  # the user's report: what they want and what goes wrong, not the fix
    issue_sql: list[str]
    solution_sql: list[str]
    preprocess_sql: list[str] = field(default_factory=list)  # run first, on both sides
    checks: list[str] = field(default_factory=list)  # run after, on both: results must agree
    bug: str = ""  # the injected bug's name, for generated tasks
    split: str = ""
    source: str = ""  # "synth", "bird-critic", ...

    def __post_init__(self):
        if self.category not in CATEGORIES:
            raise DataError(
                f"task {self.task_id}: category {self.category!r} is none of {list(CATEGORIES)}"
            )
        for name in ("issue_sql", "solution_sql", "preprocess_sql", "checks"):
            value = getattr(self, name)
            if not isinstance(value, list):
                raise DataError(
                    f"task {self.task_id!r}: {name} must be a list of SQL statements, got a "
                    f"{type(value).__name__}"
                )
            if not all(isinstance(s, str) and s.strip() for s in value):
                raise DataError(f"task {self.task_id!r}: {name} holds a statement that is no SQL")
            if not value and name in ("issue_sql", "solution_sql"):
                raise DataError(f"task {self.task_id!r}: {name} must be a non-empty list of SQL")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> DebugTask:
        if not isinstance(data, dict):
            raise DataError(f"not a JSON object (got {type(data).__name__})")
        known = cls.__dataclass_fields__
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise DataError(f"task {data.get('task_id')!r}: unknown fields {unknown}")
        try:
            return cls(**data)
        except TypeError as exc:
            raise DataError(f"task {data.get('task_id')!r}: {exc}") from exc


def write_tasks(path: str | Path, tasks: list[DebugTask]) -> None:
    """One JSON object per line, written beside the target and renamed into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for task in tasks:
            fh.write(json.dumps(task.to_dict(), ensure_ascii=False) + "\n")
    tmp.replace(path)


def read_tasks(path: str | Path) -> list[DebugTask]:
    """The tasks of a JSONL file written by `write_tasks`; DataError naming the bad line."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"no debugging tasks at {path}: run the debug_data stage first")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path} is not UTF-8 (byte {exc.start}: {exc.reason})") from exc
    tasks = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            tasks.append(DebugTask.from_dict(json.loads(line)))
        except (ValueError, DataError) as exc:
            raise DataError(f"{path}:{number}: {exc}") from exc
    return tasks


def spread(tasks: list[DebugTask], limit: int | None) -> list[DebugTask]:
    """At most `limit` tasks, taken round-robin over databases, and within a database
    round-robin over its categories (in file order within each), so a prefix of any length
    covers the databases and the categories alike."""
    by_db: dict[str, list[DebugTask]] = defaultdict(list)
    for task in tasks:
        by_db[task.db_id].append(task)
    order = []
    groups = [_interleave_categories(group) for group in by_db.values()]
    for rank in range(max((len(g) for g in groups), default=0)):
        order += [group[rank] for group in groups if rank < len(group)]
    return order if limit is None else order[:limit]


def _interleave_categories(tasks: list[DebugTask]) -> list[DebugTask]:
    by_category: dict[str, list[DebugTask]] = defaultdict(list)
    for task in tasks:
        by_category[task.category].append(task)
    lists = list(by_category.values())
    return [lst[i] for i in range(max(map(len, lists), default=0)) for lst in lists if i < len(lst)]
