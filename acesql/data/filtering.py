"""Source filtering: choose training examples by complexity and spread them over schemas.

ACE-SQL builds its SFT set by filtering SynSQL-2.5M "according to query complexity and
schema diversity" (the ACE-SQL paper, section 3.2). Here that is three deterministic steps:

1. keep usable examples whose complexity label is one of `complexities`;
2. keep at most `max_per_db` examples of each database (a seeded sample, not the first ones,
   so a generator's template order does not decide what is kept);
3. when more than `max_examples` remain, take them round-robin over the databases (in a seeded
   order), so the cap removes examples from the largest databases first and every schema
   keeps as many as the budget allows.

The result keeps the input order, so prepared files diff cleanly between runs.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterable, Sequence

from acesql.data.loaders import Example


def filter_examples(
    examples: Sequence[Example],
    complexities: Iterable[str] | None = None,
    max_per_db: int | None = None,
    max_examples: int | None = None,
    seed: int = 0,
) -> list[Example]:
    """The examples kept by source filtering, in input order (`None` = no limit).

    Unusable examples (database missing) are always dropped: nothing can be trained on them.
    Complexity labels compare case-insensitively.

    >>> from acesql.data.loaders import Example
    >>> labels = [("a", "simple"), ("a", "complex"), ("a", "complex"), ("b", "simple")]
    >>> rows = [Example(i, db, "q", "SELECT 1", "", complexity=c)
    ...         for i, (db, c) in enumerate(labels)]
    >>> [e.index for e in filter_examples(rows, complexities=["complex"])]
    [1, 2]
    >>> [e.db_id for e in filter_examples(rows, max_examples=2)]
    ['a', 'b']
    """
    kept = [e for e in examples if e.unusable is None]
    if complexities is not None:
        wanted = {c.lower() for c in complexities}
        kept = [e for e in kept if e.complexity.lower() in wanted]
    rng = random.Random(seed)
    by_db: dict[str, list[Example]] = defaultdict(list)
    for example in kept:
        by_db[example.db_id].append(example)
    for db_examples in by_db.values():
        rng.shuffle(db_examples)
        if max_per_db is not None:
            del db_examples[max_per_db:]
    if max_examples is not None:
        _round_robin(by_db, max_examples, rng)
    chosen = {id(e) for db_examples in by_db.values() for e in db_examples}
    return [e for e in kept if id(e) in chosen]


def _round_robin(by_db: dict[str, list[Example]], budget: int, rng: random.Random) -> None:
    """Cut each database's (shuffled) list to its share of `budget`, dealt one at a time."""
    order = sorted(by_db)
    rng.shuffle(order)
    share = dict.fromkeys(order, 0)
    while budget > 0:
        dealt = False
        for db_id in order:
            if budget > 0 and share[db_id] < len(by_db[db_id]):
                share[db_id] += 1
                budget -= 1
                dealt = True
        if not dealt:
            break
    for db_id in order:
        del by_db[db_id][share[db_id] :]
