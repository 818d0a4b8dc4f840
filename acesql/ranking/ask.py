"""`acesql ask`: the trained pipeline on any SQLite file, one question.

    answer = ask(engine, prompts, "shop.sqlite", "Which customer spent most?",
                 SelectionSection(method="r3", candidates=8))
    answer.sql, answer.result, answer.groups

Schema introspection, the retriever (greedy) and its column vote (an empty vote shows the
generator the whole schema: a user's question deserves an attempt), the generator's greedy
answer (candidate 0) and n - 1 samples on the pruned schema, every candidate run in the
read-only sandbox, then the `selection` params section's method: `greedy` (candidate 0),
`maj` (the largest group of equal results), `r3` (groupwise ranking,
`acesql.ranking.select`; with `resample`, agentic resampling first, drawing from
`resample_from`, `acesql.ranking.resample`) or `prm` (the
Chain-of-CTE candidate with the highest process reward, `acesql.prm.select`). Unless
`selection.answer` is `pipeline`, the generator also answers once on the whole schema and
the policy ships one of the two (`acesql.selection.answer`). The user's file is only ever
opened read-only.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from acesql.config import SelectionSection
from acesql.errors import ConfigError, DataError
from acesql.prm.select import best_of_n
from acesql.ranking.judge import Context, LetterJudge
from acesql.ranking.resample import sample_pipeline_prompts
from acesql.ranking.select import Drawn, select_groupwise, select_with_resampling
from acesql.selection.answer import Sides, answer_side
from acesql.selection.majority import group_results, majority_vote
from acesql.sql.batch_executor import BatchExecutor
from acesql.sql.column_vote import vote_columns
from acesql.sql.parsing import parse_columns, parse_sql
from acesql.sql.sandbox import ExecResult
from acesql.sql.schema import Schema


@dataclass
class Answer:
    sql: str | None
    result: ExecResult | None
    columns: list[str]  # the retriever's columns (empty: it named none, the whole schema shown)
    candidates: list[str] = field(default_factory=list)
    results: list[ExecResult] = field(default_factory=list)
    groups: list[dict] = field(default_factory=list)  # for --explain
    resampled: bool = False  # r3 with resampling: the auditor fired and more were drawn
    answer_from: str = "pipeline"  # whose answer `sql` is (selection.answer)
    full_sql: str | None = None  # the full schema's answer, when the policy asked for it
    full_result: ExecResult | None = None


def open_schema(db_path: str | Path, sample_values: int = 0) -> Schema:
    """The schema of a user's SQLite file, or DataError saying what is wrong with it."""
    path = Path(db_path)
    if not path.exists():
        raise DataError(f"no such database file: {db_path}")
    if not path.is_file():  # a folder, or a FIFO whose open would wait for a writer
        raise DataError(f"{db_path} is not a regular file")
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
    selection: SelectionSection | None = None,
    *,
    mode: str = "multiset",
    max_new_tokens: int = 256,
    timeout_s: float = 30.0,
    seed: int = 0,
    process_scorer=None,
) -> Answer:
    """`process_scorer` (`acesql.prm.select.ProcessScorer`): for the prm selection, whose
    candidates are what its score model reads (`prompts.sql_format` the same). The
    candidates run in a SQL worker process, killed at the deadline if SQLite is not."""
    with BatchExecutor(workers=1, timeout_s=timeout_s) as executor:
        return _ask(
            engine,
            prompts,
            db_path,
            question,
            selection or SelectionSection(method="r3"),
            executor,
            mode=mode,
            max_new_tokens=max_new_tokens,
            seed=seed,
            process_scorer=process_scorer,
        )


def _ask(
    engine,
    prompts,
    db_path,
    question: str,
    selection: SelectionSection,
    executor: BatchExecutor,
    *,
    mode: str,
    max_new_tokens: int,
    seed: int,
    process_scorer,
) -> Answer:
    if selection.method == "prm":
        if process_scorer is None:
            raise ConfigError("the prm selection needs the process scorer (the prm model)")
        process_scorer.require_format(prompts.sql_format)
    schema = open_schema(db_path, prompts.sample_values)
    (retrieved,) = engine.generate(
        [prompts.retriever(schema, question)], n=1, temperature=0.0, max_new_tokens=max_new_tokens
    )
    parsed = parse_columns(retrieved[0].text, schema)
    columns, _ = vote_columns([parsed.columns if parsed.ok else None], schema, 0.5, "full_schema")
    prompt = prompts.generator(schema, columns, question)

    outputs = []  # every candidate's completion, in candidate order

    def sample(prompt_list: list[str], n: int, seed: int) -> tuple[list[str], list[ExecResult]]:
        """n candidates for each prompt, in order, run in the sandbox."""
        groups = engine.generate(
            prompt_list,
            n=n,
            temperature=selection.temperature,
            max_new_tokens=max_new_tokens,
            seed=seed,
        )
        drawn = [c for g in groups for c in g]
        outputs.extend(drawn)
        sqls = [parse_sql(c.text) or "" for c in drawn]
        return sqls, _run(executor, db_path, sqls)

    greedy = engine.generate([prompt], n=1, temperature=0.0, max_new_tokens=max_new_tokens)[0]
    outputs.extend(greedy)
    sqls = [parse_sql(greedy[0].text) or ""]
    results = _run(executor, db_path, sqls)
    if selection.method != "greedy":
        more_sqls, more_results = sample([prompt], selection.candidates - 1, seed)
        sqls, results = sqls + more_sqls, results + more_results
    answer = Answer(None, None, sorted(columns), sqls, results)
    if selection.method == "greedy":
        index = 0 if sqls[0] else None
    elif selection.method == "prm":
        rewards = process_scorer.rewards(
            question, prompts.schema_text(schema, columns), "", db_path, outputs, schema=schema
        )
        index = best_of_n(rewards)
        answer.groups = [
            {"members": [i], "process_reward": None if r is None else round(r, 4)}
            for i, r in sorted(enumerate(rewards), key=lambda x: -(x[1] or -1.0))
        ]
    elif selection.method == "maj":
        index = majority_vote(sqls, results, mode).winner
        answer.groups = [{"members": g, "size": len(g)} for g in group_results(sqls, results, mode)]
    else:
        judge = LetterJudge(engine.model, engine.tokenizer)
        context = Context(question, prompts.schema_text(schema, columns))
        kept = list(range(len(sqls)))  # the pool ranked, as indices over every candidate
        if selection.resample:
            drawn: list = []

            def resample(m: int) -> Drawn:
                if selection.resample_from == "generator":
                    new = Drawn(*sample([prompt], m, seed + 1))
                else:
                    new_prompts, union = sample_pipeline_prompts(
                        engine,
                        prompts,
                        schema,
                        question,
                        "",
                        sorted(columns),
                        m,
                        temperature=selection.temperature,
                        max_new_tokens=max_new_tokens,
                        seed=seed + 1,
                    )
                    new = Drawn(
                        *sample(new_prompts, 1, seed + 1),
                        Context(question, prompts.schema_text(schema, union)),
                    )
                drawn.append((new.sqls, new.results))
                return new

            out = select_with_resampling(
                context,
                sqls,
                results,
                judge,
                resample,
                selection.resample_candidates,
                selection.audit_threshold,
                mode,
                selection.tau,
                selection.resample_pool,
            )
            choice, answer.resampled, kept = out.choice, out.fired, out.kept
            for new_sqls, new_results in drawn:
                sqls, results = sqls + new_sqls, results + new_results
            answer.candidates, answer.results = sqls, results
        else:
            choice = select_groupwise(context, sqls, results, judge, mode, selection.tau)
        index = choice.index
        answer.groups = [
            {
                "members": [kept[i] for i in g.members],
                "preference": g.preference,
                "utility": round(g.utility, 4),
                "best": kept[g.best],
                "empty_result": empty,
            }
            for g, empty in zip(choice.ranked, choice.empty)
        ]
    if index is not None:
        answer.sql, answer.result = sqls[index], results[index]
    if selection.answer != "pipeline":
        _answer_policy(
            answer, engine, prompts, schema, db_path, question, selection, max_new_tokens, executor
        )
    return answer


def _answer_policy(
    answer: Answer,
    engine,
    prompts,
    schema,
    db_path,
    question,
    selection,
    max_new_tokens: int,
    executor: BatchExecutor,
) -> None:
    """The generator's greedy answer on the whole schema, and which of the two answers the
    `selection.answer` policy ships (`acesql.selection.answer`); `answer` is updated."""
    prompt = prompts.generator(schema, None, question)
    (out,) = engine.generate([prompt], n=1, temperature=0.0, max_new_tokens=max_new_tokens)
    full_sql = parse_sql(out[0].text) or ""
    (full_result,) = _run(executor, db_path, [full_sql])
    pipeline_ran = answer.result is not None and answer.result.ok
    full_ran = full_result.ok and bool(full_sql)
    sides = Sides(pipeline_ran, full_ran, prompts.token_count(prompt))
    answer.full_sql, answer.full_result = full_sql or None, full_result
    answer.answer_from = answer_side(selection.answer, sides, selection.full_schema_tokens)
    if answer.answer_from == "full_schema":
        answer.sql, answer.result = full_sql or None, full_result


def _run(executor: BatchExecutor, db_path, sqls: list[str]) -> list[ExecResult]:
    """Each SQL's result, in order; an empty one (no SQL in the output) fails as such."""
    ran = iter(executor.execute_many([(db_path, sql) for sql in sqls if sql]))
    return [next(ran) if sql else ExecResult(ok=False, error="no SQL") for sql in sqls]
