"""Evaluation of a model in both roles, one row per question.

- pipeline EX: retriever (greedy, or n samples voted) -> its columns (when none are selected,
  an empty schema or, with `on_empty="full_schema"`, the whole one; a list that never closed
  is no list, or with `unclosed_list="salvage"` the columns before its first repeat) ->
  pruned schema -> generator (greedy) -> execution match against the gold;
- maj@n (`candidates` = n > 0): n generator samples on the same pruned schema vote with
  their execution results (`acesql.sql.majority`), with candidate recall (any of the n
  correct); with `selection.method` r3 the same n are also chosen among by pointwise
  best-of-n and R3-SQL's groupwise ranking, optionally with resampling, with prm by PRM
  best-of-n: the selector's
  choice (`acesql.selection.selector`), scored as `acesql.selection.fields` scores it;
- generator ability: the generator alone, on the schema pruned to the gold SQL's columns;
- full-schema EX: the generator alone, greedy, on every column (the paper's Figure 1 (a));
  with whether its result agrees with the pipeline's and its prompt's length in tokens;
- the product's answer (`answer_*`): the pipeline's or the full schema's, per question, by
  `selection.answer` (`acesql.selection.answer`);
- retriever recall / precision / exact set match / gold coverage of the chosen columns.

Rows keep what a reader needs to see a failure: chosen columns, SQL, execution status and
error, match reason, failure category, tokens. `acesql.eval.metrics` turns rows into scores.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from acesql.config import SelectionSection
from acesql.data.loaders import Example
from acesql.data.schemas import SchemaCache, gold_columns
from acesql.errors import ConfigError, SqlParseError
from acesql.eval.metrics import failure_category, summarize
from acesql.eval.rescore import rescore_examples
from acesql.models.prompts import PromptBuilder
from acesql.ranker.judge import Context
from acesql.ranker.resample import SOURCES, sample_pipeline_prompts
from acesql.selection.answer import answer_fields
from acesql.selection.fields import vote_fields
from acesql.selection.selector import Asked, Selector
from acesql.sql.batch_executor import BatchExecutor
from acesql.sql.column_vote import vote_columns
from acesql.sql.columns import extract_columns
from acesql.sql.majority import group_results
from acesql.sql.parsing import parse_columns, parse_sql


@dataclass(frozen=True)
class EvalOptions:
    """What decides an evaluation's rows, beside the model and the questions."""

    mode: str = "multiset"  # execution match mode
    retriever_samples: int = 1  # 1: greedy; n > 1: n samples at temperature 1, voted
    vote_threshold: float = 0.5  # share of the retriever samples a column needs
    on_empty: str = "empty"  # nothing voted: an empty schema, or the full_schema
    unclosed_list: str = "reject"  # a list cut off while looping: no list, or salvage
    max_new_tokens: int = 256
    candidates: int = 0  # candidates sampled on the pruned schema (0: none)
    maj_temperature: float = 1.0
    selection: SelectionSection = field(default_factory=SelectionSection)
    seed: int = 0


def evaluate_examples(
    examples: list[Example],
    engine,
    prompts: PromptBuilder,
    executor: BatchExecutor,
    options: EvalOptions | None = None,
    *,
    selector: Selector | None = None,
    judge=None,
    process_scorer=None,
    schemas: SchemaCache | None = None,
    stored: dict[int, dict] | None = None,
    phase: Callable[[str], None] = lambda name: None,
) -> tuple[dict, list[dict]]:
    """Evaluate `examples` (usable ones) end to end; return (summary, rows).

    `selector` (`acesql.selection.selector`; built once by a caller that evaluates in parts,
    so its judge's cache spans them; default: one for `options.selection`, judged by `judge`
    or a `LetterJudge` on the engine's torch model, scored by `process_scorer`) adds, with
    candidates > 0, its method's choice among the candidates (`r3`'s, `prm`'s); the section's
    `answer` policy says which answer is the product's (`acesql.selection.answer`). With
    `stored` (an earlier r3 evaluation's rows by question index), nothing is generated: the
    stored candidates are scored again (`acesql.eval.rescore`). `phase(name)` is told which
    part runs (retrieving, generating, sampling, judging, rescoring), for a progress display."""
    o = options or EvalOptions()
    mode = o.mode
    if selector is None:
        selector = Selector(
            o.selection, mode=mode, engine=engine, judge=judge, process_scorer=process_scorer
        )
    schemas = schemas or SchemaCache(prompts.sample_values)
    unusable = [_unusable_row(e) for e in examples if e.unusable is not None]
    examples = [e for e in examples if e.unusable is None]
    if not examples:
        return summarize(unusable), unusable
    if stored is not None:
        phase("rescoring")
        rows = _rescored(examples, stored, prompts, executor, schemas, o.candidates, selector)
        return summarize(rows + unusable), rows + unusable
    greedy = dict(temperature=0.0, max_new_tokens=o.max_new_tokens, seed=o.seed)
    sampling = dict(temperature=1.0, max_new_tokens=o.max_new_tokens, seed=o.seed)
    phase("retrieving")
    rows, pipeline_prompts = retrieve(
        examples,
        engine,
        prompts,
        schemas,
        samples=o.retriever_samples,
        sampling=sampling if o.retriever_samples > 1 else greedy,
        vote_threshold=o.vote_threshold,
        on_empty=o.on_empty,
        unclosed_list=o.unclosed_list,
    )
    phase("generating")
    answer_greedily(
        examples, rows, engine, prompts, executor, schemas, pipeline_prompts, mode, greedy
    )
    if o.candidates > 0:
        sampling = dict(temperature=o.maj_temperature, max_new_tokens=o.max_new_tokens, seed=o.seed)
        phase("sampling")
        pools, samples = _candidates(
            examples, rows, engine, pipeline_prompts, executor, mode, o.candidates, sampling
        )
        phase("judging")
        tools = (engine, prompts, executor, schemas)
        select(examples, rows, pools, samples, pipeline_prompts, tools, o, sampling, selector)
    for row in rows:
        _finish(row, selector)
    return summarize(rows + unusable), rows + unusable


class Validation:
    """GRPO's validation: the live policy's greedy pipeline on held-out questions, in every
    process on its shard (`rows`), then the summary of the gathered rows (`summary`)."""

    def __init__(self, mode: str, max_new_tokens: int, seed: int):
        self.mode, self.max_new_tokens, self.seed = mode, max_new_tokens, seed

    def rows(self, examples, engine, prompts, executor) -> list[dict]:
        options = EvalOptions(mode=self.mode, max_new_tokens=self.max_new_tokens, seed=self.seed)
        return evaluate_examples(examples, engine, prompts, executor, options)[1]

    def summary(self, rows: list[dict]) -> dict:
        return summarize(rows)


def retrieve(
    examples,
    engine,
    prompts,
    schemas,
    *,
    samples,
    sampling,
    vote_threshold,
    on_empty,
    unclosed_list,
) -> tuple[list[dict], list[str]]:
    """The retriever's columns for each question (voted over `samples` outputs), as the
    first fields of its row, and the generator's prompt on them."""
    r_prompts = [prompts.retriever(schemas(e), e.question, e.evidence) for e in examples]
    r_out = engine.generate(r_prompts, n=samples, **sampling)
    rows, pipeline_prompts = [], []
    for ex, outputs in zip(examples, r_out):
        schema = schemas(ex)
        salvage = unclosed_list == "salvage"
        parsed = [parse_columns(o.text, schema, salvage_unclosed=salvage) for o in outputs]
        chosen, fell_back = vote_columns(
            [p.columns if p.ok else None for p in parsed], schema, vote_threshold, on_empty
        )
        try:
            gold = gold_columns(ex, schema)
        except SqlParseError:
            gold = None
        rows.append(
            {
                "index": ex.index,
                "db_id": ex.db_id,
                "question": ex.question,
                "complexity": ex.complexity or "unlabeled",
                "gold_sql": ex.sql,
                "gold_columns": sorted(gold) if gold is not None else None,
                "retrieved_columns": sorted(chosen),
                "retriever_fallback": fell_back,
                "retriever_unknown": sorted({u for p in parsed for u in p.unknown}),
                "retriever_salvaged": any(p.salvaged for p in parsed),
                "retriever_tokens": sum(len(o.token_ids) for o in outputs) / len(outputs),
                **_first_table_counts(schema, chosen, gold),
            }
        )
        pipeline_prompts.append(prompts.generator(schema, chosen, ex.question, ex.evidence))
    return rows, pipeline_prompts


def answer_greedily(
    examples, rows, engine, prompts, executor, schemas, pipeline_prompts, mode, greedy
) -> None:
    """The generator's greedy answer on three schemas, in one batch, run and matched: the
    pruned one (pipeline EX), the gold columns' (generator ability) and the whole schema
    (full-schema EX, the paper's Figure 1 (a): what a user would do without the retriever)."""
    ability_prompts, full_prompts = [], []
    for ex, row in zip(examples, rows):
        schema, gold = schemas(ex), row["gold_columns"]
        ability_prompts.append(prompts.generator(schema, gold or None, ex.question, ex.evidence))
        full_prompts.append(prompts.generator(schema, None, ex.question, ex.evidence))
    n = len(examples)
    generated = engine.generate(pipeline_prompts + ability_prompts + full_prompts, n=1, **greedy)
    sqls = [parse_sql(g[0].text) for g in generated]
    checks = [(e.db_path, s or "", e.sql) for e, s in zip(examples * 3, sqls)]
    verdicts = executor.match_many(checks, mode, keep_rows=True)
    for i, (ex, row) in enumerate(zip(examples, rows)):
        pipe, able, full = verdicts[i], verdicts[n + i], verdicts[2 * n + i]
        pipe_sql, able_sql, full_sql = sqls[i], sqls[n + i], sqls[2 * n + i]
        row.update(
            pred_sql=pipe_sql,
            pipeline_match=pipe.match.match,
            pipeline_reason=_reason(pipe_sql, pipe),
            pipeline_ran=_ran(pipe_sql, pipe),
            pred_error=pipe.pred.error if pipe_sql else None,
            pred_timed_out=pipe.pred.timed_out,
            pred_columns=_columns_of(pipe_sql, schemas(ex)),
            generator_sql=able_sql,
            generator_match=able.match.match,
            generator_reason=_reason(able_sql, able),
            full_sql=full_sql,
            full_match=full.match.match,
            full_reason=_reason(full_sql, full),
            full_ran=_ran(full_sql, full),
            full_agrees=_same_result(pipe_sql, pipe, full_sql, full, mode),
            full_tokens=prompts.token_count(full_prompts[i]),
            full_generator_tokens=len(generated[2 * n + i][0].token_ids),
            usable=pipe.match.usable,
            gold_empty=pipe.match.gold_empty,
            generator_tokens=len(generated[i][0].token_ids),
        )
        _retrieval_scores(row)


def select(
    examples,
    rows,
    pools,
    samples,
    pipeline_prompts,
    tools,
    options: EvalOptions,
    sampling: dict,
    selector: Selector,
) -> None:
    """`selector`'s choice among each question's candidates (`pools`: their SQL and
    verdicts; `samples`: the completions), its fields added to the row, with resampling when
    it resamples (`Redraw`); maj@n is already there. `tools`: (engine, prompts, executor,
    schemas)."""
    if not selector.judged:
        return  # maj@n's fields are the whole choice
    engine, prompts, executor, schemas = tools
    redraw = None
    if selector.resamples:
        redraw = Redraw(
            engine, prompts, schemas, executor, options.mode, sampling, options.unclosed_list
        )
    source = selector.section.resample_from
    for ex, row, (sqls, verdicts), outputs, prompt in zip(
        examples, rows, pools, samples, pipeline_prompts
    ):
        asked = Asked(_judged_in(prompts, schemas, ex, row), ex.db_path, schemas(ex))
        resample = None
        if redraw is not None:
            resample = redraw.for_question(ex, prompt, row["retrieved_columns"], source)
        row.update(selector.fields(asked, sqls, verdicts, outputs, resample))


def _rescored(
    examples, stored, prompts, executor, schemas, candidates: int, selector: Selector
) -> list[dict]:
    """Rows scored again on an earlier run's stored candidates (`acesql.eval.rescore`)."""
    contexts = [_judged_in(prompts, schemas, ex, stored[ex.index]) for ex in examples]
    _, rows = rescore_examples(
        examples,
        stored,
        executor,
        selector,
        contexts=contexts,
        candidates=candidates,
        schemas=schemas,
    )
    for row in rows:
        _finish(row, selector)
    return rows


def _finish(row: dict, selector: Selector) -> None:
    """The product's answer under the answer policy, and the row's failure category."""
    method = selector.answer_method if row.get("maj_match") is not None else "greedy"
    section = selector.section
    row.update(answer_fields(row, section.answer, section.full_schema_tokens, method))
    row["category"] = failure_category(row)


def _judged_in(prompts, schemas, ex: Example, row: dict) -> Context:
    """What a judge reads of one question: the schema pruned to the row's retrieved columns."""
    text = prompts.schema_text(schemas(ex), row["retrieved_columns"])
    return Context(ex.question, text, ex.evidence or "")


def _unusable_row(ex: Example) -> dict:
    """An example that cannot be scored (e.g. its database is missing): counted, not run."""
    return {
        "index": ex.index,
        "db_id": ex.db_id,
        "question": ex.question,
        "complexity": ex.complexity or "unlabeled",
        "gold_sql": ex.sql,
        "usable": False,
        "unusable_reason": ex.unusable,
        "pred_sql": None,
        "category": "unusable",
    }


def _candidates(examples, rows, engine, prompts, executor, mode, k, sampling) -> tuple[list, list]:
    """n generator samples per row's pruned schema, run and matched; adds maj@n's fields and
    candidate recall to the rows; returns each row's (SQLs, verdicts), and the samples."""
    samples = engine.generate(prompts, n=k, **sampling)
    sqls = [[parse_sql(c.text) or "" for c in group] for group in samples]
    checks = [(e.db_path, s, e.sql) for e, group in zip(examples, sqls) for s in group]
    verdicts = executor.match_many(checks, mode, keep_rows=True)
    pools = []
    for i, row in enumerate(rows):
        mine = verdicts[i * k : (i + 1) * k]
        row.update(vote_fields(sqls[i], mine, mode))
        row["maj_tokens"] = sum(len(c.token_ids) for c in samples[i]) / k
        pools.append((sqls[i], mine))
    return pools, samples


class Redraw:
    """Fresh candidates for agentic resampling (`acesql.ranker.resample`), run and matched."""

    def __init__(self, engine, prompts, schemas, executor, mode, sampling, unclosed_list):
        self.engine, self.prompts, self.schemas = engine, prompts, schemas
        self.executor, self.mode = executor, mode
        self.params = {**sampling, "seed": sampling.get("seed", 0) + 7919}  # another seed
        self.salvage = unclosed_list == "salvage"

    def for_question(self, ex: Example, prompt: str, columns: list[str], source: str):
        """m -> (m new SQL, their verdicts, the context to judge them in or None)."""
        if source not in SOURCES:
            raise ConfigError(f"unknown resample_from {source!r}: {' | '.join(SOURCES)}")

        def resample(m: int):
            context = None
            if source == "generator":
                (outputs,) = self.engine.generate([prompt], n=m, **self.params)
            else:
                schema = self.schemas(ex)
                new_prompts, union = sample_pipeline_prompts(
                    self.engine,
                    self.prompts,
                    schema,
                    ex.question,
                    ex.evidence or "",
                    columns,
                    m,
                    salvage_unclosed=self.salvage,
                    **self.params,
                )
                outputs = [g[0] for g in self.engine.generate(new_prompts, n=1, **self.params)]
                text = self.prompts.schema_text(schema, union)
                context = Context(ex.question, text, ex.evidence or "")
            sqls = [parse_sql(c.text) or "" for c in outputs]
            verdicts = self.executor.match_many(
                [(ex.db_path, s, ex.sql) for s in sqls], self.mode, keep_rows=True
            )
            return sqls, verdicts, context

        return resample


def _reason(sql, verdict) -> str:
    return "no_sql" if not sql else verdict.match.reason


def _ran(sql, verdict) -> bool:
    """Whether an answer ran to the end (rows or none) without an error or a timeout."""
    return bool(sql) and verdict.pred.ok and not verdict.pred.truncated


def _same_result(sql_a, verdict_a, sql_b, verdict_b, mode: str) -> bool | None:
    """Whether two answers that both ran return the same result under `mode`; None when one
    of them did not run."""
    if not (_ran(sql_a, verdict_a) and _ran(sql_b, verdict_b)):
        return None
    groups = group_results([sql_a, sql_b], [verdict_a.pred, verdict_b.pred], mode)
    return len(groups) == 1


def _columns_of(sql: str | None, schema) -> list[str] | None:
    """The schema columns a predicted SQL uses; None when it does not resolve."""
    if not sql:
        return None
    try:
        return sorted(extract_columns(sql, schema))
    except SqlParseError:
        return None


def _first_table_counts(schema, chosen, gold) -> dict:
    """How many chosen and gold columns belong to the table the prompt shows first: a
    retriever that leans on position names that table far more often than questions use it."""
    first = {c.id for c in schema.tables[0].columns} if schema.tables else set()
    return {
        "retrieved_first_table": len(first & set(chosen)),
        "gold_first_table": len(first & set(gold)) if gold is not None else None,
    }


def _retrieval_scores(row: dict) -> None:
    gold, got = row["gold_columns"], set(row["retrieved_columns"])
    pred = row["pred_columns"]
    if gold is None:
        row.update(recall=None, precision=None, exact_columns=None, covers_gold=None)
        row["non_gold"] = None
        return
    gold = set(gold)
    hit = len(gold & got)
    row.update(
        recall=hit / len(gold) if gold else 1.0,
        precision=hit / len(got) if got else 0.0,
        exact_columns=gold == got,
        covers_gold=gold <= got,
        non_gold=(set(pred) != gold) if row["pipeline_match"] and pred is not None else None,
    )
