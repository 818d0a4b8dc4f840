"""Plain SQL seen as a Chain-of-CTE trajectory, so the process reward can judge a policy that
writes direct SQL.

    parses = chain_views([(db_path, sql, schema), ...], executor)

Reward-SQL's score model reads chains. A policy that writes one query gets the same treatment
through a fixed rewrite: `to_cocte` turns the query's subqueries, set operation, filter or
staged join into steps. The rewrite is kept when it executes to the same rows as the query
(multiset) and each of its steps runs on its own; when not, or when it fails, the query
becomes a chain of one step (the whole query, then `SELECT *` from it), which always has the
query's result. So the view never changes what an answer returns, only how it is shown. It is
deterministic: answers that share their first steps share those prefixes, which is what
`acesql.prm.labels` builds its tree on. A query that does not parse has no view (None), like
a malformed chain.
"""

from __future__ import annotations

from acesql.sql.cocte import CocteParse, parse_cocte, prefix_sql
from acesql.sql.to_cocte import one_step_cocte, to_cocte


def chain_views(items, executor) -> list[CocteParse | None]:
    """`items`: (db_path, sql, schema or None). The chain of each sql, in input order."""
    staged = [_parse(_rewrite(to_cocte, sql, schema), schema) for _, sql, schema in items]
    checks = [(i, db, p.sql, sql) for i, ((db, sql, _), p) in enumerate(zip(items, staged)) if p]
    verdicts = executor.match_many([(db, chain, sql) for _, db, chain, sql in checks], "multiset")
    same = {i for (i, *_), v in zip(checks, verdicts) if v.match.match}
    # a step that only runs inside the whole query (one correlated to the final SELECT, which
    # SQLite allows) has no intermediate result of its own: not a view to show
    prefixes = [
        (i, items[i][0], prefix_sql(staged[i], k))
        for i in sorted(same)
        for k in range(1, len(staged[i].steps) + 1)
    ]
    ran = executor.execute_many([(db, sql) for _, db, sql in prefixes])
    same -= {i for (i, _, _), result in zip(prefixes, ran) if not result.ok}
    return [
        staged[i] if i in same else _parse(_rewrite(one_step_cocte, sql, schema), schema)
        for i, (_, sql, schema) in enumerate(items)
    ]


def _rewrite(rewrite, sql: str, schema) -> str | None:
    if not sql or not sql.strip():
        return None
    try:
        return rewrite(sql, schema)
    except Exception:  # noqa: BLE001 - a query sqlglot cannot rewrite is shown another way
        return None


def _parse(chain: str | None, schema) -> CocteParse | None:
    if chain is None:
        return None
    parse = parse_cocte(chain, [t.name for t in schema.tables] if schema else ())
    return parse if parse.ok else None
