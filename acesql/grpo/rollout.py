"""One ACE-SQL rollout for a batch of questions, shared by the grpo_data and grpo stages.

    retriever prompt -> N retriever samples -> parse each into a column set
      -> vote (grpo) or union (grpo_data's pool initialisation) -> pruned schema
      -> generator prompt -> M generator samples -> parse SQL -> batch execution vs gold
      -> the column sets of the matched SQLs (what the empirical pool is fed)

Nothing here trains or scores: rewards are the trainer's business. A malformed output parses
to None (an unparseable column list, no SQL block) and simply never matches. The format gate
of the authors' code applies to both roles (`acesql.sql.parsing.format_ok`): an output cut off
at `max_new_tokens` counts as malformed, and a generator output needs a closed ```sql block
(with reasoning on, after `</think>`). A parsed but empty column list is a set like any
other (it can match a pool target of a query that names no column, such as COUNT(*)).

The vote (`acesql.sql.column_vote`) and the union follow the authors: when nothing is selected the
generator sees an empty schema.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from acesql.data.loaders import Example
from acesql.data.schemas import SchemaCache
from acesql.errors import SqlParseError
from acesql.models.engine import Completion
from acesql.models.prompts import PromptBuilder
from acesql.sql.batch_executor import BatchExecutor
from acesql.sql.column_vote import vote_columns
from acesql.sql.columns import extract_columns
from acesql.sql.parsing import format_ok, parse_columns, parse_sql

COMBINE = ("vote", "union")


def question_key(example: Example) -> str:
    """The pool's key of a question: its database and its position in the split."""
    return f"{example.db_id}#{example.index}"


@dataclass
class QuestionRollout:
    example: Example
    retriever_prompt: str
    retriever: list[Completion]
    retrieved: list[frozenset[str] | None]  # parsed column sets; None: unparseable
    schema_columns: frozenset[str]  # the pruned schema the generator saw
    fell_back: bool  # the vote (or union) selected no column: the generator saw no schema
    generator_prompt: str = ""
    generator: list[Completion] = field(default_factory=list)
    sqls: list[str | None] = field(default_factory=list)
    matched: list[bool] = field(default_factory=list)
    usable: bool = True  # False when the gold query itself fails
    matched_sets: list[frozenset[str]] = field(default_factory=list)
    unextractable: int = 0  # matched SQLs whose columns sqlglot could not resolve

    @property
    def key(self) -> str:
        return question_key(self.example)

    @property
    def n_matched(self) -> int:
        return sum(self.matched)


def rollout(
    examples: list[Example],
    engine,
    prompts: PromptBuilder,
    schemas: SchemaCache,
    executor: BatchExecutor,
    *,
    n_retriever: int,
    n_generator: int,
    combine: str = "vote",
    vote_threshold: float = 0.5,
    temperature: float = 1.0,
    top_p: float = 1.0,
    max_new_tokens: int = 256,
    match_mode: str = "multiset",
    seed: int = 0,
) -> list[QuestionRollout]:
    """Sample both roles for every example and execute the generator's SQL; see the module doc."""
    if combine not in COMBINE:
        raise ValueError(f"combine must be one of {COMBINE}, got {combine!r}")
    sampling = dict(temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens)
    r_prompts = [prompts.retriever(schemas(e), e.question, e.evidence) for e in examples]
    r_out = engine.generate(r_prompts, n=n_retriever, seed=seed, **sampling)
    rollouts = []
    for ex, prompt, outputs in zip(examples, r_prompts, r_out):
        schema = schemas(ex)
        sets = []
        for o in outputs:
            parsed = parse_columns(o.text, schema)
            well_formed = parsed.ok and format_ok(o, "retriever", prompts.reasoning)
            sets.append(frozenset(parsed.columns) if well_formed else None)
        if combine == "vote":
            chosen, fell_back = vote_columns(sets, schema, vote_threshold)
        else:
            chosen = frozenset().union(*(s for s in sets if s is not None))
            fell_back = not chosen
        rollouts.append(QuestionRollout(ex, prompt, outputs, sets, chosen, fell_back))

    for r in rollouts:
        r.generator_prompt = prompts.generator(
            schemas(r.example), r.schema_columns, r.example.question, r.example.evidence
        )
    g_out = engine.generate(
        [r.generator_prompt for r in rollouts], n=n_generator, seed=seed + 1, **sampling
    )
    checks = []
    for r, outputs in zip(rollouts, g_out):
        r.generator = outputs
        r.sqls = [
            parse_sql(o.text) if format_ok(o, "generator", prompts.reasoning) else None
            for o in outputs
        ]
        checks += [(r.example.db_path, sql or "", r.example.sql) for sql in r.sqls]
    verdicts = iter(executor.match_many(checks, match_mode))
    for r in rollouts:
        schema = schemas(r.example)
        for sql in r.sqls:
            verdict = next(verdicts)
            r.usable = r.usable and verdict.match.usable
            ok = bool(verdict.match.match) and sql is not None
            r.matched.append(ok)
            if not ok:
                continue
            try:
                r.matched_sets.append(extract_columns(sql, schema))
            except SqlParseError:
                r.unextractable += 1
    return rollouts
