"""The retriever's greedy column choice for a batch of questions, as evaluation makes it.

    columns = greedy_columns(examples, engine, prompts, schemas, max_new_tokens=256)

One greedy retriever output per question, parsed against its schema and put through the
column vote (a list that does not parse, or names no real column, selects nothing: the
generator then sees an empty schema, the ACE-SQL paper's rule). What the ranker's pairs and
the process reward's labels roll out from, so their candidates are those evaluation sees.
"""

from __future__ import annotations

from acesql.data.loaders import Example
from acesql.data.schemas import SchemaCache
from acesql.sql.column_vote import vote_columns
from acesql.sql.parsing import parse_columns


def greedy_columns(
    examples: list[Example],
    engine,
    prompts,
    schemas: SchemaCache,
    *,
    max_new_tokens: int = 256,
    seed: int = 0,
) -> list[frozenset[str]]:
    """The voted columns of each example's greedy retriever output."""
    outputs = engine.generate(
        [prompts.retriever(schemas(e), e.question, e.evidence) for e in examples],
        n=1,
        temperature=0.0,
        max_new_tokens=max_new_tokens,
        seed=seed,
    )
    chosen = []
    for ex, (out,) in zip(examples, outputs):
        parsed = parse_columns(out.text, schemas(ex))
        columns, _ = vote_columns([parsed.columns if parsed.ok else None], schemas(ex))
        chosen.append(columns)
    return chosen
