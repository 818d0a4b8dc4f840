"""Parsers for model output: the generator's SQL and the retriever's column list.

Both skip `<think>...</think>` reasoning (an unclosed `<think>` hides everything after it)
and take the last fitting code block. They never raise: a malformed output gives no SQL, or
no columns, and says why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from acesql.sql.schema import Schema

_THINK = re.compile(r"<think>.*?(?:</think>|$)", re.S | re.I)
_STRAY_CLOSE = re.compile(r"^.*?</think>", re.S | re.I)
# Possessive quantifiers (`*+`, `?+`) keep the parsers linear: with backtracking, an unclosed
# fence followed by 16k letters or blanks took seconds (each shorter language name rescanned
# the rest of the text for a closing fence). No match needs the backtracking: a language
# name and blanks hold no backtick.
_FENCE = re.compile(r"```[ \t]*+([A-Za-z0-9_+-]*+)[ \t]*+\n?+(.*?)```", re.S)
_OPEN_FENCE = re.compile(r"```[ \t]*+([A-Za-z0-9_+-]*+)[ \t]*+\n(.*)$", re.S)
_BARE_SQL = re.compile(r"(?im)^[ \t]*+((?:SELECT|WITH)\b.*)")
_LIST = re.compile(r"\[([^\[\]]*+)\]", re.S)
_OPEN_LIST = re.compile(r"\[([^\[\]]*+)$", re.S)
_THOUGHT = re.compile(r"</think>", re.I)
_SQL_BLOCK = re.compile(r"```(?:sql|sqlite)[ \t]*+\n.*?```", re.S | re.I)


def format_ok(completion, role: str, reasoning: bool) -> bool:
    """The authors' format gate: whether a completion (text, finish_reason) may earn a reward.

    An output cut off at the token limit (`finish_reason == "length"`) earns nothing in either
    role. A generator output must hold a closed ```sql block, as its prompt asks (a bare
    SELECT or a ```python block parses, but is not the format asked for); with reasoning on,
    after a closing `</think>`.

    >>> from acesql.models.engine import Completion
    >>> format_ok(Completion("```sql\\nSELECT 1\\n```", finish_reason="stop"), "generator", True)
    False
    >>> format_ok(Completion("```sql\\nSELECT 1\\n```", finish_reason="stop"), "generator", False)
    True
    >>> format_ok(Completion("SELECT 1", finish_reason="stop"), "generator", False)
    False
    >>> ok = "<think>x</think>\\n```sql\\nSELECT 1\\n```"
    >>> format_ok(Completion(ok, finish_reason="stop"), "generator", True)
    True
    >>> format_ok(Completion(ok, finish_reason="length"), "retriever", False)
    False
    """
    if completion.finish_reason == "length":
        return False
    if role != "generator":
        return True
    if not reasoning:
        return bool(_SQL_BLOCK.search(completion.text))
    # a closed ```sql block somewhere after the first </think>: one scan, not one per </think>
    thought = _THOUGHT.search(completion.text)
    return bool(thought and _SQL_BLOCK.search(completion.text, thought.end()))


def strip_think(text: str) -> str:
    """Remove reasoning blocks; text before a stray `</think>` counts as reasoning too."""
    text = _THINK.sub("", text)
    if "</think>" in text.lower():
        text = _STRAY_CLOSE.sub("", text)
    return text


def parse_sql(text: str) -> str | None:
    """The SQL in a generator output, or None.

    Order of preference: the last ```sql block, the last code block of any language, an
    unterminated final ```sql block (a cut-off output), then the text from the first line
    starting with SELECT or WITH to the next blank line.

    >>> out = "<think>```sql SELECT 1```</think>So:\\n```sql\\nSELECT name FROM t;\\n```"
    >>> parse_sql(out)
    'SELECT name FROM t'
    """
    if not isinstance(text, str):
        return None
    body = strip_think(text)
    blocks = _FENCE.findall(body)
    sql_blocks = [code for lang, code in blocks if lang.lower() in ("sql", "sqlite")]
    for candidates in (sql_blocks, [code for _, code in blocks]):
        for code in reversed(candidates):
            if clean := _clean_sql(code):
                return clean
    if body.count("```") % 2 == 1:  # a cut-off output: the last fence never closed
        opened = _OPEN_FENCE.search(body[body.rfind("```") :])
        if opened and (clean := _clean_sql(opened.group(2))):
            return clean
    tail = body.split("```")[-1]
    bare = _BARE_SQL.search(tail)
    if bare:  # no usable fence: SQL from the first SELECT/WITH line to a blank line
        return _clean_sql(re.split(r"\n\s*\n", tail[bare.start(1) :])[0]) or None
    return None


def _clean_sql(code: str) -> str:
    code = code.strip()
    # one statement only: cut at the first semicolon outside quotes
    out, quote = [], None
    for ch in code:
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"`":
            quote = ch
        elif ch == ";":
            break
        out.append(ch)
    return "".join(out).strip()


@dataclass(frozen=True)
class ColumnParse:
    columns: tuple[str, ...]  # canonical ids, in the order first written, no repeats
    unknown: tuple[str, ...]  # items that name no column of the schema
    ok: bool  # False when no list was found at all
    error: str | None = None
    salvaged: bool = False  # True: read from a list that never closed (`salvage_unclosed`)


def parse_columns(text: str, schema: Schema, *, salvage_unclosed: bool = False) -> ColumnParse:
    """The columns a retriever output names, resolved against `schema`.

    Takes the last code block holding a `[...]` list (or the last list in the text), splits
    it on commas and newlines, and tolerates quotes and backticks around items.

    A list that never closes is no list (the paper's strict reading). With
    `salvage_unclosed`, an output that ends inside an open list (a greedy decoder looping
    over the same columns until the token cap) gives the columns it named before the first
    one it named again; an item the cut ended is dropped.

    >>> from acesql.sql.schema import Column, Table
    >>> s = Schema("db", (Table("t", (Column("t", "a"), Column("t", "b"))),))
    >>> parse_columns("[t.a, t.b, t.a, t.b, t.", s).ok
    False
    >>> loop = parse_columns("[t.a, t.b, t.a, t.b, t.", s, salvage_unclosed=True)
    >>> loop.columns, loop.salvaged
    (('t.a', 't.b'), True)

    >>> s = Schema("db", (Table("Singer", (Column("Singer", "Name"),)),))
    >>> got = parse_columns("```\\n['singer.name', `Singer`.`Age`]\\n```", s)
    >>> got.columns, got.unknown
    (('singer.name',), ('`Singer`.`Age`',))
    """
    if not isinstance(text, str):
        return ColumnParse((), (), False, "output is not text")
    body = strip_think(text)
    items = None
    for _, code in reversed(_FENCE.findall(body)):
        lists = _LIST.findall(code)
        if lists:
            items = lists[-1]
            break
    if items is None:
        lists = _LIST.findall(body)
        if not lists:
            opened = _OPEN_LIST.search(body) if salvage_unclosed else None
            if opened is None:
                return ColumnParse((), (), False, "no [table.column, ...] list found")
            return _salvage(opened.group(1), schema)
        items = lists[-1]
    columns, unknown = [], []
    resolved: dict[str, str | None] = {}  # a degenerate output repeats one item thousands of times
    for raw in re.split(r"[,\n]", items):
        item = raw.strip()
        if not item:
            continue
        if item not in resolved:
            resolved[item] = schema.resolve(item)
        cid = resolved[item]
        if cid is None:
            unknown.append(item)
        elif cid not in columns:
            columns.append(cid)
    return ColumnParse(tuple(columns), tuple(unknown), True)


def _salvage(items: str, schema: Schema) -> ColumnParse:
    """The columns of an unclosed list: complete items up to the first repeated column."""
    columns, unknown = [], []
    for raw in re.split(r"[,\n]", items)[:-1]:  # the last piece is what the cut left
        item = raw.strip()
        if not item:
            continue
        cid = schema.resolve(item)
        if cid is None:
            unknown.append(item)
        elif cid in columns:
            break
        else:
            columns.append(cid)
    return ColumnParse(tuple(columns), tuple(unknown), True, salvaged=True)
