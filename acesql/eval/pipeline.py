"""Greedy evaluation of a model in both roles.

- pipeline EX: retriever (greedy, or n samples voted) -> its columns (the full schema when
  none parse) -> pruned schema -> generator (greedy) -> execution match against the gold;
- generator ability: the generator alone, on the schema pruned to the gold SQL's columns;
- retriever recall / precision / exact set match of the chosen columns against the gold's.

All three per complexity level and overall, with counts. Per-example rows keep what a reader
needs to see a failure: chosen columns, SQL, execution status, match reason, tokens.
"""

from __future__ import annotations

from collections import defaultdict

from acesql.data.loaders import Example
from acesql.errors import SqlParseError
from acesql.models.prompts import PromptBuilder
from acesql.sft.data import SchemaCache, gold_columns
from acesql.sql.executor import BatchExecutor
from acesql.sql.parsing import parse_columns, parse_sql
from acesql.sql.voting import vote_columns


def evaluate_examples(
    examples: list[Example],
    engine,
    prompts: PromptBuilder,
    executor: BatchExecutor,
    *,
    mode: str = "multiset",
    retriever_samples: int = 1,
    vote_threshold: float = 0.5,
    max_new_tokens: int = 256,
    seed: int = 0,
) -> tuple[dict, list[dict]]:
    """Evaluate `examples` (usable ones) end to end; return (summary, rows)."""
    schemas = SchemaCache(prompts.sample_values)
    examples = [e for e in examples if e.unusable is None]
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
        parsed = [parse_columns(o.text, schema) for o in outputs]
        chosen, fell_back = vote_columns(
            [p.columns if p.ok else None for p in parsed], schema, vote_threshold
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
                "complexity": ex.complexity or "unlabelled",
                "gold_sql": ex.sql,
                "gold_columns": sorted(gold) if gold is not None else None,
                "retrieved_columns": sorted(chosen),
                "retriever_fallback": fell_back,
                "retriever_unknown": sorted({u for p in parsed for u in p.unknown}),
                "retriever_tokens": sum(len(o.token_ids) for o in outputs) / len(outputs),
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
    for i, row in enumerate(rows):
        pipe, able = verdicts[i], verdicts[len(examples) + i]
        row.update(
            pred_sql=pipeline_sql[i],
            pipeline_match=pipe.match.match,
            pipeline_reason=_reason(pipeline_sql[i], pipe),
            generator_sql=ability_sql[i],
            generator_match=able.match.match,
            generator_reason=_reason(ability_sql[i], able),
            usable=pipe.match.usable,
            generator_tokens=len(pipeline_out[i][0].token_ids),
        )
        _retrieval_scores(row)
    return summarize(rows), rows


def _reason(sql, verdict) -> str:
    return "no_sql" if not sql else verdict.match.reason


def _retrieval_scores(row: dict) -> None:
    gold, got = row["gold_columns"], set(row["retrieved_columns"])
    if gold is None:
        row.update(recall=None, precision=None, exact_columns=None)
        return
    gold = set(gold)
    hit = len(gold & got)
    row.update(
        recall=hit / len(gold) if gold else 1.0,
        precision=hit / len(got) if got else 0.0,
        exact_columns=gold == got,
    )


def summarize(rows: list[dict]) -> dict:
    usable = [r for r in rows if r["usable"]]
    levels = defaultdict(list)
    for r in usable:
        levels[r["complexity"]].append(r)
    summary = _scores(usable)
    summary["n"] = len(rows)
    summary["by_complexity"] = {k: _scores(v) for k, v in sorted(levels.items())}
    return summary


def _scores(rows: list[dict]) -> dict:
    n = len(rows)
    scored = [r for r in rows if r["recall"] is not None]

    def mean(key, pool):
        return round(sum(float(r[key]) for r in pool) / len(pool), 4) if pool else 0.0

    return {
        "usable": n,
        "pipeline_ex": mean("pipeline_match", rows),
        "generator_ex": mean("generator_match", rows),
        "retriever_recall": mean("recall", scored),
        "retriever_precision": mean("precision", scored),
        "retriever_exact": mean("exact_columns", scored),
        "retriever_fallback_rate": mean("retriever_fallback", rows),
        "no_sql_rate": round(sum(r["pred_sql"] is None for r in rows) / n, 4) if n else 0.0,
        "tokens_per_query": round(
            sum(r["retriever_tokens"] + r["generator_tokens"] for r in rows) / n, 1
        )
        if n
        else 0.0,
    }
