"""What every question shape uses: the registry, and `Ctx`, which picks tables, columns and
real values from a synthetic database and says them in the domain's words.

A shape is a function `(ctx) -> (sql, slots)` registered with its family, its complexity
label and at least four phrasing templates. Templates are `str.format` strings over the
slots; the last one of each shape is held out of train and dev (it phrases `test_ood`
questions only). A shape that does not fit a database raises `Skip`.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from acesql.data.synth.database import SynthColumn, SynthDatabase, SynthTable
from acesql.sql.schema import quote_identifier

NUMERIC = ("int", "float", "money", "rating", "year")
CATEGORICAL = ("choice",)
NAMED = ("person_name", "company", "title", "code", "city", "country", "first_name", "last_name")
TEXTUAL = (
    "person_name",
    "company",
    "title",
    "city",
    "country",
    "street",
    "first_name",
    "last_name",
)
DATES = ("date", "datetime")
COMPLEXITIES = ("simple", "moderate", "complex", "highly complex")


class Skip(Exception):
    """This shape does not fit this database (or this draw): try another."""


@dataclass(frozen=True)
class Shape:
    name: str
    family: str
    complexity: str
    build: Callable
    templates: tuple[str, ...]


SHAPES: dict[str, Shape] = {}


def shape(name: str, family: str, complexity: str, templates: list[str]):
    """Register a shape function under `name`."""
    assert complexity in COMPLEXITIES and len(templates) >= 4, name

    def register(fn):
        if name in SHAPES:
            raise ValueError(f"shape {name!r} registered twice")
        SHAPES[name] = Shape(name, family, complexity, fn, tuple(templates))
        return fn

    return register


class Ctx:
    """One question being written: random choices, words and evidence for one database."""

    def __init__(self, db: SynthDatabase, rng: random.Random):
        self.db, self.rng = db, rng
        self.evidence: list[str] = []
        self._words: dict = {}

    # ------------------------------------------------------------- choosing
    def table(self, need: Callable[[SynthTable], bool] | None = None) -> SynthTable:
        tables = [t for t in self.db.entity_tables if need is None or need(t)]
        if not tables:
            raise Skip("no table fits")
        return self.rng.choice(tables)

    def cols(self, table: SynthTable, kinds=None, exclude=()) -> list[SynthColumn]:
        return [
            c
            for c in table.attrs
            if (kinds is None or c.kind in kinds) and c not in exclude and c.present()
        ]

    def col(self, table: SynthTable, kinds=None, exclude=()) -> SynthColumn:
        found = self.cols(table, kinds, exclude)
        if not found:
            raise Skip("no column fits")
        return self.rng.choice(found)

    def has(self, kinds, n: int = 1) -> Callable[[SynthTable], bool]:
        return lambda t: len(self.cols(t, kinds)) >= n

    def value(self, col: SynthColumn):
        return self.rng.choice(col.present())

    def number(self, col: SynthColumn):
        """A threshold that splits the column's values, taken from the data."""
        values = sorted(col.present())
        lo, hi = len(values) // 5, max(len(values) * 4 // 5, 1)
        return values[self.rng.randint(lo, hi - 1)] if hi > lo else values[0]

    def edges(self, child: SynthTable | None = None, parent: SynthTable | None = None):
        """Foreign keys as (child, fk column, parent), optionally restricted."""
        found = []
        for t in self.db.entity_tables:
            for fk in t.fks:
                p = self.db.table(fk.parent)
                wanted = (child is None or t is child) and (parent is None or p is parent)
                if wanted and t is not p:
                    found.append((t, fk, p))
        return found

    def edge(self, child=None, parent=None):
        found = self.edges(child, parent)
        if not found:
            raise Skip("no foreign key fits")
        return self.rng.choice(found)

    def chain(self, hops: int):
        """A path t0 -> t1 -> ... following foreign keys upwards, without repeats."""
        for _ in range(20):
            start = self.rng.choice(self.db.entity_tables)
            path, seen = [], {start.name}
            current = start
            while len(path) < hops:
                options = [e for e in self.edges(child=current) if e[2].name not in seen]
                if not options:
                    break
                step = self.rng.choice(options)
                path.append(step)
                seen.add(step[2].name)
                current = step[2]
            if len(path) == hops:
                return path
        raise Skip(f"no {hops}-hop chain")

    # ---------------------------------------------------------------- words
    def things(self, t: SynthTable) -> str:
        return t.entity.plural[self._variant(t)]

    def thing(self, t: SynthTable) -> str:
        return t.entity.phrases[self._variant(t)]

    def _variant(self, t: SynthTable) -> int:
        """One word choice per table and question, so singular and plural agree."""
        key = ("entity", t.name)
        if key not in self._words:
            self._words[key] = self.rng.randrange(len(t.entity.phrases))
        return self._words[key]

    def edge_words(self, child: SynthTable, fk: SynthColumn, parent: SynthTable) -> dict:
        """The slots of a foreign-key shape: child and parent words, the relation between them."""
        return dict(
            things=self.things(child),
            thing=self.thing(child),
            parent=self.thing(parent),
            parents=self.things(parent),
            plabel=self.said(parent.label),
            rel=self.rng.choice(fk.relation),
        )

    def said(self, col: SynthColumn) -> str:
        """The words for a column; a cryptic name earns an evidence hint."""
        key = ("col", id(col))
        if key not in self._words:
            phrase = self.rng.choice(col.attr.phrases)
            self._words[key] = phrase
            if col.cryptic:
                self.hint(f"{phrase} refers to {col.name}")
        return self._words[key]

    def say(self, col: SynthColumn, value) -> str:
        """A stored value as a person would say it; coded values earn an evidence hint."""
        attr = col.attr
        if attr.codes:
            human = {code: word for word, code in attr.codes.items()}.get(value)
            if human is not None:
                self.hint(f"{human} refers to {col.name} = {self.lit(value)}")
                return human
        if attr.kind == "bool":  # stored 0/1: say the flag, and how it is stored
            word = "yes" if value else "no"
            self.hint(f"{self.said(col)} {word} refers to {col.name} = {int(bool(value))}")
            return f"set to {word}"
        if attr.kind in ("money", "float") and attr.unit:
            return f"{value:g} {attr.unit}"
        if attr.kind in NUMERIC:
            return f"{value:g}" if isinstance(value, float) else str(value)
        if attr.kind in NAMED:
            return f"'{value}'"
        return str(value)

    def hint(self, text: str) -> None:
        if text not in self.evidence:
            self.evidence.append(text)

    # ------------------------------------------------------------------ sql
    @staticmethod
    def q(x) -> str:
        return quote_identifier(x.name)

    @staticmethod
    def lit(value) -> str:
        if isinstance(value, str):
            return "'" + value.replace("'", "''") + "'"
        return repr(value) if isinstance(value, float) else str(value)
