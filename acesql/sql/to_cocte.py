"""Rewrite a SQL query into Chain-of-CTE form (`acesql.sql.cocte`), for cold-start targets.

    to_cocte("SELECT name FROM singer WHERE age > (SELECT AVG(age) FROM singer)", ["singer"])

Rules, applied in this order, each turning part of the query into a named step:

1. subqueries, innermost first: a derived table in FROM / JOIN becomes a step read under its
   alias; a subquery in a predicate (`IN (...)`, a scalar comparison, `EXISTS`) becomes a step
   read back as `(SELECT * FROM step)`;
2. a set operation (UNION, INTERSECT, EXCEPT) at the top: each side a step, the final query
   combines them with the same operator (its ORDER BY / LIMIT kept);
3. a single-table query with a WHERE: the filtered rows become a step, read under the table's
   own name, so every `table.column` of the rest still resolves;
4. a join that is then filtered, grouped or aggregated (given the schema, to resolve its
   columns): the joined rows with the columns the rest needs (`alias_column`) become a step,
   and the final query selects, groups, orders from it;
5. a query none of these reaches: one step holding it, the final query `SELECT *` from it.

Rationales are templated from each step's operation (what it selects, from which tables,
which filter, grouping). The result is only a candidate: it must execute to the gold result
(`acesql.sft.data.build_gold` keeps it only then). A correlated subquery, which cannot stand
alone as a step, simply makes that candidate fail the check.
"""

from __future__ import annotations

import sqlglot
from sqlglot import exp

from acesql.sql.cocte import DIALECT, CocteStep, render_cocte
from acesql.sql.schema import Schema

RATIONALE_CHARS = 80


def to_cocte(sql: str, schema: Schema | None = None) -> str | None:
    """The CoCTE form of `sql`, or None when it does not parse or is recursive. CTEs it
    already has are its first steps.
    `schema`: the database's, so no step shadows a table and joins can be staged.

    >>> print(to_cocte("SELECT name FROM singer WHERE age > 30"))
    WITH
    -- step: the rows of singer where age > 30
    singer_rows AS (SELECT * FROM singer WHERE age > 30)
    -- final: name of singer_rows
    SELECT name FROM singer_rows AS singer
    """
    tree = _query(sql)
    if tree is None:
        return None
    taken = {t.name.lower() for t in schema.tables} if schema else set()
    steps: list[CocteStep] = []
    with_ = tree.args.get("with_") or tree.args.get("with")
    if with_ is not None:  # a query written with CTEs already: they are its first steps
        if with_.args.get("recursive"):
            return None
        for cte in with_.expressions:
            taken.add(cte.alias_or_name.lower())
            body = cte.this.sql(dialect=DIALECT, comments=False)
            steps.append(CocteStep(cte.alias_or_name, describe(cte.this), body))
        tree.set(with_.arg_key, None)

    def add(body: exp.Expression, hint: str, rationale: str | None = None) -> str:
        name = _fresh(hint, taken)
        sql = body.sql(dialect=DIALECT, comments=False)
        steps.append(CocteStep(name, rationale or describe(body), sql))
        return name

    _extract_subqueries(tree, add, steps)
    if isinstance(tree, exp.SetOperation):
        tree = _split_set_operation(tree, add)
    elif isinstance(tree, exp.Select) and not steps:
        tree = _stage_filter(tree, add) or (schema and _stage_join(tree, schema, add)) or tree
    if not steps:
        name = add(tree, "answer")
        tree = exp.select("*").from_(name)
    final = tree.sql(dialect=DIALECT, comments=False)
    return render_cocte(steps, final, describe(tree))


def one_step_cocte(sql: str, schema: Schema | None = None) -> str | None:
    """`sql` as a chain of one step (the whole query) and `SELECT *` from it: the form that
    always keeps the query's result, where `to_cocte`'s rewrite does not. None when it does
    not parse.

    >>> print(one_step_cocte("SELECT COUNT(*) FROM singer"))
    WITH
    -- step: COUNT(*) of singer
    answer AS (SELECT COUNT(*) FROM singer)
    -- final: all of answer
    SELECT * FROM answer
    """
    tree = _query(sql)
    if tree is None:
        return None
    taken = {t.name.lower() for t in schema.tables} if schema else set()
    name = _fresh("answer", taken)
    step = CocteStep(name, describe(tree), tree.sql(dialect=DIALECT, comments=False))
    return render_cocte([step], f"SELECT * FROM {name}", f"all of {name}")


def _query(sql: str) -> exp.Query | None:
    """The parsed query, or None when `sql` does not parse or is not a query."""
    try:
        tree = sqlglot.parse_one(sql, read=DIALECT)
    except (sqlglot.errors.SqlglotError, RecursionError):  # token errors included
        return None
    return tree if isinstance(tree, exp.Query) else None


def describe(query: exp.Expression) -> str:
    """A one-line account of what `query` computes: columns, tables, filter, grouping.

    >>> describe(sqlglot.parse_one("SELECT COUNT(*) FROM t WHERE a = 1 GROUP BY b"))
    'COUNT(*) of t where a = 1 per b'
    """
    if isinstance(query, exp.SetOperation):
        return f"the {type(query).__name__.lower()} of the two steps before"
    if not isinstance(query, exp.Select):
        return "the query's result"
    cols = ", ".join(
        e.alias_or_name if isinstance(e, exp.Alias) else e.sql(dialect=DIALECT)
        for e in query.expressions
    )
    tables = ", ".join(dict.fromkeys(t.name for t in query.find_all(exp.Table)))
    text = f"{'all columns' if cols == '*' else cols} of {tables}" if tables else cols
    where = query.args.get("where")
    if where is not None:
        text += f" where {where.this.sql(dialect=DIALECT)}"
    group = query.args.get("group")
    if group is not None:
        text += " per " + ", ".join(g.sql(dialect=DIALECT) for g in group.expressions)
    return _clipped(text)


def _clipped(rationale: str) -> str:
    """`rationale` cut to RATIONALE_CHARS, marked where it was cut."""
    if len(rationale) <= RATIONALE_CHARS:
        return rationale
    return rationale[: RATIONALE_CHARS - 3] + "..."


def _extract_subqueries(tree: exp.Expression, add, steps: list[CocteStep]) -> None:
    """Rule 1, in place: each subquery, innermost first, becomes a step."""
    while True:
        inner = _innermost_subquery(tree, {s.name for s in steps})
        if inner is None:
            return
        node, query = inner
        if isinstance(node.parent, exp.From | exp.Join):
            alias = node.alias_or_name
            name = add(query, alias or "derived")
            node.replace(
                exp.to_table(name).as_(alias) if alias and alias != name else exp.to_table(name)
            )
        else:
            name = add(query, _hint(query))
            node.replace(exp.Subquery(this=exp.select("*").from_(name)))


def _innermost_subquery(tree: exp.Expression, step_names: set[str]):
    """(node to replace, its query) of a subquery holding no other, or None; the reads of
    steps already made (`SELECT * FROM step`) are not subqueries to extract again."""
    for node in tree.find_all(exp.Subquery, exp.Select, exp.SetOperation):
        if node is tree:
            continue
        if isinstance(node, exp.Subquery):
            query = node.this
        elif isinstance(node.parent, exp.In | exp.Exists) and node.arg_key in ("query", "this"):
            query = node  # IN (SELECT ...) holds the query directly in some sqlglot versions
        else:
            continue
        if not isinstance(query, exp.Query) or _reads_a_step(query, step_names):
            continue
        nested = [n for n in query.find_all(exp.Subquery) if n is not query]
        if any(not _reads_a_step(n.this, step_names) for n in nested):
            continue
        if isinstance(node, exp.Subquery) and isinstance(node.parent, exp.SetOperation):
            continue  # a parenthesised side of a set operation: rule 2's business
        return node, query
    return None


def _reads_a_step(query: exp.Expression, step_names: set[str]) -> bool:
    source = query.args.get("from_") or query.args.get("from")
    return (
        isinstance(query, exp.Select)
        and source is not None
        and isinstance(source.this, exp.Table)
        and source.this.name in step_names
        and [e.sql() for e in query.expressions] == ["*"]
    )


def _split_set_operation(tree: exp.SetOperation, add) -> exp.Expression:
    """Rule 2: each side of a top-level UNION / INTERSECT / EXCEPT a step."""
    left = add(tree.left, _hint(tree.left))
    right = add(tree.right, _hint(tree.right))
    combined = type(tree)(
        this=exp.select("*").from_(left),
        expression=exp.select("*").from_(right),
        distinct=tree.args.get("distinct"),
    )
    for key in ("order", "limit", "offset"):
        if tree.args.get(key) is not None:
            combined.set(key, tree.args[key])
    return combined


def _stage_filter(tree: exp.Select, add) -> exp.Select | None:
    """Rule 3: `SELECT ... FROM t WHERE c ...` -> step `t_rows` = the rows of t where c."""
    source = tree.args.get("from_") or tree.args.get("from")
    where = tree.args.get("where")
    if source is None or where is None or tree.args.get("joins"):
        return None
    table = source.this
    if not isinstance(table, exp.Table):
        return None
    rows = exp.select("*").from_(table.copy()).where(where.this.copy())
    condition = where.this.sql(dialect=DIALECT)
    name = add(rows, f"{table.name}_rows", f"the rows of {table.name} where {condition}")
    staged = tree.copy()
    staged.set("where", None)
    staged.set(source.arg_key, exp.From(this=exp.to_table(name).as_(table.alias_or_name)))
    return staged


def _stage_join(tree: exp.Select, schema: Schema, add) -> exp.Select | None:
    """Rule 4: `SELECT ... FROM a JOIN b ... WHERE ... GROUP BY ...` -> step `joined` = the
    joined, filtered rows with each column the rest reads as `alias_column`."""
    from sqlglot.optimizer.qualify import qualify

    if not tree.args.get("joins"):
        return None
    reshaped = any(tree.args.get(k) is not None for k in ("where", "group", "having"))
    if not reshaped and not tree.find(exp.AggFunc):
        return None
    try:
        qualified = qualify(
            tree.copy(),
            schema=schema.sqlglot_mapping(),
            dialect=DIALECT,
            validate_qualify_columns=True,
            quote_identifiers=False,
            expand_alias_refs=False,
        )
    except Exception:  # noqa: BLE001 - a query sqlglot cannot resolve keeps rule 5
        return None
    source = qualified.args.get("from_") or qualified.args.get("from")
    rest = [qualified.args.get(k) for k in ("group", "having", "order")]
    needed: dict[tuple[str, str], str] = {}
    for node in [*qualified.expressions, *[r for r in rest if r is not None]]:
        for column in node.find_all(exp.Column):
            key = (column.table, column.name)
            if column.table and key not in needed:
                needed[key] = _fresh(f"{column.table}_{column.name}", set(needed.values()))
    projections = [exp.column(c, table=t).as_(alias) for (t, c), alias in needed.items()]
    rows = exp.select(*(projections or [exp.Literal.number(1).as_("row_marker")]))
    rows = rows.from_(source.this.copy())
    for join in qualified.args["joins"]:
        rows.append("joins", join.copy())
    if qualified.args.get("where") is not None:
        rows.set("where", qualified.args["where"].copy())
    tables = ", ".join(t.name for t in rows.find_all(exp.Table))
    where = qualified.args.get("where")
    rationale = f"the rows of {tables} joined" + (
        f" where {where.this.sql(dialect=DIALECT)}" if where is not None else ""
    )
    name = add(rows, "joined", _clipped(rationale))
    staged = qualified.copy()
    staged.set("joins", None)
    staged.set("where", None)
    staged.set(source.arg_key, exp.From(this=exp.to_table(name)))
    for column in list(staged.find_all(exp.Column)):
        alias = needed.get((column.table, column.name))
        if alias:
            column.replace(exp.column(alias))
    return staged


def _hint(query: exp.Expression) -> str:
    """A step name from what a query selects: `avg_age`, `singer_ids`, ..."""
    if isinstance(query, exp.Select) and len(query.expressions) == 1:
        e = query.expressions[0]
        if isinstance(e, exp.AggFunc):
            inner = e.this.name if isinstance(e.this, exp.Column) else "all"
            return f"{type(e).__name__.lower()}_{inner}"
        if isinstance(e, exp.Column):
            return f"{e.name}_set"
    tables = [t.name for t in query.find_all(exp.Table)]
    return f"{tables[0]}_part" if tables else "part"


def _fresh(hint: str, taken: set[str]) -> str:
    """A name from `hint` (identifier characters, lower case) not yet in `taken`; taken now."""
    base = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in hint.lower()).strip("_")
    base = base if base and not base[0].isdigit() else f"step_{base}"
    name, k = base, 2
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    taken.add(name)
    return name
