"""BIRD-CRITIC's published JSONL format, read into `DebugTask`s for users who have the data.

One JSON object per line. The fields read (both spellings of the releases are accepted):
`instance_id`; `selected_database` or `db_id`; `query` (the user's issue text); `issue_sql`
or `error_sql`; `sol_sql`; `preprocess_sql`; `category` (`Query`, `Management`,
`Personalization`); `dialect` (absent: the `dialect` argument). Statements come as lists or as
one string. `clean_up_sql` is not needed (each check runs on private views of a replica).

What differs from the benchmark's own harness, said plainly:
- Execution is SQLite's. SQL of another dialect is translated with sqlglot; a statement it
  cannot translate drops the task (counted as `transpile_failed`).
- The task's Python `test_cases` are not run (they are code, and they call the benchmark's
  own database helpers); a fix is checked by the category's rule against `sol_sql`
  (`acesql.debug.task`): the result for queries, the state left behind otherwise.
- Tasks without `sol_sql` (the hidden test split) cannot be checked and are counted, not read.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import sqlglot
from sqlglot.errors import SqlglotError

from acesql.data.loaders import short_repr
from acesql.debug.task import CATEGORIES, DebugTask
from acesql.errors import DataError
from acesql.sql.replicas import split_statements

DIALECTS = {
    "sqlite": "sqlite",
    "postgresql": "postgres",
    "postgres": "postgres",
    "mysql": "mysql",
    "sqlserver": "tsql",
    "sql server": "tsql",
    "mssql": "tsql",
    "oracle": "oracle",
}


def load_bird_critic(
    path: str | Path, db_root: str | Path, dialect: str = "sqlite", split: str = "test"
) -> tuple[list[DebugTask], Counter]:
    """The checkable tasks of a BIRD-CRITIC JSONL file, and the others counted by reason.

    Databases are looked up as `db_root/<db>/<db>.sqlite` (BIRD's layout) or
    `db_root/<db>.sqlite`. A line that is not a JSON object naming a database is a DataError
    naming the line.
    """
    path, db_root = Path(path), Path(db_root)
    if not path.is_file():
        raise DataError(f"no BIRD-CRITIC file at {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path} is not UTF-8 (byte {exc.start}: {exc.reason})") from exc
    tasks, skipped = [], Counter()
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise DataError(f"{path}:{number}: not JSON ({exc})") from exc
        problem = _record_problem(record)
        if problem:
            raise DataError(f"{path}:{number}: {problem}")
        db = record.get("selected_database") or record.get("db_id")
        task, reason = _task(record, db, db_root, dialect, split, number)
        if task is None:
            skipped[reason] += 1
        else:
            tasks.append(task)
    return tasks, skipped


def _record_problem(record) -> str | None:
    """What makes `record` no BIRD-CRITIC task, or None."""
    if not isinstance(record, dict):
        return f"not a JSON object (got {type(record).__name__})"
    for key in ("selected_database", "db_id"):
        if record.get(key) is not None and not isinstance(record[key], str):
            return f"{key} must be a string, got {short_repr(record[key])}"
    if not (record.get("selected_database") or record.get("db_id")):
        return "no selected_database / db_id"
    for key in ("sol_sql", "issue_sql", "error_sql", "preprocess_sql"):
        value = record.get(key)
        if value is not None and not (
            isinstance(value, str)
            or (isinstance(value, list) and all(isinstance(s, str) for s in value))
        ):
            return f"{key} must be a string or a list of strings, got {short_repr(value)}"
    return None


def _task(record: dict, db: str, db_root: Path, dialect: str, split: str, number: int):
    solution = _statements(record.get("sol_sql"))
    if not solution:
        return None, "no_solution"
    issue_sql = _statements(record.get("issue_sql", record.get("error_sql")))
    if not issue_sql:
        return None, "no_issue_sql"
    db_path = next(
        (p for p in (db_root / db / f"{db}.sqlite", db_root / f"{db}.sqlite") if p.is_file()),
        None,
    )
    if db_path is None:
        return None, "database_missing"
    source = DIALECTS.get(str(record.get("dialect") or dialect).strip().lower())
    if source is None:
        return None, "unknown_dialect"
    try:
        issue_sql, solution, preprocess = (
            _to_sqlite(statements, source)
            for statements in (issue_sql, solution, _statements(record.get("preprocess_sql")))
        )
    except (SqlglotError, RecursionError):  # a statement nested too deep for the parser
        return None, "transpile_failed"
    category = str(record.get("category") or _category(solution)).strip().lower()
    if category not in CATEGORIES:
        return None, "unknown_category"
    task = DebugTask(
        task_id=str(record.get("instance_id", number)),
        db_id=db,
        db_path=str(db_path),
        category=category,
        issue=str(record.get("query") or ""),
        issue_sql=issue_sql,
        solution_sql=solution,
        preprocess_sql=preprocess,
        split=split,
        source="bird-critic",
    )
    return task, None


def _statements(value) -> list[str]:
    """A field's statements, whether it holds one string or a list of them (`_record_problem`
    refused anything else)."""
    if value is None:
        return []
    out = []
    for item in [value] if isinstance(value, str) else value:
        out += split_statements(item)
    return out


def _to_sqlite(statements: list[str], source: str) -> list[str]:
    if source == "sqlite":
        return statements
    out = []
    for sql in statements:
        out += [s for s in sqlglot.transpile(sql, read=source, write="sqlite") if s.strip()]
    return out


def _category(solution: list[str]) -> str:
    """Query when every solution statement reads, management otherwise."""
    reads = all(s.lstrip("( \n\t").lower().startswith(("select", "with")) for s in solution)
    return "query" if reads else "management"
