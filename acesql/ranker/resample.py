"""Where agentic resampling draws its new candidates from (`selection.resample_from`).

    new_prompts, union = sample_pipeline_prompts(
        engine, prompts, schema, question, "", first_columns, m=16,
        temperature=1.0, max_new_tokens=256, seed=7919,
    )

- `generator` (R3-SQL's): m more generator samples on the first pool's pruned schema. A pool
  that holds no correct SQL because the retriever left a needed column out stays without one.
- `pipeline`: m samples of the whole pipeline. The retriever samples m column lists, and each
  prunes the schema for one generator sample, so the new pool also spans the retriever's
  doubt. A sampled list that names no known column reuses the first pool's. The judge then
  sees the union of the lists: every column some new candidate was shown.
"""

from __future__ import annotations

from acesql.sql.parsing import parse_columns
from acesql.sql.schema import Schema

SOURCES = ("generator", "pipeline")


def sample_pipeline_prompts(
    engine,
    prompts,
    schema: Schema,
    question: str,
    evidence: str,
    first_columns: list[str],
    m: int,
    *,
    temperature: float,
    max_new_tokens: int,
    seed: int,
    salvage_unclosed: bool = False,
) -> tuple[list[str], list[str]]:
    """m generator prompts, each on its own sampled retriever list, and the union of
    `first_columns` with every list (the schema to judge the new candidates in)."""
    (lists,) = engine.generate(
        [prompts.retriever(schema, question, evidence)],
        n=m,
        temperature=temperature,
        max_new_tokens=max_new_tokens,
        seed=seed,
    )
    chosen = []
    for out in lists:
        parsed = parse_columns(out.text, schema, salvage_unclosed=salvage_unclosed)
        chosen.append(sorted(parsed.columns) if parsed.ok and parsed.columns else first_columns)
    union = sorted(set(first_columns).union(*chosen))
    return [prompts.generator(schema, c, question, evidence) for c in chosen], union
