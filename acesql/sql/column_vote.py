"""Majority voting over retriever column sets (self-consistency), as the authors' code does it.

A column is kept when at least `ceil(threshold x N)` of all N samples name it: unparseable
samples count in N and vote for nothing, so a retriever that mostly fails to answer selects
little. When no column reaches the cutoff the vote is empty; what happens then is the
caller's `on_empty`:

- `empty` (the paper's training rule, and the default): the generator gets an empty schema;
- `full_schema`: the generator gets the whole schema (an evaluation-time convenience).

Either way the second value returned says the vote came out empty.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

from acesql.sql.schema import Schema

ON_EMPTY = ("empty", "full_schema")


def vote_cutoff(n_samples: int, threshold: float) -> int:
    """Votes a column needs among `n_samples` samples: ceil(threshold x n), at least 1.

    >>> vote_cutoff(8, 0.5), vote_cutoff(3, 0.5), vote_cutoff(1, 0.5)
    (4, 2, 1)
    """
    if not 0 < threshold <= 1:
        raise ValueError(f"threshold must be in (0, 1], got {threshold}")
    return max(1, math.ceil(threshold * n_samples - 1e-9))


def vote_columns(
    samples: Sequence[Iterable[str] | None],
    schema: Schema,
    threshold: float = 0.5,
    on_empty: str = "empty",
) -> tuple[frozenset[str], bool]:
    """The voted columns and whether the vote came out empty (see the module doc).

    `None` marks an unparseable sample: it counts in N and names nothing. A parsed empty
    list is the same vote, and so are names that are not columns of `schema`.

    >>> from acesql.sql.schema import Column, Table
    >>> s = Schema("db", (Table("t", (Column("t", "a"), Column("t", "b"))),))
    >>> sorted(vote_columns([["t.a", "t.b"], ["t.a"], None], s)[0])
    ['t.a']
    >>> vote_columns([None, []], s)
    (frozenset(), True)
    >>> sorted(vote_columns([None], s, on_empty="full_schema")[0])
    ['t.a', 't.b']
    """
    if on_empty not in ON_EMPTY:
        raise ValueError(f"on_empty must be one of {ON_EMPTY}, got {on_empty!r}")
    cutoff = vote_cutoff(len(samples), threshold)
    counts = Counter(c for s in samples if s is not None for c in set(s))
    known = set(schema.column_ids)
    kept = frozenset(c for c, n in counts.items() if c in known and n >= cutoff)
    if kept:
        return kept, False
    return (frozenset(known) if on_empty == "full_schema" else frozenset()), True
