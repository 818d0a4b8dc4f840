"""Majority voting over retriever column sets (self-consistency)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from acesql.sql.schema import Schema


def vote_columns(
    samples: Sequence[Iterable[str] | None], schema: Schema, threshold: float = 0.5
) -> tuple[frozenset[str], bool]:
    """Columns named by at least `threshold` of the parseable samples, and whether it fell back.

    `None` marks an unparseable sample; it does not vote. When no column reaches the
    threshold (or nothing parsed) the result is the full schema and the flag is True.

    >>> from acesql.sql.schema import Column, Table
    >>> s = Schema("db", (Table("t", (Column("t", "a"), Column("t", "b"))),))
    >>> sorted(vote_columns([["t.a", "t.b"], ["t.a"], None], s)[0])
    ['t.a', 't.b']
    """
    if not 0 < threshold <= 1:
        raise ValueError(f"threshold must be in (0, 1], got {threshold}")
    parsed = [set(s) for s in samples if s is not None]
    counts = Counter(c for s in parsed for c in s)
    known = set(schema.column_ids)
    kept = frozenset(c for c, n in counts.items() if c in known and n >= threshold * len(parsed))
    if not kept:
        return frozenset(known), True
    return kept, False
