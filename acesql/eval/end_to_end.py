"""Evaluation of a model in both roles, one row per question.

- pipeline EX: retriever (greedy, or n samples voted) -> its columns (when none are selected,
  an empty schema or, with `on_empty="full_schema"`, the whole one; a list that never closed
  is no list, or with `unclosed_list="salvage"` the columns before its first repeat) ->
  pruned schema -> generator (greedy) -> execution match against the gold;
- maj@k (k > 0): k generator samples on the same pruned schema vote with their execution
  results (`acesql.eval.majority`), with candidate recall (any of the k correct); with
  `selection={"method": "r3", ...}` the same k are also chosen among by pointwise best-of-k
  and R3-SQL's groupwise ranking, optionally with resampling (`acesql.eval.selection`);
- generator ability: the generator alone, on the schema pruned to the gold SQL's columns;
- retriever recall / precision / exact set match / gold coverage of the chosen columns.

Rows keep what a reader needs to see a failure: chosen columns, SQL, execution status and
error, match reason, failure category, tokens. `acesql.eval.metrics` turns rows into scores.
"""

from __future__ import annotations

from acesql.data.loaders import Example
from acesql.data.schemas import SchemaCache, gold_columns
from acesql.errors import ConfigError, SqlParseError
from acesql.eval.metrics import failure_category, summarize
from acesql.eval.selection import prm_fields, ranked_fields, vote_fields
from acesql.models.prompts import PromptBuilder
from acesql.ranking.judge import Context, LetterJudge
from acesql.ranking.resample import SOURCES, sample_pipeline_prompts
from acesql.sql.batch_executor import BatchExecutor
from acesql.sql.column_vote import vote_columns
from acesql.sql.columns import extract_columns
from acesql.sql.parsing import parse_columns, parse_sql


def evaluate_examples(
    examples: list[Example],
    engine,
    prompts: PromptBuilder,
    executor: BatchExecutor,
    *,
    mode: str = "multiset",
    retriever_samples: int = 1,
    vote_threshold: float = 0.5,
    on_empty: str = "empty",
    unclosed_list: str = "reject",
    max_new_tokens: int = 256,
    maj_k: int = 0,
    maj_temperature: float = 1.0,
    selection: dict | None = None,
    judge=None,
    process_scorer=None,
    seed: int = 0,
    schemas: SchemaCache | None = None,
    stored: dict[int, dict] | None = None,
) -> tuple[dict, list[dict]]:
    """Evaluate `examples` (usable ones) end to end; return (summary, rows).

    `selection` (with maj_k > 0): `{"method": "r3", "tau", "resample",
    "resample_candidates", "audit_threshold", "resample_from", "resample_pool"}` (the
    `selection` params section) adds the
    ranker's choices, judged by `judge` (default: a `LetterJudge` on the engine's torch model,
    so the transformers engine); `{"method": "prm"}` adds PRM best-of-k, scored by
    `process_scorer` (`acesql.prm.select.ProcessScorer`). With `stored` (an earlier r3
    evaluation's rows by question index), nothing is generated: the stored candidates are
    scored again (`acesql.eval.rescore`), judged by `judge`."""
    schemas = schemas or SchemaCache(prompts.sample_values)
    unusable = [_unusable_row(e) for e in examples if e.unusable is not None]
    examples = [e for e in examples if e.unusable is None]
    if not examples:
        return summarize(unusable), unusable
    if stored is not None:
        from acesql.eval.rescore import rescore_examples

        contexts = [_judged_in(prompts, schemas, ex, stored[ex.index]) for ex in examples]
        if selection and selection.get("method") == "r3":
            judge = judge or LetterJudge(engine.model, engine.tokenizer)
        _, rows = rescore_examples(
            examples,
            stored,
            executor,
            judge,
            contexts=contexts,
            mode=mode,
            maj_k=maj_k,
            selection=selection,
            process_scorer=process_scorer,
            schemas=schemas,
        )
        rows += unusable
        return summarize(rows), rows
    greedy = dict(temperature=0.0, max_new_tokens=max_new_tokens, seed=seed)
    if retriever_samples > 1:
        sampling = dict(temperature=1.0, max_new_tokens=max_new_tokens, seed=seed)
    else:
        sampling = greedy
    r_prompts = [prompts.retriever(schemas(e), e.question, e.evidence) for e in examples]
    r_out = engine.generate(r_prompts, n=retriever_samples, **sampling)

    rows, pipeline_prompts, ability_prompts = [], [], []
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
        ability_prompts.append(
            prompts.generator(schema, gold if gold else None, ex.question, ex.evidence)
        )
    generated = engine.generate(pipeline_prompts + ability_prompts, n=1, **greedy)
    pipeline_out, ability_out = generated[: len(examples)], generated[len(examples) :]

    pipeline_sql = [parse_sql(g[0].text) for g in pipeline_out]
    ability_sql = [parse_sql(g[0].text) for g in ability_out]
    checks = [(e.db_path, s or "", e.sql) for e, s in zip(examples, pipeline_sql)]
    checks += [(e.db_path, s or "", e.sql) for e, s in zip(examples, ability_sql)]
    verdicts = executor.match_many(checks, mode)
    for i, (ex, row) in enumerate(zip(examples, rows)):
        pipe, able = verdicts[i], verdicts[len(examples) + i]
        row.update(
            pred_sql=pipeline_sql[i],
            pipeline_match=pipe.match.match,
            pipeline_reason=_reason(pipeline_sql[i], pipe),
            pred_error=pipe.pred.error if pipeline_sql[i] else None,
            pred_timed_out=pipe.pred.timed_out,
            pred_columns=_columns_of(pipeline_sql[i], schemas(ex)),
            generator_sql=ability_sql[i],
            generator_match=able.match.match,
            generator_reason=_reason(ability_sql[i], able),
            usable=pipe.match.usable,
            gold_empty=pipe.match.gold_empty,
            generator_tokens=len(pipeline_out[i][0].token_ids),
        )
        _retrieval_scores(row)
    if maj_k > 0:
        sampling = dict(temperature=maj_temperature, max_new_tokens=max_new_tokens, seed=seed)
        pools, samples = _candidates(
            examples, rows, engine, pipeline_prompts, executor, mode, maj_k, sampling
        )
        if selection and selection.get("method") == "prm":
            if process_scorer is None:
                raise ConfigError("selection prm needs the process scorer (the prm model)")
            for ex, row, (sqls, verdicts), outputs in zip(examples, rows, pools, samples):
                schema = schemas(ex)
                schema_text = prompts.schema_text(schema, row["retrieved_columns"])
                rewards = process_scorer.rewards(
                    ex.question, schema_text, ex.evidence, ex.db_path, outputs, schema=schema
                )
                row.update(prm_fields(sqls, verdicts, rewards, mode))
        if selection and selection.get("method") == "r3":
            contexts = [_judged_in(prompts, schemas, ex, row) for ex, row in zip(examples, rows)]
            judge = judge or LetterJudge(engine.model, engine.tokenizer)
            resamplers = [None] * len(examples)
            if selection.get("resample"):
                draw = Redraw(engine, prompts, schemas, executor, mode, sampling, unclosed_list)
                source = selection.get("resample_from", "generator")
                resamplers = [
                    draw.for_question(ex, prompt, row["retrieved_columns"], source)
                    for ex, prompt, row in zip(examples, pipeline_prompts, rows)
                ]
            for row, (sqls, verdicts), context, resample in zip(rows, pools, contexts, resamplers):
                row.update(
                    ranked_fields(
                        context,
                        sqls,
                        verdicts,
                        judge,
                        mode,
                        tau=selection.get("tau", 0.05),
                        resample=resample,
                        resample_candidates=selection.get("resample_candidates", 16),
                        audit_threshold=selection.get("audit_threshold", 0.5),
                        resample_pool=selection.get("resample_pool", "new"),
                    )
                )
    for row in rows:
        row["category"] = failure_category(row)
    rows += unusable
    return summarize(rows), rows


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
    """k generator samples per row's pruned schema, run and matched; adds maj@k's fields and
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
    """Fresh candidates for agentic resampling (`acesql.ranking.resample`), run and matched."""

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
