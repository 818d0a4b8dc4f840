"""Domain descriptions for the synthetic generator: what a database of a domain is about.

A domain is data, not code: one YAML file per domain in `domains/`, read into the frozen
dataclasses below and checked on load. A domain names *concepts* (entities and their
attributes) with the words people use for them; the generator turns each concept into
physical tables and columns with per-database naming noise, fills them with values, and
writes questions in the concepts' words.

File format (see `domains/hospital.yaml` for a full example):

    name: hospital
    held_out: false                        # true: never drawn for train or dev (test sets only)
    entities:
      - key: patient                       # concept id, unique in the domain
        phrases: [patient, inpatient]      # singular words for one row
        plural: [patients, inpatients]     # same order as phrases
        tables: [patients, patient, pat]   # physical table names to draw from
        rows: [80, 400]                    # row count range (scaled by the profile)
        label: full_name                   # attribute that names a row in questions
        attrs:
          - {key: full_name, kind: person_name, phrases: [name], names: [name, full_name]}
          - {key: born, kind: date, phrases: [date of birth, birthday], names: [dob, birth_date],
             range: [1930, 2015]}
        parents:                           # foreign keys of this entity
          - {entity: doctor, names: [doctor_id, physician_id], phrases: [treated by, under]}

Attribute kinds (`kind`) and the fields they use are listed in `KINDS`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import yaml

from acesql.errors import ConfigError

DOMAINS_DIR = Path(__file__).parent / "domains"

# kind -> (is numeric, needs `values`, needs `range`)
KINDS = {
    "person_name": (False, False, False),  # "Ana Silva"
    "first_name": (False, False, False),
    "last_name": (False, False, False),
    "company": (False, False, False),  # "Northwind Traders"
    "city": (False, False, False),
    "country": (False, False, False),
    "street": (False, False, False),  # "12 Oak Street"
    "email": (False, False, False),
    "phone": (False, False, False),
    "code": (False, True, False),  # "AD-4821": one of `values` as prefix, then digits
    "text": (False, False, False),  # a short phrase built from `values` words
    "choice": (False, True, False),  # one of `values` (categories, statuses, labels)
    "title": (False, True, False),  # names from two `values` words ("Blue Harbor"); "-x" glues
    "date": (False, False, True),  # 'YYYY-MM-DD', years in `range`
    "datetime": (False, False, True),  # 'YYYY-MM-DD HH:MM:SS', years in `range`
    "year": (True, False, True),
    "int": (True, False, True),
    "float": (True, False, True),
    "money": (True, False, True),  # two decimals
    "rating": (True, False, True),  # small integers, e.g. [1, 5]
    "bool": (True, False, False),  # 0 / 1
}


@dataclass(frozen=True)
class Attr:
    key: str
    kind: str
    phrases: tuple[str, ...]  # how people say it; the first is the plainest
    names: tuple[str, ...]  # physical column names to draw from
    values: tuple = ()  # choice / title / text vocabulary
    range: tuple = ()  # (lo, hi) for numbers, years for dates
    unit: str = ""  # said in evidence hints: "price is in dollars"
    codes: dict = field(default_factory=dict)  # choice value -> stored code ('active' -> 'A')
    null_rate: float = 0.03

    @property
    def numeric(self) -> bool:
        return KINDS[self.kind][0]


@dataclass(frozen=True)
class Parent:
    entity: str  # key of the referenced entity
    names: tuple[str, ...]  # physical names of the foreign-key column
    phrases: tuple[str, ...]  # relation words: "<child> <phrase> <parent>", e.g. "treated by"


@dataclass(frozen=True)
class Entity:
    key: str
    phrases: tuple[str, ...]
    plural: tuple[str, ...]
    tables: tuple[str, ...]
    rows: tuple[int, int]
    label: str
    attrs: tuple[Attr, ...]
    parents: tuple[Parent, ...] = ()

    def attr(self, key: str) -> Attr:
        for a in self.attrs:
            if a.key == key:
                return a
        raise KeyError(key)


@dataclass(frozen=True)
class Domain:
    name: str
    entities: tuple[Entity, ...]
    held_out: bool = False  # only test sets see it: no train or dev database is drawn from it

    def entity(self, key: str) -> Entity:
        for e in self.entities:
            if e.key == key:
                return e
        raise KeyError(key)


def _tuple(value) -> tuple:
    if value is None:
        return ()
    return tuple(value) if isinstance(value, (list, tuple)) else (value,)


def _attr(raw: dict, where: str) -> Attr:
    try:
        attr = Attr(
            key=raw["key"],
            kind=raw["kind"],
            phrases=_tuple(raw["phrases"]),
            names=_tuple(raw["names"]),
            values=_tuple(raw.get("values")),
            range=_tuple(raw.get("range")),
            unit=raw.get("unit", ""),
            codes=dict(raw.get("codes") or {}),
            null_rate=float(raw.get("null_rate", 0.03)),
        )
    except KeyError as exc:
        raise ConfigError(f"{where}: attribute lacks {exc}") from exc
    if attr.kind not in KINDS:
        raise ConfigError(f"{where}.{attr.key}: unknown kind {attr.kind!r}; one of {sorted(KINDS)}")
    _, needs_values, needs_range = KINDS[attr.kind]
    if needs_values and not attr.values:
        raise ConfigError(f"{where}.{attr.key}: kind {attr.kind} needs `values`")
    if needs_range and len(attr.range) != 2:
        raise ConfigError(f"{where}.{attr.key}: kind {attr.kind} needs `range: [lo, hi]`")
    if not attr.phrases or not attr.names:
        raise ConfigError(f"{where}.{attr.key}: needs at least one phrase and one name")
    if attr.codes and set(attr.codes) - set(attr.values):
        raise ConfigError(f"{where}.{attr.key}: `codes` keys must be among `values`")
    return attr


def parse_domain(raw: dict, source: str = "<dict>") -> Domain:
    """Build and check a domain from its YAML content."""
    try:
        name = raw["name"]
        entities = []
        for e in raw["entities"]:
            where = f"{source}:{e.get('key', '?')}"
            entity = Entity(
                key=e["key"],
                phrases=_tuple(e["phrases"]),
                plural=_tuple(e["plural"]),
                tables=_tuple(e["tables"]),
                rows=tuple(e["rows"]),
                label=e["label"],
                attrs=tuple(_attr(a, where) for a in e["attrs"]),
                parents=tuple(
                    Parent(p["entity"], _tuple(p["names"]), _tuple(p["phrases"]))
                    for p in e.get("parents") or ()
                ),
            )
            entities.append(entity)
    except (KeyError, TypeError) as exc:
        raise ConfigError(f"{source}: malformed domain ({exc!r})") from exc
    held_out = raw.get("held_out", False)
    if not isinstance(held_out, bool):
        raise ConfigError(f"{source}: held_out must be true or false, got {held_out!r}")
    domain = Domain(name, tuple(entities), held_out)
    _check(domain, source)
    return domain


def _check(domain: Domain, source: str) -> None:
    texts, values = [], []
    for e in domain.entities:
        texts += [*e.phrases, *e.plural, *e.tables]
        for a in e.attrs:
            texts += [*a.phrases, *a.names]
            values += list(a.values)
        for p in e.parents:
            texts += [*p.names, *p.phrases]
    odd = [t for t in texts if not isinstance(t, str)]
    odd += [v for v in values if isinstance(v, bool) or not isinstance(v, (str, int, float))]
    if odd:  # YAML reads bare on/off/yes/no as booleans: quote them
        raise ConfigError(f"{source}: words must be text, got {odd[:3]} (quote them in YAML)")
    keys = [e.key for e in domain.entities]
    if len(set(keys)) != len(keys):
        raise ConfigError(f"{source}: duplicate entity keys")
    for e in domain.entities:
        where = f"{source}:{e.key}"
        if len(e.phrases) != len(e.plural):
            raise ConfigError(f"{where}: `phrases` and `plural` must have the same length")
        attr_keys = [a.key for a in e.attrs]
        if len(set(attr_keys)) != len(attr_keys):
            raise ConfigError(f"{where}: duplicate attribute keys")
        if e.label not in attr_keys:
            raise ConfigError(f"{where}: label {e.label!r} is not one of its attributes")
        if not (0 < e.rows[0] <= e.rows[1]):
            raise ConfigError(f"{where}: rows must be [lo, hi] with 0 < lo <= hi")
        for p in e.parents:
            if p.entity not in keys:
                raise ConfigError(f"{where}: parent {p.entity!r} is not an entity of the domain")
            if not p.names or not p.phrases:
                raise ConfigError(f"{where}: parent {p.entity!r} needs names and phrases")


@cache
def load_domains(directory: str | None = None) -> dict[str, Domain]:
    """All domains of a directory (default: the built-in ones), by name."""
    folder = Path(directory) if directory else DOMAINS_DIR
    domains = {}
    for path in sorted(folder.glob("*.yaml")):
        try:
            raw = yaml.safe_load(path.read_text())
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
        domain = parse_domain(raw, path.name)
        domains[domain.name] = domain
    if not domains:
        raise ConfigError(f"no domain files (*.yaml) in {folder}")
    return domains
