"""Issue text as a user writes it: what they want, the SQL they ran, and what they saw.

The symptom comes from running the broken SQL beside the solution (`describe_symptom`); it
says what went wrong as the user sees it (an error, no rows, too many rows, nothing changed),
never what the fix is.
"""

from __future__ import annotations

import random

from acesql.debug.check import FixCheck
from acesql.sql.sandbox import ExecResult

OPENERS = (
    "{intent} This is what I have:",
    "I'm trying to do this: {intent_quoted} My SQL:",
    "{intent} I wrote the following.",
    "Need help with a SQLite query. {intent}",
)
CLOSERS = (
    "What am I doing wrong?",
    "How do I fix it?",
    "Can someone explain what is wrong here?",
    "Any idea why?",
)


def write_issue(intent: str, issue_sql: list[str], symptom: str, rng: random.Random) -> str:
    """The issue text: the intent, the SQL in a fenced block, the symptom, a question."""
    intent = intent.strip()
    opener = rng.choice(OPENERS).format(intent=intent, intent_quoted=f'"{intent}"')
    code = "\n".join(s.rstrip().rstrip(";") + ";" for s in issue_sql)
    return f"{opener}\n```sql\n{code}\n```\n{symptom} {rng.choice(CLOSERS)}"


def describe_symptom(checked: FixCheck, category: str) -> str:
    """What the user saw when running the broken SQL, from a failed `FixCheck` of it."""
    got = checked.fix_results[-1] if checked.fix_results else None
    if got is not None and not got.ok:
        if got.timed_out:
            return "It never finishes."
        return f"It fails with this error: {got.error}."
    if category == "query":
        return _result_symptom(got, checked.solution_results[-1], "It")
    for fix_check, solution_check in checked.checks:
        if _rows(fix_check) != _rows(solution_check):
            subject = "It runs, but reading the result back"
            return _result_symptom(fix_check, solution_check, subject)
    return _change_symptom(got, checked.solution_results[-1])


def _result_symptom(got: ExecResult, expected: ExecResult, subject: str) -> str:
    n, m = len(got.rows), len(expected.rows)
    if not got.ok:
        return f"{subject} fails with this error: {got.error}."
    if n == 0 and m > 0:
        return f"{subject} returns no rows at all, though there is matching data."
    if n > m:
        return f"{subject} returns {n} rows, which is more than there should be."
    if n < m:
        return f"{subject} returns only {n} rows, which looks like too few."
    if n == 1 and len(got.rows[0]) == 1:
        return f"{subject} gives {got.rows[0][0]!r}, and that number looks wrong."
    return f"{subject} returns {n} rows, but the values are not the ones I expect."


def _change_symptom(got: ExecResult, expected: ExecResult) -> str:
    a, b = max(got.rows_affected, 0), max(expected.rows_affected, 0)
    if a == 0 and b > 0:
        return "It runs without an error, but nothing changes: 0 rows are affected."
    if a > b:
        return f"It changed {a} rows, far more than it should have."
    if a < b:
        return f"It changed only {a} rows; more should have changed."
    return f"It changes {a} rows, but not the right ones."


def _rows(result: ExecResult):
    return sorted(map(repr, result.rows)) if result.ok else None
