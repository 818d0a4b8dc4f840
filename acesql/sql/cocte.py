"""Chain-of-CTE (CoCTE) outputs, as in Reward-SQL: each step a short rationale and one CTE,
a final SELECT composing them, all of it one SQLite statement.

    WITH
    -- step: the concerts of 2014
    concerts_2014 AS (SELECT concert_id, stadium_id FROM concert WHERE year = 2014),
    -- step: how many each stadium held
    per_stadium AS (SELECT stadium_id, COUNT(*) AS n FROM concerts_2014 GROUP BY stadium_id)
    -- final: the busiest stadium
    SELECT stadium_id FROM per_stadium ORDER BY n DESC LIMIT 1

`parse_cocte(text)` reads such an output (inside a ```sql block or bare) into its steps and
final query, and lists what is wrong instead of guessing around it: no step, a statement that
does not parse, a name defined twice, a name that shadows a table of the schema, a step that
uses a step defined after it, a recursive CTE, a step without its rationale comment. Every
step of a well-formed chain has an executable prefix (`prefix_sql`: its CTE and the ones
before it, then `SELECT * FROM` it, bounded), so each step has an intermediate result.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import sqlglot
from sqlglot import exp
from sqlglot.tokens import TokenType

from acesql.sql.parsing import parse_sql

DIALECT = "sqlite"
PREFIX_ROWS = 50  # rows of an intermediate result a step prefix returns


@dataclass(frozen=True)
class CocteStep:
    name: str
    rationale: str  # "" when the output gave none
    sql: str  # the CTE's body, without its name


@dataclass
class CocteParse:
    steps: list[CocteStep] = field(default_factory=list)
    final_sql: str = ""  # the statement's final SELECT, without the WITH clause
    final_rationale: str = ""
    sql: str = ""  # the whole statement as written
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems and bool(self.steps)


def parse_cocte(text: str, table_names: tuple[str, ...] | list[str] = ()) -> CocteParse:
    """The steps of a CoCTE output; `problems` says what makes it malformed.

    `table_names`: the schema's tables, which a step must not shadow.

    >>> p = parse_cocte("WITH\\n-- step: big\\nb AS (SELECT x FROM t WHERE x > 1) SELECT x FROM b")
    >>> [(s.name, s.rationale, s.sql) for s in p.steps], p.final_sql, p.ok
    ([('b', 'big', 'SELECT x FROM t WHERE x > 1')], 'SELECT x FROM b', True)
    """
    sql = parse_sql(text) if "```" in text else text.strip()
    out = CocteParse(sql=sql or "")
    if not sql:
        out.problems.append("no SQL in the output")
        return out
    try:
        tree = sqlglot.parse_one(sql, read=DIALECT)
    except (sqlglot.errors.SqlglotError, RecursionError) as err:  # token errors included
        first = (str(err).splitlines() or [type(err).__name__])[0]
        out.problems.append(f"the statement does not parse: {first}")
        return out
    with_ = tree.args.get("with_") or tree.args.get("with")
    if not isinstance(tree, exp.Query) or with_ is None or not with_.expressions:
        out.problems.append("no step: the statement has no WITH clause of named steps")
        return out
    if with_.args.get("recursive"):
        out.problems.append("a recursive CTE is not a step")
    final = tree.copy()
    final.set("with_" if "with_" in tree.args else "with", None)
    out.final_sql = final.sql(dialect=DIALECT, comments=False)
    rationales, out.final_rationale = _comments(sql)
    tables = {t.lower() for t in table_names}
    seen: list[str] = []
    for i, cte in enumerate(with_.expressions, 1):
        name = cte.alias_or_name
        body = cte.this.sql(dialect=DIALECT, comments=False)
        lower = name.lower()
        if lower in seen:
            out.problems.append(f"step {i}: the name {name!r} is already a step")
        if lower in tables:
            out.problems.append(f"step {i}: the name {name!r} shadows a table")
        later = {s.lower() for s in _names(with_)[i:]} - set(seen) - {lower}
        used = {t.name.lower() for t in cte.this.find_all(exp.Table)}
        for ahead in sorted(used & later):
            out.problems.append(f"step {i} ({name}) uses {ahead!r}, a step defined after it")
        rationale = rationales[i - 1] if i <= len(rationales) else ""
        if not rationale:
            out.problems.append(f"step {i} ({name}) has no rationale comment")
        out.steps.append(CocteStep(name, rationale, body))
        seen.append(lower)
    return out


def prefix_sql(parse: CocteParse, i: int, max_rows: int = PREFIX_ROWS) -> str:
    """The statement that shows step `i`'s (1-based) intermediate result: steps 1..i, then
    `SELECT * FROM` step i, at most `max_rows` rows.

    >>> p = parse_cocte("WITH\\n-- step: a\\na AS (SELECT 1 AS x),\\n-- step: b\\n"
    ...                 "b AS (SELECT x + 1 AS y FROM a)\\nSELECT y FROM b")
    >>> prefix_sql(p, 1)
    'WITH a AS (SELECT 1 AS x) SELECT * FROM a LIMIT 50'
    """
    if not 1 <= i <= len(parse.steps):
        raise ValueError(f"step {i} of {len(parse.steps)}")
    ctes = ", ".join(f"{_quote(s.name)} AS ({s.sql})" for s in parse.steps[:i])
    return f"WITH {ctes} SELECT * FROM {_quote(parse.steps[i - 1].name)} LIMIT {max_rows}"


def render_cocte(steps: list[CocteStep], final_sql: str, final_rationale: str = "") -> str:
    """The CoCTE statement of `steps` and a final query, one step a line, with comments."""
    lines = ["WITH"]
    for k, step in enumerate(steps):
        lines.append(f"-- step: {step.rationale}")
        comma = "," if k < len(steps) - 1 else ""
        lines.append(f"{_quote(step.name)} AS ({step.sql}){comma}")
    if final_rationale:
        lines.append(f"-- final: {final_rationale}")
    lines.append(final_sql)
    return "\n".join(lines)


def render_prefix(steps: list[CocteStep]) -> str:
    """The start of a CoCTE answer holding `steps`, as a policy would continue it (what comes
    next is a comma and another step, or the final query).

    >>> steps = [CocteStep("a", "one", "SELECT 1 AS x"), CocteStep("b", "two", "SELECT 2")]
    >>> print(render_prefix(steps))
    WITH
    -- step: one
    a AS (SELECT 1 AS x),
    -- step: two
    b AS (SELECT 2)
    """
    return render_cocte(steps, "").rstrip("\n")


def _names(with_: exp.With) -> list[str]:
    return [c.alias_or_name for c in with_.expressions]


def _comments(sql: str) -> tuple[list[str], str]:
    """(the comment above each step's name, the comment above the final query), read from
    the tokens at the statement's top level (sqlglot attaches a comment to the token after
    it); `step:` / `final:` labels dropped."""
    tokens = sqlglot.Dialect.get_or_raise(DIALECT).tokenize(sql)
    depth, closed, steps = 0, False, []
    for k, token in enumerate(tokens):
        kind = token.token_type
        if depth == 0 and kind != TokenType.WITH:
            nxt = [t.token_type for t in tokens[k + 1 : k + 3]]
            if nxt == [TokenType.ALIAS, TokenType.L_PAREN] and kind != TokenType.R_PAREN:
                steps.append(_label_dropped(token.comments))
            elif closed and kind != TokenType.COMMA:
                return steps, _label_dropped(token.comments)
        if kind == TokenType.L_PAREN:
            depth += 1
        elif kind == TokenType.R_PAREN:
            depth -= 1
            closed = depth == 0 and bool(steps)
            continue
        closed = closed and kind == TokenType.COMMA
    return steps, ""


def _label_dropped(comments: list[str]) -> str:
    text = " ".join(c.strip() for c in comments)
    return re.sub(r"^(step\s*\d*|final)\s*:\s*", "", text, flags=re.IGNORECASE).strip()


def _quote(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) else f'"{name}"'
