"""Judging a fix: run it and the solution side by side on private views of one replica.

`check_fix(task, fix, replicas)` never raises on bad SQL: a fix that fails, errs or leaves the
wrong result comes back as `FixCheck(passed=False, reason=...)`. A task whose own solution
fails is `usable=False` (it says nothing about the fix).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from acesql.debug.task import DebugTask
from acesql.sql.columns import has_order_by
from acesql.sql.matching import FLOAT_DIGITS, execution_match
from acesql.sql.replicas import Lease, Replicas, split_statements
from acesql.sql.sandbox import ExecResult
from acesql.sql.schema import quote_identifier

MAX_STATE_ROWS = 200_000  # rows per table or view compared; past it the state is not judged


@dataclass
class FixCheck:
    passed: bool
    reason: str  # "pass", or why not: "fix_error: ...", "different_rows", "state: table t", ...
    usable: bool = True  # False when the task's own solution fails
    fix_results: list[ExecResult] = field(default_factory=list)  # one per statement run
    solution_results: list[ExecResult] = field(default_factory=list)
    checks: list[tuple[ExecResult, ExecResult]] = field(default_factory=list)  # (fix, solution)

    def to_dict(self) -> dict:
        return {
            "passed": self.passed,
            "reason": self.reason,
            "usable": self.usable,
            "fix_results": [r.to_dict() for r in self.fix_results],
        }


def check_fix(task: DebugTask, fix: str | list[str], replicas: Replicas) -> FixCheck:
    """Whether `fix` (a script, or its statements) solves `task`; see `DebugTask` for the rule."""
    statements = split_statements(fix) if isinstance(fix, str) else [s for s in fix if s.strip()]
    if not statements:
        return FixCheck(False, "fix_error: no SQL")
    with replicas.lease(task.db_path) as mine, replicas.lease(task.db_path) as ref:
        for sql in task.preprocess_sql:
            done = ref.execute(sql)
            if not done.ok:
                return FixCheck(False, f"preprocess fails: {done.error}", usable=False)
            mine.execute(sql)
        expected = run_statements(ref, task.solution_sql)
        if not expected[-1].ok:
            return FixCheck(False, f"solution fails: {expected[-1].error}", usable=False)
        got = run_statements(mine, statements)
        checked = FixCheck(False, "", fix_results=got, solution_results=expected)
        if not got[-1].ok:
            where = f"statement {len(got)} of {len(statements)}"
            checked.reason = f"fix_error ({where}): {got[-1].error}"
            return checked
        if task.category == "query":
            ordered = has_order_by(task.solution_sql[-1])
            match = execution_match(got[-1], expected[-1], "spider", ordered=ordered)
            checked.passed, checked.usable = match.match, match.usable
            checked.reason = "pass" if match.match else match.reason
            return checked
        for sql in task.checks:
            checked.checks.append((mine.execute(sql), ref.execute(sql)))
        difference = _checks_difference(checked.checks) or state_difference(mine, ref)
        checked.passed, checked.reason = difference is None, difference or "pass"
        return checked


def run_statements(lease: Lease, statements: list[str]) -> list[ExecResult]:
    """Run `statements` in order on `lease`, stopping after the first that fails."""
    results = []
    for sql in statements:
        results.append(lease.execute(sql))
        if not results[-1].ok:
            break
    return results


def _checks_difference(checks: list[tuple[ExecResult, ExecResult]]) -> str | None:
    for i, (got, expected) in enumerate(checks, 1):
        if not expected.ok:
            return f"check {i} fails on the solution: {expected.error}"
        if _bag(got) != _bag(expected):
            return f"state: check {i} differs"
    return None


def state_difference(mine: Lease, ref: Lease) -> str | None:
    """How the database behind `mine` differs from the one behind `ref`, or None.

    Compared: the schema objects of `main` and `temp` (schema, type, name, table) and every
    table's and view's rows as a bag (floats to 6 digits), each read by its qualified name:
    a temporary view or table named like a table would otherwise stand in for it, and a fix
    that changes nothing would pass.
    """
    objects = [_objects(lease) for lease in (mine, ref)]
    if objects[0] != objects[1]:
        extra = sorted(set(objects[0]) - set(objects[1]))
        missing = sorted(set(objects[1]) - set(objects[0]))
        return f"state: schema objects differ (extra {extra}, missing {missing})"
    for schema, kind, name, _ in objects[1]:
        if kind not in ("table", "view"):
            continue
        sql = f"SELECT * FROM {schema}.{quote_identifier(name)}"
        rows = [_bag(lease.execute(sql)) for lease in (mine, ref)]
        if rows[0] is None or rows[1] is None:
            return f"state: {kind} {name} cannot be compared (error or over {MAX_STATE_ROWS} rows)"
        if rows[0] != rows[1]:
            return f"state: {kind} {name} differs"
    return None


def _objects(lease: Lease) -> list[tuple]:
    result = lease.execute(
        "SELECT 'main', type, name, tbl_name FROM main.sqlite_master "
        "WHERE name NOT LIKE 'sqlite_%' UNION ALL "
        "SELECT 'temp', type, name, tbl_name FROM sqlite_temp_master "
        "WHERE name NOT LIKE 'sqlite_%' ORDER BY 1, 2, 3"
    )
    return [tuple(r) for r in result.rows]


def _bag(result: ExecResult) -> Counter | None:
    if not result.ok or result.truncated or len(result.rows) > MAX_STATE_ROWS:
        return None
    return Counter(
        tuple(round(v, FLOAT_DIGITS) if isinstance(v, float) else v for v in row)
        for row in result.rows
    )
