"""Build one synthetic SQLite database of a domain, and keep what questions need to know.

A database draws a connected set of the domain's entities, names them with its own naming
noise, gives each table a random subset of the entity's attributes plus distractor columns
(near-synonym timestamps, bookkeeping fields), sometimes a stale archive copy of a table,
fills the rows (foreign keys skewed so some parents have many children), and writes the file.
The returned `SynthDatabase` remembers, for every column, which concept it stands for and
the values it holds, so question shapes can pick real filter values.
"""

from __future__ import annotations

import random
import sqlite3
from dataclasses import dataclass, field, replace
from pathlib import Path

from acesql.data.synth.domain import Attr, Domain, Entity
from acesql.data.synth.naming import Namer
from acesql.data.synth.values import ValueMaker, zipf_weights
from acesql.sql.schema import quote_identifier


@dataclass(frozen=True)
class Profile:
    """Sizes of one generation profile."""

    tables: tuple[int, int]  # tables per database
    columns: tuple[int, int]  # columns per table (keys included)
    row_scale: float  # multiplies each entity's row range
    distractors: tuple[int, int]  # distractor columns per table
    naming_noise: float  # share of names that stray from the database's style
    archive_rate: float  # chance of a stale archive copy of one table
    # BIRD's widest tables repeat a measure per year or slot (`Enrollment (K-12)` ..., 115
    # columns in european_football_2's Match): the chance that a table keeps such yearly
    # figures, and how many years they span (0: never, and no random draw spent on it)
    yearly_rate: float = 0.0
    years: tuple[int, int] = (0, 0)


PROFILES = {
    "tiny": Profile((3, 5), (4, 8), 0.15, (0, 1), 0.2, 0.0),
    "default": Profile((6, 12), (5, 15), 0.5, (1, 3), 0.35, 0.5),
    "large": Profile((6, 12), (5, 15), 1.0, (1, 4), 0.35, 0.5),
    # BIRD dev's shape: 3-13 tables (median 7), 11-199 columns (median 64) a database
    "wide": Profile((4, 12), (4, 12), 0.3, (0, 3), 0.45, 0.6, yearly_rate=0.4, years=(4, 16)),
}
# attribute kinds a yearly series repeats (a year of a year, or a name per year, means nothing)
YEARLY_KINDS = ("int", "float", "money", "rating")
LAST_YEARS = (2021, 2024)  # the range the last year of a series is drawn from

# generic columns real tables carry and questions never need: the near-synonyms of the
# domain's own dates and statuses are what makes them hard to tell apart
DISTRACTORS = (
    Attr(
        "created_at",
        "datetime",
        ("x",),
        ("created_at", "CreatedAt", "creation_ts"),
        range=(2015, 2024),
    ),
    Attr(
        "creation_date",
        "date",
        ("x",),
        ("creation_date", "create_dt", "date_created"),
        range=(2015, 2024),
    ),
    Attr("reg_ts", "datetime", ("x",), ("reg_ts", "registered_ts", "entry_ts"), range=(2015, 2024)),
    Attr(
        "updated_at",
        "datetime",
        ("x",),
        ("updated_at", "last_modified", "mod_dt"),
        range=(2019, 2024),
    ),
    Attr(
        "etl_date", "date", ("x",), ("etl_load_dt", "load_date", "ingested_on"), range=(2023, 2024)
    ),
    Attr(
        "record_status",
        "choice",
        ("x",),
        ("record_status", "rec_stat", "row_state"),
        values=("active", "archived", "pending"),
    ),
    Attr("is_deleted", "bool", ("x",), ("is_deleted", "del_flag", "deleted")),
    Attr(
        "notes",
        "text",
        ("x",),
        ("notes", "remarks", "comment"),
        values=("check", "follow", "up", "ok", "late", "see", "file", "updated"),
    ),
    Attr("legacy_id", "int", ("x",), ("legacy_id", "old_ref", "src_key"), range=(100000, 999999)),
    Attr(
        "source_system",
        "choice",
        ("x",),
        ("source_system", "src_sys", "origin"),
        values=("crm", "erp", "import", "manual"),
    ),
    Attr("sort_order", "int", ("x",), ("sort_order", "seq", "display_order"), range=(1, 50)),
    Attr("status", "choice", ("x",), ("status", "state", "flag_cd"), values=("A", "I", "P")),
    Attr(
        "name",
        "text",
        ("x",),
        ("name", "label", "descr"),
        values=("misc", "general", "other", "default"),
    ),
)

SQL_TYPES = {
    "int": "INTEGER",
    "year": "INTEGER",
    "rating": "INTEGER",
    "bool": "INTEGER",
    "float": "REAL",
    "money": "REAL",
    "date": "DATE",
    "datetime": "DATETIME",
}


@dataclass
class SynthColumn:
    name: str
    role: str  # "pk", "fk", "attr" or "distractor"
    attr: Attr | None = None  # the concept of an attribute column
    parent: str | None = None  # table a foreign key points to
    parent_key: str | None = None  # the primary-key column it references
    relation: tuple[str, ...] = ()  # words for a foreign key: "treated by"
    cryptic: bool = False
    sql_type: str = "TEXT"
    values: list = field(default_factory=list, repr=False)

    @property
    def kind(self) -> str:
        return self.attr.kind if self.attr else ("int" if self.role in ("pk", "fk") else "text")

    def present(self) -> list:
        return [v for v in self.values if v is not None]


@dataclass
class SynthTable:
    name: str
    entity: Entity | None  # None for an archive copy
    columns: list[SynthColumn]

    @property
    def n_rows(self) -> int:
        return len(self.columns[0].values)

    @property
    def pk(self) -> SynthColumn:
        return next(c for c in self.columns if c.role == "pk")

    @property
    def label(self) -> SynthColumn:
        key = self.entity.label
        return next(c for c in self.columns if c.attr and c.attr.key == key)

    @property
    def attrs(self) -> list[SynthColumn]:
        return [c for c in self.columns if c.role == "attr"]

    @property
    def fks(self) -> list[SynthColumn]:
        return [c for c in self.columns if c.role == "fk"]


@dataclass
class SynthDatabase:
    db_id: str
    domain: Domain
    tables: list[SynthTable]
    path: Path | None = None

    @property
    def entity_tables(self) -> list[SynthTable]:
        return [t for t in self.tables if t.entity is not None]

    def table(self, name: str) -> SynthTable:
        return next(t for t in self.tables if t.name == name)


def build_database(
    domain: Domain, db_id: str, rng: random.Random, profile: Profile
) -> SynthDatabase:
    """Choose, name and fill the tables of one database (in memory); see `write_database`."""
    entities = _choose_entities(domain, rng, profile)
    namer = Namer(rng, profile.naming_noise)
    names = {e.key: namer.table(e.tables) for e in entities}
    referenced = {p.entity for e in domain.entities for p in e.parents}
    tables = []
    for entity in _parents_first(entities):
        yearly = entity.key in referenced
        tables.append(_make_table(entity, names, rng, profile, namer, yearly))
    by_name = {t.name: t for t in tables}
    for table in tables:
        _fill(table, by_name, rng, profile)
    if rng.random() < profile.archive_rate:
        tables.append(_archive_copy(rng.choice(tables), rng, namer))
    order = {e.key: i for i, e in enumerate(entities)}
    tables.sort(key=lambda t: order.get(t.entity.key, len(order)) if t.entity else len(order))
    return SynthDatabase(db_id, domain, tables)


def write_database(db: SynthDatabase, path: Path) -> Path:
    """Write the tables, keys and rows to a new SQLite file at `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    conn = sqlite3.connect(path)
    try:
        for table in db.tables:
            conn.execute(_ddl(table))
            marks = ", ".join("?" for _ in table.columns)
            rows = zip(*(c.values for c in table.columns))
            conn.executemany(f"INSERT INTO {quote_identifier(table.name)} VALUES ({marks})", rows)
        conn.commit()
    finally:
        conn.close()
    db.path = path
    return path


# ------------------------------------------------------------------ choosing
def _choose_entities(domain: Domain, rng: random.Random, profile: Profile) -> list[Entity]:
    """A connected random subset of the domain's entities, of a size from the profile."""
    lo, hi = profile.tables
    target = min(rng.randint(lo, hi), len(domain.entities))
    neighbours = {e.key: set() for e in domain.entities}
    for e in domain.entities:
        for p in e.parents:
            neighbours[e.key].add(p.entity)
            neighbours[p.entity].add(e.key)
    chosen = [rng.choice(domain.entities).key]
    while len(chosen) < target:
        frontier = sorted({n for k in chosen for n in neighbours[k]} - set(chosen))
        if not frontier:
            break
        chosen.append(rng.choice(frontier))
    keep = set(chosen)
    return [e for e in domain.entities if e.key in keep]


def _parents_first(entities: list[Entity]) -> list[Entity]:
    keys = {e.key for e in entities}
    done: list[Entity] = []
    pending = list(entities)
    while pending:
        ready = [
            e
            for e in pending
            if all(
                p.entity not in keys or p.entity in {d.key for d in done} or p.entity == e.key
                for p in e.parents
            )
        ]
        if not ready:  # a cycle: break it where it started
            ready = [pending[0]]
        for e in ready:
            done.append(e)
            pending.remove(e)
    return done


def _make_table(
    entity: Entity, names: dict, rng, profile: Profile, namer: Namer, yearly: bool
) -> SynthTable:
    """One entity's table; `yearly`: it may keep yearly figures (an entity others refer to: a
    hotel has a revenue per year, one booking has not)."""
    table_name = names[entity.key]
    used: set[str] = set()
    pk_name = namer.primary_key(entity.key)
    used.add(pk_name.lower())
    columns = [SynthColumn(pk_name, "pk", sql_type="INTEGER")]
    for parent in entity.parents:
        if parent.entity in names:
            name, _ = namer.column(parent.names, table_name, used)
            columns.append(
                SynthColumn(
                    name,
                    "fk",
                    parent=names[parent.entity],
                    parent_key=namer.primary_key(parent.entity),
                    relation=parent.phrases,
                    sql_type="INTEGER",
                )
            )
    label = entity.attr(entity.label)
    others = [a for a in entity.attrs if a.key != entity.label]
    lo, hi = profile.columns
    room = max(1, rng.randint(lo, hi) - len(columns) - 1)
    picked = [label] + rng.sample(others, min(room, len(others)))
    picked.sort(key=entity.attrs.index)
    body = []
    for attr in picked:
        name, is_cryptic = namer.column(
            attr.names, table_name, used, allow_cryptic=attr is not label
        )
        body.append(
            SynthColumn(name, "attr", attr, cryptic=is_cryptic, sql_type=_sql_type(attr, rng))
        )
    n_distractors = min(rng.randint(*profile.distractors), max(0, hi - len(columns) - len(body)))
    for attr in rng.sample(DISTRACTORS, n_distractors):
        options = tuple(n for n in attr.names if n.lower() not in used)
        if not options:
            continue
        name, _ = namer.column(options, table_name, used)
        body.insert(
            rng.randint(0, len(body)),
            SynthColumn(name, "distractor", attr, sql_type=_sql_type(attr, rng)),
        )
    if yearly and profile.yearly_rate and rng.random() < profile.yearly_rate:
        body = _with_yearly_figures(body, rng, profile.years, used)
    return SynthTable(table_name, entity, columns + body)


def _with_yearly_figures(body: list[SynthColumn], rng, years, used: set[str]) -> list[SynthColumn]:
    """`body` with, after each plainly named numeric attribute, one column per year of a span:
    `points` is followed by `points_2020` ... `points_2023`, said "loyalty points in 2021".

    The copies are attributes of their own (questions may ask for one year), with names only
    a year apart: what makes BIRD's wide tables hard to link.
    """
    last = rng.randint(*LAST_YEARS)
    span = range(last - rng.randint(*years) + 1, last + 1)
    out = []
    for col in body:
        out.append(col)
        if col.role != "attr" or col.cryptic or col.attr.kind not in YEARLY_KINDS:
            continue
        glue = "" if any(ch.isupper() for ch in col.name) else "_"  # PointsBal2021, pts_2021
        for year in span:
            name = f"{col.name}{glue}{year}"
            if name.lower() in used:
                continue
            used.add(name.lower())
            attr = replace(
                col.attr,
                key=f"{col.attr.key}_{year}",
                phrases=tuple(f"{phrase} in {year}" for phrase in col.attr.phrases),
                names=(name,),
            )
            out.append(SynthColumn(name, "attr", attr, sql_type=col.sql_type))
    return out


def _sql_type(attr: Attr, rng) -> str:
    if attr.kind in SQL_TYPES:
        t = SQL_TYPES[attr.kind]
        if t in ("DATE", "DATETIME") and rng.random() < 0.4:
            return "TEXT"
        return t
    return rng.choice(["TEXT", "TEXT", "VARCHAR(64)"]) if attr.kind != "text" else "TEXT"


# ------------------------------------------------------------------- filling
def _fill(table: SynthTable, by_name: dict, rng: random.Random, profile: Profile) -> None:
    entity = table.entity
    lo, hi = entity.rows
    n = max(3, round(rng.randint(lo, hi) * profile.row_scale))
    label = entity.attr(entity.label)
    if label.kind == "choice":  # a label names one row: no repeats
        n = min(n, len(label.values))
    table.pk.values = list(range(1, n + 1))
    for col in table.columns:
        if col.role == "fk":
            parent_ids = list(by_name[col.parent].pk.values) if col.parent in by_name else [None]
            rng.shuffle(parent_ids)  # which parents are popular differs per database
            weights = zipf_weights(len(parent_ids), 0.8)
            col.values = [
                None if rng.random() < 0.02 else rng.choices(parent_ids, weights)[0]
                for _ in range(n)
            ]
        elif col.role in ("attr", "distractor"):
            if col.attr is label and label.kind == "choice":
                col.values = rng.sample(list(label.values), n)
                continue
            maker = ValueMaker(col.attr if col.attr is not label else _not_null(label), rng)
            col.values = [maker.make() for _ in range(n)]


def _not_null(attr: Attr) -> Attr:
    return replace(attr, null_rate=0.0)


def _archive_copy(source: SynthTable, rng: random.Random, namer: Namer) -> SynthTable:
    """A stale copy of a table: same columns, a few old rows, no keys. It looks relevant."""
    suffix = rng.choice(["{}_archive", "old_{}", "{}_bak", "{}_2019", "tmp_{}"])
    name = suffix.format(source.name)
    namer.used_tables.add(name.lower())
    n = rng.randint(5, 25)
    columns = []
    for col in source.columns:
        present = col.present() or [None]
        columns.append(
            SynthColumn(
                col.name,
                "distractor",
                col.attr,
                sql_type=col.sql_type,
                values=[rng.choice(present) for _ in range(n)],
            )
        )
    return SynthTable(name, None, columns)


def _ddl(table: SynthTable) -> str:
    lines = []
    for col in table.columns:
        line = f"{quote_identifier(col.name)} {col.sql_type}"
        if col.role == "pk" and table.entity is not None:
            line += " PRIMARY KEY"
        lines.append(line)
    if table.entity is not None:
        for col in table.fks:
            lines.append(
                f"FOREIGN KEY ({quote_identifier(col.name)}) REFERENCES "
                f"{quote_identifier(col.parent)}({quote_identifier(col.parent_key)})"
            )
    return f"CREATE TABLE {quote_identifier(table.name)} (\n  " + ",\n  ".join(lines) + "\n)"
