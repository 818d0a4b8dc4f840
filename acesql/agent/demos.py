"""Demonstrations for imitation: how an agent should work a task, as SFT records per turn.

A demonstration runs for real on a private view: the observations are what the database
returned. For a debugging task: run the reported SQL and see the symptom; for a query, run
the corrected query and look at its result; then say what was wrong and submit the solution.
For a question: run the gold query, then submit it. Each turn becomes one record: the
conversation so far (observations included) as the prompt, the turn as the response, which is
what the agent's RL trains on too (observations never enter the loss).

The diagnosis sentences (`DIAGNOSES`) are the reasoning part: one per bug of
`acesql.debug.bugs` and `acesql.debug.intents`, a plain one for tasks with no bug name.
"""

from __future__ import annotations

from acesql.agent.episode import AgentTask, observe, render_chat
from acesql.agent.tasks import DebugAgentTask, QuestionAgentTask
from acesql.sql.replicas import Replicas

DIAGNOSES = {
    "wrong_join_key": "The join matches the wrong columns: rows must be paired on the key "
    "that links the two tables.",
    "missing_group_by": "The aggregate has no GROUP BY, so everything collapses into one row "
    "instead of one row per group.",
    "join_double_count": "The extra join repeats each row once per matching row of the other "
    "table, so the aggregate counts rows several times.",
    "null_equality": "A comparison with NULL using = or <> is never true; missing values are "
    "found with IS NULL or IS NOT NULL.",
    "date_as_number": "The date is written as a number while the column holds text dates, so "
    "the comparison never works as meant; the date must be a quoted string.",
    "off_by_one_limit": "The LIMIT keeps one row too many.",
    "flipped_order": "The sort goes the wrong way, so the rows kept are the wrong ones.",
    "wrong_comparison": "The comparison is off at the boundary: a strict and an inclusive "
    "comparison are mixed up.",
    "wrong_aggregate": "The query uses the wrong aggregate function for what is asked.",
    "delete_missing_where": "The DELETE has no WHERE clause, so it removes every row.",
    "delete_uncorrelated_exists": "The EXISTS subquery does not refer to the row being "
    "deleted, so it is true for every row and everything goes.",
    "update_null_equality": "WHERE x = NULL matches no row; missing values are found with IS NULL.",
    "update_wrong_key": "The subquery returns keys of the other table, but they are compared "
    "with this table's own id instead of the column that references them.",
    "delete_date_as_number": "The date is written as a number while the column holds text "
    "dates; it must be a quoted string.",
    "trigger_wrong_event": "The trigger is attached to the wrong event: it has to run after a "
    "DELETE.",
}
PLAIN = "The SQL does not do what is asked; here is a version that does."


def debug_demonstration(
    task: DebugAgentTask, replicas: Replicas, tokenizer, max_turns: int
) -> list[dict]:
    """The SFT records of one worked debugging task (one per turn)."""
    t = task.task
    diagnosis = DIAGNOSES.get(t.bug.removeprefix("view_"), PLAIN)
    issue_script = "\n".join(s.rstrip().rstrip(";") + ";" for s in t.issue_sql)
    turns = [("First I run the SQL from the report to see what it does.", issue_script)]
    if t.category == "query" and max_turns >= 3:
        turns.append((f"{diagnosis} Let me run the corrected query.", t.solution_sql[-1]))
        diagnosis = "That result looks right."
    solution = "\n".join(s.rstrip().rstrip(";") + ";" for s in t.solution_sql)
    return _records(
        task, replicas, tokenizer, max_turns, turns, f"{diagnosis} <submit>{solution}</submit>"
    )


def question_demonstration(
    task: QuestionAgentTask, replicas: Replicas, tokenizer, max_turns: int
) -> list[dict]:
    """The SFT records of one worked text-to-SQL question: look at the result, submit."""
    sql = task.example.sql.strip().rstrip(";")
    turns = [("Let me check what this query returns.", sql)] if max_turns >= 2 else []
    return _records(
        task, replicas, tokenizer, max_turns, turns, f"That answers it. <submit>{sql}</submit>"
    )


def _records(task: AgentTask, replicas, tokenizer, max_turns, probes, final: str) -> list[dict]:
    messages = task.messages(max_turns)
    records = []
    with replicas.lease(task.db_path) as view:
        for sql in task.setup_sql:
            view.execute(sql)
        for k, (thought, sql) in enumerate(probes[: max_turns - 1]):
            response = f"{thought} <sql>{sql}</sql>"
            records.append(_record(task, render_chat(tokenizer, messages), response))
            observation, _ = observe(view, sql, max_turns - k - 1)
            messages = [
                *messages,
                {"role": "assistant", "content": response},
                {"role": "user", "content": observation},
            ]
    records.append(_record(task, render_chat(tokenizer, messages), final))
    return records


def _record(task: AgentTask, prompt: str, response: str) -> dict:
    return {"role": "agent", "prompt": prompt, "response": response, "task_id": task.task_id}
