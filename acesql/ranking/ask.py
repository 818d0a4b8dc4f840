"""`acesql ask`: the trained pipeline on any SQLite file, one question.

    answer = ask(engine, prompts, "shop.sqlite", "Which customer spent most?", n=8,
                 selection="r3")
    answer.sql, answer.result, answer.groups

Schema introspection, the retriever (greedy) and its column vote (an empty vote shows the
generator the whole schema: a user's question deserves an attempt), the generator sampled
n times on the pruned schema (plus its greedy answer, candidate 0), every candidate run in
the read-only sandbox, then the selection: `greedy` (candidate 0), `maj` (the largest group
of equal results) or `r3` (groupwise ranking, `acesql.ranking.select`). The user's file is
only ever opened read-only.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from acesql.errors import DataError
from acesql.eval.majority import group_results, majority_vote
from acesql.ranking.judge import Context, LetterJudge
from acesql.ranking.select import select_groupwise
from acesql.sql.column_vote import vote_columns
from acesql.sql.parsing import parse_columns, parse_sql
from acesql.sql.sandbox import ExecResult, execute
from acesql.sql.schema import Schema

SELECTIONS = ("greedy", "maj", "r3")


@dataclass
class Answer:
    sql: str | None
    result: ExecResult | None
    columns: list[str]  # the retriever's columns (empty: it named none, the whole schema shown)
    candidates: list[str] = field(default_factory=list)
    results: list[ExecResult] = field(default_factory=list)
    groups: list[dict] = field(default_factory=list)  # for --explain


def open_schema(db_path: str | Path, sample_values: int = 0) -> Schema:
    """The schema of a user's SQLite file, or DataError saying what is wrong with it."""
    path = Path(db_path)
    if not path.is_file():
        raise DataError(f"no such database file: {db_path}")
    with path.open("rb") as fh:
        if fh.read(16) != b"SQLite format 3\x00":
            raise DataError(f"{db_path} is not a SQLite database")
    try:
        schema = Schema.from_sqlite(path, path.stem, n_samples=sample_values)
    except sqlite3.Error as exc:
        raise DataError(f"cannot read the schema of {db_path}: {exc}") from exc
    if not schema.tables:
        raise DataError(f"{db_path} has no tables to ask about")
    return schema


def ask(
    engine,
    prompts,
    db_path: str | Path,
    question: str,
    *,
    n: int = 8,
    selection: str = "r3",
    mode: str = "multiset",
    max_new_tokens: int = 256,
    timeout_s: float = 30.0,
    seed: int = 0,
) -> Answer:
    if selection not in SELECTIONS:
        raise DataError(f"unknown selection {selection!r}; choose one of {list(SELECTIONS)}")
    schema = open_schema(db_path, prompts.sample_values)
    (retrieved,) = engine.generate(
        [prompts.retriever(schema, question)], n=1, temperature=0.0, max_new_tokens=max_new_tokens
    )
    parsed = parse_columns(retrieved[0].text, schema)
    columns, _ = vote_columns([parsed.columns if parsed.ok else None], schema, 0.5, "full_schema")
    prompt = prompts.generator(schema, columns, question)
    greedy = engine.generate([prompt], n=1, temperature=0.0, max_new_tokens=max_new_tokens)[0]
    samples = []
    if selection != "greedy" and n > 1:
        samples = engine.generate(
            [prompt], n=n - 1, temperature=1.0, max_new_tokens=max_new_tokens, seed=seed
        )[0]
    sqls = [parse_sql(c.text) or "" for c in [*greedy, *samples]]
    results = [
        execute(db_path, sql, timeout_s=timeout_s) if sql else ExecResult(ok=False, error="no SQL")
        for sql in sqls
    ]
    answer = Answer(None, None, sorted(columns), sqls, results)
    if selection == "greedy":
        index = 0 if sqls[0] else None
    elif selection == "maj":
        index = majority_vote(sqls, results, mode).winner
        answer.groups = [{"members": g, "size": len(g)} for g in group_results(sqls, results, mode)]
    else:
        judge = LetterJudge(engine.model, engine.tokenizer)
        context = Context(question, schema.render(columns, samples=prompts.sample_values > 0))
        choice = select_groupwise(context, sqls, results, judge, mode)
        index = choice.index
        answer.groups = [
            {
                "members": g.members,
                "preference": g.preference,
                "utility": round(g.utility, 4),
                "best": g.best,
                "empty_result": empty,
            }
            for g, empty in zip(choice.ranked, choice.empty)
        ]
    if index is not None:
        answer.sql, answer.result = sqls[index], results[index]
    return answer
