"""`acesql ask`: the trained pipeline on any SQLite file, one question.

    answer = ask(engine, prompts, "shop.sqlite", "Which customer spent most?",
                 SelectionSection(method="r3", candidates=8))
    answer.sql, answer.result, answer.groups

Schema introspection, the retriever (greedy) and its column vote (an empty vote shows the
generator the whole schema: a user's question deserves an attempt), the generator's greedy
answer (candidate 0) and n - 1 samples on the pruned schema, every candidate run in the
read-only sandbox, then the `selection` params section's method chooses
(`acesql.selection.selector`): `greedy` (candidate 0), `maj` (the largest group of equal
results), `r3` (groupwise ranking, `acesql.ranker.select`; with `resample`, agentic
resampling first, drawing from `resample_from`, `acesql.ranker.resample`) or `prm` (the
Chain-of-CTE candidate with the highest process reward, `acesql.prm.select`). Unless
`selection.answer` is `pipeline`, the generator also answers once on the whole schema and
the policy ships one of the two (`acesql.selection.answer`). The user's file is only ever
opened read-only.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from acesql.config import SelectionSection
from acesql.errors import DataError
from acesql.ranker.judge import Context
from acesql.ranker.resample import sample_pipeline_prompts
from acesql.ranker.select import Drawn
from acesql.selection.answer import Sides, answer_side
from acesql.selection.selector import Asked, Selector
from acesql.sql.batch_executor import BatchExecutor
from acesql.sql.column_vote import vote_columns
from acesql.sql.majority import group_results
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
    retriever_matched: bool = True  # the retriever named columns of this schema
    agreement: tuple[int, int] = (0, 0)  # (candidates with the chosen result, candidates run)
    notes: list[str] = field(default_factory=list)  # what to know before trusting it
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
    say: Callable[[str], None] = lambda step: None,
) -> Answer:
    """`process_scorer` (`acesql.prm.select.ProcessScorer`): for the prm selection, whose
    candidates are what its score model reads (`prompts.sql_format` the same). The
    candidates run in a SQL worker process, killed at the deadline if SQLite is not. `say`
    is told each step as it starts (retrieving columns, writing candidates, running them,
    ranking), for a user waiting on a CPU."""
    selection = selection or SelectionSection(method="r3")
    selector = Selector(selection, mode=mode, engine=engine, process_scorer=process_scorer)
    selector.check_format(prompts.sql_format)
    schema = open_schema(db_path, prompts.sample_values)
    with BatchExecutor(workers=1, timeout_s=timeout_s) as executor:
        asking = _Asking(
            engine,
            prompts,
            schema,
            db_path,
            question,
            selection,
            executor,
            mode=mode,
            max_new_tokens=max_new_tokens,
            seed=seed,
            say=say,
        )
        say("retrieving columns")
        columns, matched = asking.retrieve()
        say("writing candidates" if selector.among_candidates else "writing the query")
        answer = asking.candidates(columns, selector.samples)
        answer.retriever_matched = matched
        index = asking.choose(answer, columns, selector)
        if index is not None:
            answer.sql, answer.result = answer.candidates[index], answer.results[index]
        answer.agreement = _agreement(answer, index, mode)
        if selection.answer != "pipeline":
            say("writing the query on the whole schema")
            asking.answer_policy(answer)
    answer.notes = _notes(answer)
    return answer


@dataclass
class _Asking:
    """One question's way through the pipeline, step by step (see `ask`)."""

    engine: object
    prompts: object
    schema: Schema
    db_path: str | Path
    question: str
    selection: SelectionSection
    executor: BatchExecutor
    mode: str
    max_new_tokens: int
    seed: int
    say: Callable[[str], None]
    outputs: list = field(default_factory=list)  # every candidate's completion, in order
    prompt: str = ""  # the generator's prompt on the retriever's columns

    def retrieve(self) -> tuple[list[str], bool]:
        """The retriever's voted columns (the whole schema when it names none), and whether
        it named any column of this schema."""
        (retrieved,) = self.engine.generate(
            [self.prompts.retriever(self.schema, self.question)],
            n=1,
            temperature=0.0,
            max_new_tokens=self.max_new_tokens,
        )
        parsed = parse_columns(retrieved[0].text, self.schema)
        named = parsed.columns if parsed.ok else None
        columns, fell_back = vote_columns([named], self.schema, 0.5, "full_schema")
        return sorted(columns), not fell_back

    def sample(self, prompts: list[str], n: int, seed: int) -> tuple[list[str], list[ExecResult]]:
        """n candidates for each prompt, in order, run in the sandbox."""
        groups = self.engine.generate(
            prompts,
            n=n,
            temperature=self.selection.temperature,
            max_new_tokens=self.max_new_tokens,
            seed=seed,
        )
        drawn = [c for g in groups for c in g]
        self.outputs.extend(drawn)
        sqls = [parse_sql(c.text) or "" for c in drawn]
        self.say("running them")
        return sqls, _run(self.executor, self.db_path, sqls)

    def candidates(self, columns: list[str], samples: int) -> Answer:
        """The greedy answer (candidate 0) and, when `samples` (n) are asked for, n - 1
        samples, all run."""
        self.prompt = self.prompts.generator(self.schema, columns, self.question)
        greedy = self.engine.generate(
            [self.prompt], n=1, temperature=0.0, max_new_tokens=self.max_new_tokens
        )[0]
        self.outputs.extend(greedy)
        sqls = [parse_sql(greedy[0].text) or ""]
        results = _run(self.executor, self.db_path, sqls)
        if samples:
            more_sqls, more_results = self.sample([self.prompt], samples - 1, self.seed)
            sqls, results = sqls + more_sqls, results + more_results
        return Answer(None, None, columns, sqls, results)

    def choose(self, answer: Answer, columns: list[str], selector: Selector) -> int | None:
        """The index of the candidate `selector` chooses (None: none ran); `answer.groups`
        says why, for --explain, and with resampling the drawn candidates join it."""
        schema_text = self.prompts.schema_text(self.schema, columns)
        asked = Asked(Context(self.question, schema_text), self.db_path, self.schema)
        drawn: list = []
        chosen = selector.choose(
            asked,
            answer.candidates,
            answer.results,
            self.outputs,
            self._resampler(columns, drawn),
            self.say,
        )
        answer.groups, answer.resampled = chosen.groups, chosen.resampled
        for new_sqls, new_results in drawn:
            answer.candidates = answer.candidates + new_sqls
            answer.results = answer.results + new_results
        return chosen.index

    def answer_policy(self, answer: Answer) -> None:
        """The generator's greedy answer on the whole schema, and which of the two answers
        the `selection.answer` policy ships (`acesql.selection.answer`); `answer` is
        updated."""
        prompt = self.prompts.generator(self.schema, None, self.question)
        (out,) = self.engine.generate(
            [prompt], n=1, temperature=0.0, max_new_tokens=self.max_new_tokens
        )
        full_sql = parse_sql(out[0].text) or ""
        (full_result,) = _run(self.executor, self.db_path, [full_sql])
        pipeline_ran = answer.result is not None and answer.result.ok
        full_ran = full_result.ok and bool(full_sql)
        sides = Sides(pipeline_ran, full_ran, self.prompts.token_count(prompt))
        answer.full_sql, answer.full_result = full_sql or None, full_result
        policy = self.selection
        answer.answer_from = answer_side(policy.answer, sides, policy.full_schema_tokens)
        if answer.answer_from == "full_schema":
            answer.sql, answer.result = full_sql or None, full_result

    def _resampler(self, columns: list[str], drawn: list):
        """m -> m new candidates (`acesql.ranker.resample`), kept in `drawn` as well."""
        selection = self.selection

        def resample(m: int) -> Drawn:
            self.say("drawing more candidates")
            if selection.resample_from == "generator":
                new = Drawn(*self.sample([self.prompt], m, self.seed + 1))
            else:
                new_prompts, union = sample_pipeline_prompts(
                    self.engine,
                    self.prompts,
                    self.schema,
                    self.question,
                    "",
                    columns,
                    m,
                    temperature=selection.temperature,
                    max_new_tokens=self.max_new_tokens,
                    seed=self.seed + 1,
                )
                new = Drawn(
                    *self.sample(new_prompts, 1, self.seed + 1),
                    Context(self.question, self.prompts.schema_text(self.schema, union)),
                )
            drawn.append((new.sqls, new.results))
            return new

        return resample


def _agreement(answer: Answer, index: int | None, mode: str) -> tuple[int, int]:
    """(candidates that returned the chosen result, candidates that ran): how much the
    model's own samples agree with the answer; (1, 1) for a greedy answer that ran."""
    ran = [i for i, r in enumerate(answer.results) if r.ok and answer.candidates[i]]
    if index is None or index not in ran:
        return 0, len(ran)
    groups = group_results(answer.candidates, answer.results, mode)
    same = next((len(g) for g in groups if index in g), 1)
    return same, len(ran)


def _notes(answer: Answer) -> list[str]:
    """What a user should know before trusting the answer, in plain words."""
    notes = []
    if not answer.retriever_matched:
        notes.append(
            "the retriever named no column of this database that fits the question: the "
            "query was written on the whole schema"
        )
    if answer.sql is None:
        return notes + ["no candidate query ran"]
    if answer.result is not None and answer.result.ok and not answer.result.rows:
        notes.append("the query ran but returned no rows: the database may not hold the answer")
    same, ran = answer.agreement
    if ran > 1 and same < ran:
        notes.append(f"the candidates disagree: {same} of {ran} that ran returned this result")
    if answer.answer_from == "full_schema":
        notes.append("the answer is the generator's on the whole schema (selection.answer)")
    return notes


def _run(executor: BatchExecutor, db_path, sqls: list[str]) -> list[ExecResult]:
    """Each SQL's result, in order; an empty one (no SQL in the output) fails as such."""
    ran = iter(executor.execute_many([(db_path, sql) for sql in sqls if sql]))
    return [next(ran) if sql else ExecResult(ok=False, error="no SQL") for sql in sqls]
