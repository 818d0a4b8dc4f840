"""Naming noise: each synthetic database spells its tables and columns its own way.

A database draws a style for tables and one for columns (snake_case, CamelCase,
abbreviations, a table prefix) and some columns stray from it, as in schemas that many
people wrote over years. A few columns get cryptic codes; questions about those need an
evidence hint.
"""

from __future__ import annotations

import random
import re

STYLES = ("as_is", "snake", "camel", "abbrev", "prefixed")

ABBREVIATIONS = {
    "number": "no",
    "amount": "amt",
    "date": "dt",
    "quantity": "qty",
    "description": "desc",
    "customer": "cust",
    "department": "dept",
    "address": "addr",
    "category": "cat",
    "price": "prc",
    "total": "tot",
    "count": "cnt",
    "code": "cd",
    "status": "stat",
    "name": "nm",
    "year": "yr",
    "time": "tm",
    "employee": "emp",
    "phone": "ph",
    "value": "val",
    "type": "typ",
    "reference": "ref",
    "registration": "reg",
    "account": "acct",
    "balance": "bal",
    "transaction": "txn",
    "product": "prod",
    "order": "ord",
    "level": "lvl",
    "capacity": "cap",
    "rating": "rtg",
    "duration": "dur",
    "percentage": "pct",
    "salary": "sal",
    "weight": "wt",
    "height": "ht",
    "length": "len",
    "distance": "dist",
    "payment": "pmt",
    "invoice": "inv",
    "manager": "mgr",
    "location": "loc",
    "country": "ctry",
    "season": "ssn",
}


def words(name: str) -> list[str]:
    """Split a snake_case, CamelCase or mixed name into lower-case words.

    >>> words("PatientID"), words("adm_dt"), words("HTTPCode2")
    (['patient', 'id'], ['adm', 'dt'], ['http', 'code2'])
    """
    parts = re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+[0-9]*|[0-9]+", name)
    return [p.lower() for p in parts] or [name.lower()]


def styled(name: str, style: str, prefix: str = "") -> str:
    """Spell `name` in `style`.

    >>> styled("birth_date", "camel"), styled("BirthDate", "snake"), styled("birth_date", "abbrev")
    ('BirthDate', 'birth_date', 'birth_dt')
    """
    w = words(name)
    if style == "snake":
        return "_".join(w)
    if style == "camel":
        return "".join(x.capitalize() for x in w)
    if style == "abbrev":
        return "_".join(ABBREVIATIONS.get(x, x) for x in w)
    if style == "prefixed":
        return f"{prefix}_{'_'.join(w)}" if prefix else "_".join(w)
    return name


def cryptic(rng: random.Random, table_name: str) -> str:
    """A name nobody could guess: 'fld_07', 'pt_c3', 'x12'."""
    stem = words(table_name)[0][:2]
    return rng.choice(
        [
            f"fld_{rng.randint(1, 40):02d}",
            f"{stem}_c{rng.randint(1, 9)}",
            f"x{rng.randint(10, 99)}",
            f"attr{rng.randint(1, 20)}",
        ]
    )


class Namer:
    """Names for one database: a table style, a column style, and unique names per scope."""

    def __init__(self, rng: random.Random, profile_noise: float):
        self.rng = rng
        self.noise = profile_noise
        self.table_style = rng.choice(STYLES)
        self.column_style = rng.choice(STYLES)
        self.table_prefix = rng.choice(["tbl", "t", "dim", "app", ""])
        self.pk_style = rng.choice(["id", "entity_id", "EntityID", "entity_no"])
        self.used_tables: set[str] = set()

    def table(self, options: tuple[str, ...]) -> str:
        base = self.rng.choice(options)
        style = self.table_style if self.rng.random() > self.noise else self.rng.choice(STYLES)
        name = styled(base, style, self.table_prefix)
        while name.lower() in self.used_tables:
            name = f"{name}_{self.rng.randint(2, 9)}"
        self.used_tables.add(name.lower())
        return name

    def primary_key(self, entity_key: str) -> str:
        style = self.pk_style
        if style == "id":
            return "id"
        if style == "EntityID":
            return styled(entity_key, "camel") + "ID"
        if style == "entity_no":
            return styled(f"{entity_key}_number", "abbrev")
        return f"{entity_key}_id"

    def column(
        self, options: tuple[str, ...], table_name: str, used: set[str], allow_cryptic=False
    ) -> tuple[str, bool]:
        """A column name from `options`, unique in `used`; True when it came out cryptic."""
        rng = self.rng
        is_cryptic = allow_cryptic and rng.random() < self.noise * 0.25
        if is_cryptic:
            name = cryptic(rng, table_name)
        else:
            style = self.column_style if rng.random() > self.noise else rng.choice(STYLES)
            prefix = words(table_name)[0][:3]
            name = styled(rng.choice(options), style, prefix)
        while name.lower() in used:
            name = f"{name}{rng.randint(2, 9)}"
        used.add(name.lower())
        return name, is_cryptic
