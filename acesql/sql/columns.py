"""The canonical column set of a SQL query, extracted with sqlglot.

The query is parsed as SQLite, qualified against the schema (aliases resolved, `SELECT *`
expanded, USING turned into ON), then every scope is walked — subqueries, CTEs, derived
tables, correlated references — and each column that resolves to a real table is kept as
its canonical id. A column of a CTE or derived table counts through the scope that defines it.
A table the query reads without naming any of its columns (`SELECT count(*) FROM t`) adds one
column that stands for it, its primary key (else its first column): a schema pruned to the set
must still show every table the query reads.

SQLite reads an unknown double-quoted identifier as a string literal (`name = "Joe"`), as
much Spider gold SQL relies on; so does this module.
"""

from __future__ import annotations

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError
from sqlglot.optimizer.qualify import qualify
from sqlglot.optimizer.scope import traverse_scope

from acesql.errors import SqlParseError
from acesql.sql.schema import Schema, canonical_id

MAX_SQL_CHARS = 50_000


def parse_query(sql: str) -> exp.Expression:
    """Parse exactly one SQLite query (SELECT, WITH or a set operation) or raise SqlParseError."""
    if not isinstance(sql, str) or not sql.strip():
        raise SqlParseError("empty SQL")
    if len(sql) > MAX_SQL_CHARS:
        raise SqlParseError(f"SQL longer than {MAX_SQL_CHARS} characters")
    try:
        statements = [s for s in sqlglot.parse(sql, read="sqlite") if s is not None]
    except SqlglotError as exc:
        raise SqlParseError(f"cannot parse SQL: {_first_line(exc)}") from exc
    except Exception as exc:  # noqa: BLE001 - model output must fail as data, never crash
        # e.g. RecursionError: sqlglot recurses once per nested parenthesis
        raise SqlParseError(f"cannot parse SQL: {_describe(exc)}") from exc
    if len(statements) != 1:
        raise SqlParseError(f"expected one statement, found {len(statements)}")
    tree = statements[0]
    if not isinstance(tree, exp.Query):
        raise SqlParseError(f"not a query: {tree.key.upper()}")
    return tree


def extract_columns(sql: str, schema: Schema) -> frozenset[str]:
    """The canonical ids of the schema columns `sql` uses, or SqlParseError.

    >>> from acesql.sql.schema import Column, Table
    >>> s = Schema("db", (Table("T", (Column("T", "a"), Column("T", "b"))),))
    >>> sorted(extract_columns('SELECT count(*) FROM t WHERE "B" > 1', s))
    ['t.b']
    >>> sorted(extract_columns("SELECT count(*) FROM t", s))
    ['t.a']
    """
    tree = parse_query(sql)
    mapping = schema.sqlglot_mapping()
    try:
        return _columns(tree, mapping, schema)
    except SqlglotError as exc:
        raise SqlParseError(
            f"cannot resolve SQL against {schema.db_id}: {_first_line(exc)}"
        ) from exc
    except Exception as exc:  # noqa: BLE001 - model output must fail as data, never crash
        # sqlglot's optimizer raises KeyError, ValueError, ... on odd trees, and
        # RecursionError on deep ones
        raise SqlParseError(f"cannot resolve SQL against {schema.db_id}: {_describe(exc)}") from exc


def _columns(tree: exp.Expression, mapping: dict, schema: Schema) -> frozenset[str]:
    _literalize_unknown_quoted(tree, mapping)
    qualified = qualify(
        tree,
        schema=mapping,
        dialect="sqlite",
        validate_qualify_columns=True,
        quote_identifiers=False,
    )
    found, read, named = set(), set(), set()
    for scope in traverse_scope(qualified):
        for source in scope.sources.values():
            if isinstance(source, exp.Table) and source.name.lower() in mapping:
                read.add(source.name.lower())
        for column in scope.columns:
            source = _source_of(scope, column.table)
            known = isinstance(source, exp.Table) and column.name.lower() in mapping.get(
                source.name.lower(), {}
            )
            if known:
                found.add(canonical_id(source.name, column.name))
                named.add(source.name.lower())
    for table in read - named:
        column = _stand_in(schema, table)
        if column is not None:
            found.add(column.id)
    return frozenset(found)


def _stand_in(schema: Schema, table_name: str):
    """The column that stands for a table read without naming a column: its key, else its first."""
    try:
        table = schema.table(table_name)
    except KeyError:
        return None
    candidates = table.primary_key or table.columns
    return candidates[0] if candidates else None


def has_order_by(sql: str) -> bool:
    """Whether the result order of `sql` is defined by an outer ORDER BY.

    Falls back to a text search when the SQL does not parse.

    >>> has_order_by("SELECT a FROM t ORDER BY a")
    True
    >>> has_order_by("SELECT a FROM (SELECT a FROM t ORDER BY a)")
    False
    """
    try:
        tree = parse_query(sql)
    except SqlParseError:
        return "order by" in " ".join(str(sql).lower().split())
    return tree.args.get("order") is not None


def _source_of(scope, table_name: str):
    while scope is not None:
        source = scope.sources.get(table_name)
        if source is not None:
            return source
        scope = scope.parent
    return None


def _literalize_unknown_quoted(tree: exp.Expression, mapping: dict) -> None:
    """Turn `"text"` into the string 'text' where no column of that name exists, as SQLite does."""
    names = {c for cols in mapping.values() for c in cols}
    aliases = {a.alias.lower() for a in tree.find_all(exp.Alias) if a.alias}
    for column in list(tree.find_all(exp.Column)):
        ident = column.this
        if column.table or not isinstance(ident, exp.Identifier) or not ident.quoted:
            continue
        name = ident.name.lower()
        if name not in names and name not in aliases:
            column.replace(exp.Literal.string(ident.name))


def _describe(exc: Exception) -> str:
    return f"{type(exc).__name__}: {_first_line(exc)}"[:200]


def _first_line(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
