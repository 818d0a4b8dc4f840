"""Realistic bugs injected into working SELECTs: one rule per function, in a registry by name.

Each rule takes the parsed query (a copy it may change), the database's schema and a seeded
`random.Random`, and returns the broken query, or None when it does not apply (a query
without a join cannot get a wrong join key). `inject(sql, name, schema, rng)` is the entry.
Whether the broken query really misbehaves is decided by running it (`acesql.debug.build`).

>>> from acesql.sql.schema import Column, Schema, Table
>>> schema = Schema("s", (Table("t", (Column("t", "a", "INTEGER"),)),))
>>> inject("SELECT a FROM t WHERE a IS NULL", "null_equality", schema, random.Random(0))
'SELECT a FROM t WHERE a = NULL'
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable

import sqlglot
from sqlglot import exp
from sqlglot.errors import SqlglotError

from acesql.errors import ConfigError
from acesql.sql.schema import Schema

DIALECT = "sqlite"
Rule = Callable[[exp.Expression, Schema, random.Random], exp.Expression | None]
_ISO_DATE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")
_YEAR = re.compile(r"^\d{4}$")
_KEY_NAME = re.compile(r"(id|_no|_cd|code|key|num|ref)$", re.I)  # names that look like keys


def inject(sql: str, name: str, schema: Schema, rng: random.Random) -> str | None:
    """`sql` with the bug `name` (a key of `QUERY_BUGS`), or None when it does not apply."""
    rule = QUERY_BUGS.get(name)
    if rule is None:
        raise ConfigError(f"unknown bug {name!r}; choose one of {sorted(QUERY_BUGS)}")
    try:
        tree = sqlglot.parse_one(sql, read=DIALECT)
    except SqlglotError:
        return None
    broken = rule(tree.copy(), schema, rng)
    if broken is None:
        return None
    text = broken.sql(dialect=DIALECT)
    return None if text == tree.sql(dialect=DIALECT) else text


def wrong_join_key(tree, schema, rng):
    """A join on the wrong column of one side: `ON a.dept_id = b.id` -> `ON a.manager_id = b.id`."""
    tables = _aliases(tree)
    sides = []
    for join in tree.find_all(exp.Join):
        on = join.args.get("on")
        if isinstance(on, exp.EQ) and all(isinstance(s, exp.Column) for s in (on.left, on.right)):
            sides += [on.left, on.right]
    rng.shuffle(sides)
    for column in sides:
        table = tables.get(column.table.lower())
        if table is None:
            continue
        others = [
            c
            for c in _columns(schema, table)
            if c.name.lower() != column.name.lower() and _integer(c.type)
        ]
        keys = [c for c in others if c.primary_key or _KEY_NAME.search(c.name)]
        if others:
            column.set("this", exp.to_identifier(rng.choice(keys or others).name))
            return tree
    return None


def missing_group_by(tree, schema, rng):
    """The GROUP BY of an aggregate query left out: one row instead of one per group."""
    select = tree if isinstance(tree, exp.Select) else None
    if select is None or not select.args.get("group"):
        return None
    select.set("group", None)
    return tree


def join_double_count(tree, schema, rng):
    """An aggregate over one table joined to a child table: each row counted once per child."""
    if not isinstance(tree, exp.Select) or tree.args.get("joins") or tree.args.get("with"):
        return None
    if not any(isinstance(e, (exp.Count, exp.Sum)) for e in tree.find_all(exp.AggFunc)):
        return None
    source = tree.args.get("from_")
    table = source.this if source else None
    if not isinstance(table, exp.Table):
        return None
    children = [
        fk
        for fk in schema.foreign_keys
        if fk.references.split(".")[0] == table.name.lower()
        and fk.column.split(".")[0] != table.name.lower()
    ]
    if not children:
        return None
    fk = rng.choice(children)
    child, child_col = (schema.column(fk.column).table, schema.column(fk.column).name)
    parent_col = schema.column(fk.references).name
    side = table.alias_or_name
    on = exp.EQ(
        this=exp.column(child_col, table="J"), expression=exp.column(parent_col, table=side)
    )
    tree.append("joins", exp.Join(this=exp.table_(child, alias="J"), on=on))
    return tree


def null_equality(tree, schema, rng):
    """`x IS NULL` written `x = NULL` (never true), `IS NOT NULL` as `<> NULL`."""
    for node in list(tree.find_all(exp.Is)):
        if not isinstance(node.expression, exp.Null):
            continue
        parent = node.parent
        if isinstance(parent, exp.Not):
            parent.replace(exp.NEQ(this=node.this.copy(), expression=exp.Null()))
        else:
            node.replace(exp.EQ(this=node.this.copy(), expression=exp.Null()))
        return tree
    return None


def date_as_number(tree, schema, rng):
    """A date compared as a number: `d > '2021-01-09'` -> `d > 20210109`, `strftime('%Y', d) =
    '2020'` -> `= 2020` (SQLite never finds a text equal to a number)."""
    for literal in tree.find_all(exp.Literal):
        if not literal.is_string or not isinstance(literal.parent, exp.Binary):
            continue
        text = literal.this
        if _ISO_DATE.match(text):
            literal.replace(exp.Literal.number(text.replace("-", "")))
            return tree
        if _YEAR.match(text):
            literal.replace(exp.Literal.number(text))
            return tree
    return None


def off_by_one_limit(tree, schema, rng):
    """LIMIT n -> LIMIT n + 1."""
    limit = tree.args.get("limit")
    value = limit.expression if isinstance(limit, exp.Limit) else None
    if not isinstance(value, exp.Literal) or value.is_string:
        return None
    limit.set("expression", exp.Literal.number(int(value.this) + 1))
    return tree


def flipped_order(tree, schema, rng):
    """The first ORDER BY key sorted the other way in a query that keeps the top rows."""
    order = tree.args.get("order")
    if not order or not tree.args.get("limit"):
        return None
    first = order.expressions[0]
    desc = not first.args.get("desc")
    first.set("desc", desc)
    first.set("nulls_first", not desc)  # SQLite's own NULL placement, so none is spelled out
    return tree


_LOOSER = {exp.GT: exp.GTE, exp.LT: exp.LTE, exp.GTE: exp.GT, exp.LTE: exp.LT}


def wrong_comparison(tree, schema, rng):
    """A strict comparison made inclusive or the other way: `>` <-> `>=`, `<` <-> `<=`."""
    nodes = [n for n in tree.find_all(*_LOOSER) if not isinstance(n.expression, exp.Subquery)]
    if not nodes:
        return None
    node = rng.choice(nodes)
    node.replace(_LOOSER[type(node)](this=node.this.copy(), expression=node.expression.copy()))
    return tree


_SWAPPED = {exp.Avg: exp.Sum, exp.Max: exp.Min, exp.Min: exp.Max}


def wrong_aggregate(tree, schema, rng):
    """The wrong aggregate: AVG -> SUM, MAX <-> MIN, COUNT(DISTINCT x) -> COUNT(x)."""
    for node in tree.find_all(exp.AggFunc):
        if type(node) in _SWAPPED:
            node.replace(_SWAPPED[type(node)](this=node.this.copy()))
            return tree
        if isinstance(node, exp.Count) and isinstance(node.this, exp.Distinct):
            node.set("this", node.this.expressions[0].copy())
            return tree
    return None


QUERY_BUGS: dict[str, Rule] = {
    "wrong_join_key": wrong_join_key,
    "missing_group_by": missing_group_by,
    "join_double_count": join_double_count,
    "null_equality": null_equality,
    "date_as_number": date_as_number,
    "off_by_one_limit": off_by_one_limit,
    "flipped_order": flipped_order,
    "wrong_comparison": wrong_comparison,
    "wrong_aggregate": wrong_aggregate,
}


def _aliases(tree) -> dict[str, str]:
    """Alias (or name) -> table name, lower-cased, for the tables the query reads."""
    return {t.alias_or_name.lower(): t.name.lower() for t in tree.find_all(exp.Table)}


def _columns(schema: Schema, table: str):
    try:
        return schema.table(table).columns
    except (KeyError, ValueError, LookupError):
        return ()


def _integer(sql_type: str) -> bool:
    return "INT" in (sql_type or "").upper()
