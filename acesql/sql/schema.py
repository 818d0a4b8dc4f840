"""Database schemas: introspection, loading from Spider/BIRD table files, prompt rendering.

A `Schema` keeps the database's original table and column names. Everything else in the
project refers to columns by their canonical id, `table.column` lower-cased, and maps back
to the real identifiers through the schema (`Schema.column(cid)`), so quoted names, spaces
and mixed case all work.

    schema = Schema.from_sqlite("db.sqlite")
    print(schema.render())                                  # whole schema, for the retriever
    print(schema.render({"singer.name", "singer.age"}))     # pruned, for the generator
"""

from __future__ import annotations

import functools
import json
import re
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from acesql.errors import DataError
from acesql.sql.sandbox import decode_text, open_readonly

SAMPLE_SCAN_ROWS = 1000  # rows looked at per column when picking sample values
SAMPLE_CHARS = 40  # longest sample value shown in a prompt

_PLAIN_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def canonical_id(table: str, column: str) -> str:
    """The canonical id of a column: `table.column`, lower-cased; a name holding a dot is
    double-quoted, so that `"t.a".b` and `t."a.b"` stay two columns.

    >>> canonical_id("Singer", "Song Name"), canonical_id("t", "a.b")
    ('singer.song name', 't."a.b"')
    """
    return f"{_dotted_part(table.lower())}.{_dotted_part(column.lower())}"


def _dotted_part(name: str) -> str:
    return '"' + name.replace('"', '""') + '"' if "." in name else name


def quote_identifier(name: str) -> str:
    """Quote an identifier for SQLite unless it is a plain word that SQLite reads as a name
    (a keyword such as `select`, or `current_date`, which reads as the clock, is quoted).

    >>> quote_identifier("name"), quote_identifier("First Name"), quote_identifier("select")
    ('name', '"First Name"', '"select"')
    """
    if _PLAIN_IDENTIFIER.match(name) and _reads_as_a_name(name):
        return name
    return '"' + name.replace('"', '""') + '"'


@functools.lru_cache(maxsize=4096)
def _reads_as_a_name(word: str) -> bool:
    """Whether SQLite reads the bare `word` in a query as the column of that name: not for
    its keywords (a syntax error) nor for `current_date` and the like (the clock)."""
    conn = sqlite3.connect(":memory:")
    try:
        quoted = '"' + word + '"'
        conn.execute(f"CREATE TABLE probe ({quoted})")
        conn.execute("INSERT INTO probe VALUES ('the column')")
        return conn.execute(f"SELECT {word} FROM probe").fetchall() == [("the column",)]
    except sqlite3.Error:
        return False
    finally:
        conn.close()


@dataclass(frozen=True)
class Column:
    table: str
    name: str
    type: str = ""
    primary_key: bool = False
    samples: tuple = ()

    @property
    def id(self) -> str:
        return canonical_id(self.table, self.name)


@dataclass(frozen=True)
class ForeignKey:
    column: str  # canonical id of the referencing column
    references: str  # canonical id of the referenced column


@dataclass(frozen=True)
class Table:
    name: str
    columns: tuple[Column, ...]

    @property
    def primary_key(self) -> tuple[Column, ...]:
        return tuple(c for c in self.columns if c.primary_key)


@dataclass(frozen=True)
class Schema:
    db_id: str
    tables: tuple[Table, ...]
    foreign_keys: tuple[ForeignKey, ...] = ()
    _columns: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self):
        columns = {}
        for table in self.tables:
            for column in table.columns:
                if column.id in columns:
                    raise DataError(f"{self.db_id}: column {column.id!r} is defined twice")
                columns[column.id] = column
        self._columns.update(columns)

    # ----------------------------------------------------------------- lookups
    @property
    def column_ids(self) -> tuple[str, ...]:
        """All canonical column ids, in database order."""
        return tuple(self._columns)

    def column(self, cid: str) -> Column:
        """The column with canonical id `cid` (KeyError when absent)."""
        return self._columns[cid.lower()]

    def table(self, name: str) -> Table:
        """The table called `name`, in any case (KeyError when absent)."""
        table = self._find_table(name)
        if table is None:
            raise KeyError(name)
        return table

    def _find_table(self, name: str) -> Table | None:
        return next((t for t in self.tables if t.name.lower() == name.lower()), None)

    def resolve(self, text: str) -> str | None:
        """Map a column written by a person or a model to its canonical id, or None.

        Accepts `table.column` with any quoting (`"t"."c"`, `` `t`.`c` ``, `[t].[c]`) and case,
        and a bare column name when exactly one table has it. A `table.column` naming a real
        table that lacks the column stands for the column when exactly one table has it: small
        models put a real column under the wrong table (`Student.PetType` for `Pets.PetType`),
        and dropping it left lists empty. An unknown table, or an unknown or ambiguous column,
        stays unknown.
        """
        parts = [_unquote(p) for p in _split_dotted(text.strip())]
        parts = [p for p in parts if p]
        if not parts:
            return None
        # more dots than any column id has: it names none, and trying every cut of a text of
        # thousands of dots (a degenerate model output) would take quadratic time
        if len(parts) - 1 > max((cid.count(".") for cid in self._columns), default=0):
            return None
        for cut in range(1, len(parts)):
            cid = canonical_id(".".join(parts[:cut]), ".".join(parts[cut:]))
            if cid in self._columns:
                return cid
        bare = ".".join(parts).lower()
        if bare in self._columns:
            return bare
        owners = self._owners(bare)
        if not owners and len(parts) > 1 and self._find_table(".".join(parts[:-1])) is not None:
            owners = self._owners(parts[-1].lower())
        return owners[0] if len(owners) == 1 else None

    def _owners(self, name: str) -> list[str]:
        """The ids of the columns called `name` (lower case), in every table."""
        return [cid for cid, col in self._columns.items() if col.name.lower() == name]

    def sqlglot_mapping(self) -> dict[str, dict[str, str]]:
        """`{table: {column: type}}` with lower-cased names, the form sqlglot's optimizer takes."""
        return {
            t.name.lower(): {c.name.lower(): (c.type or "TEXT") for c in t.columns}
            for t in self.tables
        }

    # --------------------------------------------------------------- rendering
    def render(self, columns: Iterable[str] | None = None, samples: bool = True) -> str:
        """The schema as CREATE TABLE text for a prompt, whole or pruned to `columns`.

        Deterministic: tables and columns keep database order whatever order `columns` has.
        A pruned table keeps only the selected columns; key lines need both ends kept.
        """
        keep = None if columns is None else {c.lower() for c in columns}
        blocks = []
        for table in self.tables:
            cols = [c for c in table.columns if keep is None or c.id in keep]
            if not cols:
                continue
            blocks.append(self._render_table(table, cols, keep, samples))
        return "\n\n".join(blocks)

    def _render_table(self, table, cols, keep, samples) -> str:
        pk = table.primary_key
        single_pk = len(pk) == 1
        lines = []
        for col in cols:
            line = f"  {quote_identifier(col.name)}"
            if col.type:
                line += f" {col.type}"
            if col.primary_key and single_pk:
                line += " PRIMARY KEY"
            lines.append([line, _samples_comment(col) if samples else ""])
        if len(pk) > 1 and all(keep is None or c.id in keep for c in pk):
            names = ", ".join(quote_identifier(c.name) for c in pk)
            lines.append([f"  PRIMARY KEY ({names})", ""])
        own = {c.id for c in cols}
        for fk in self.foreign_keys:
            if fk.column in own and (keep is None or fk.references in keep):
                src, dst = self.column(fk.column), self.column(fk.references)
                lines.append(
                    [
                        f"  FOREIGN KEY ({quote_identifier(src.name)}) REFERENCES "
                        f"{quote_identifier(dst.table)}({quote_identifier(dst.name)})",
                        "",
                    ]
                )
        body = []
        for i, (line, comment) in enumerate(lines):
            sep = "," if i < len(lines) - 1 else ""
            body.append(f"{line}{sep}{'  -- ' + comment if comment else ''}")
        return f"CREATE TABLE {quote_identifier(table.name)} (\n" + "\n".join(body) + "\n);"

    # ---------------------------------------------------------- serialization
    def to_dict(self) -> dict:
        return {
            "db_id": self.db_id,
            "tables": [
                {
                    "name": t.name,
                    "columns": [
                        {
                            "name": c.name,
                            "type": c.type,
                            "primary_key": c.primary_key,
                            "samples": list(c.samples),
                        }
                        for c in t.columns
                    ],
                }
                for t in self.tables
            ],
            "foreign_keys": [[fk.column, fk.references] for fk in self.foreign_keys],
        }

    @classmethod
    def from_dict(cls, data: dict) -> Schema:
        tables = tuple(
            Table(
                t["name"],
                tuple(
                    Column(t["name"], c["name"], c["type"], c["primary_key"], tuple(c["samples"]))
                    for c in t["columns"]
                ),
            )
            for t in data["tables"]
        )
        fks = tuple(ForeignKey(a, b) for a, b in data["foreign_keys"])
        return cls(data["db_id"], tables, fks)

    def to_tables_json(self) -> dict:
        """This schema as a Spider `tables.json` entry (original names kept)."""
        columns, types, primary_keys, index = [[-1, "*"]], ["text"], [], {}
        for t_idx, table in enumerate(self.tables):
            for col in table.columns:
                index[col.id] = len(columns)
                if col.primary_key:
                    primary_keys.append(len(columns))
                columns.append([t_idx, col.name])
                types.append(col.type.lower() or "text")  # declared types, as BIRD keeps them
        return {
            "db_id": self.db_id,
            "table_names_original": [t.name for t in self.tables],
            "table_names": [" ".join(t.name.lower().split("_")) for t in self.tables],
            "column_names_original": columns,
            "column_names": [[t, " ".join(n.lower().split("_"))] for t, n in columns],
            "column_types": types,
            "primary_keys": primary_keys,
            "foreign_keys": [[index[f.column], index[f.references]] for f in self.foreign_keys],
        }

    # ------------------------------------------------------------ construction
    @classmethod
    def from_sqlite(cls, path: str | Path, db_id: str | None = None, n_samples: int = 3) -> Schema:
        """Introspect a SQLite file: tables, declared types, keys and sample values."""

        path = Path(path)
        if not path.is_file():
            raise DataError(f"database not found: {path}")
        conn = open_readonly(path)
        conn.text_factory = decode_text
        try:
            names = [
                r[0]
                for r in conn.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table' "
                    "AND name NOT LIKE 'sqlite_%' ORDER BY rowid"
                )
            ]
            tables, fks = [], []
            for name in names:
                # table_xinfo: table_info leaves generated columns out (hidden 2 and 3);
                # hidden 1 is a virtual table's hidden column, which is no column to query
                info = conn.execute(f"PRAGMA table_xinfo({_sql_quote(name)})").fetchall()
                columns = tuple(
                    Column(
                        name,
                        col_name,
                        (col_type or "").upper(),
                        pk > 0,
                        _sample_values(conn, name, col_name, n_samples),
                    )
                    for _, col_name, col_type, _, _, pk, hidden in info
                    if hidden != 1
                )
                tables.append(Table(name, columns))
                for row in conn.execute(f"PRAGMA foreign_key_list({_sql_quote(name)})"):
                    target, src, dst = row[2], row[3], row[4]
                    fks.append((name, src, target, dst))
        except sqlite3.DatabaseError as exc:
            raise DataError(f"cannot read database {path}: {exc}") from exc
        finally:
            conn.close()
        schema_tables = tuple(tables)
        return cls(db_id or path.stem, schema_tables, _resolve_fks(schema_tables, fks))

    @classmethod
    def from_tables_json(cls, entry: dict, db_path: str | Path | None = None, n_samples: int = 3):
        """Build a schema from one Spider `tables.json` / BIRD `dev_tables.json` entry.

        Original names are used. With `db_path`, sample values are read from the database.
        """
        try:
            table_names = entry["table_names_original"]
            col_names = entry["column_names_original"]
            col_types = entry["column_types"]
        except KeyError as exc:
            raise DataError(f"tables entry {entry.get('db_id')!r} lacks {exc}") from exc
        pk_indices = set()
        for pk in entry.get("primary_keys", []):
            pk_indices.update(pk if isinstance(pk, list) else [pk])
        conn = None
        if db_path is not None and Path(db_path).is_file():
            conn = open_readonly(db_path)
            conn.text_factory = decode_text
        try:
            per_table: list[list[Column]] = [[] for _ in table_names]
            for idx, ((t_idx, name), ctype) in enumerate(zip(col_names, col_types)):
                if t_idx < 0:
                    continue  # the "*" pseudo-column
                table = table_names[t_idx]
                samples = _sample_values(conn, table, name, n_samples) if conn else ()
                per_table[t_idx].append(
                    Column(table, name, str(ctype).upper(), idx in pk_indices, samples)
                )
        finally:
            if conn is not None:
                conn.close()
        tables = tuple(Table(n, tuple(cols)) for n, cols in zip(table_names, per_table))
        fks = []
        for a, b in entry.get("foreign_keys", []):
            (ta, ca), (tb, cb) = col_names[a], col_names[b]
            fks.append(
                ForeignKey(canonical_id(table_names[ta], ca), canonical_id(table_names[tb], cb))
            )
        return cls(entry["db_id"], tables, tuple(dict.fromkeys(fks)))


def load_tables_json(path: str | Path) -> dict[str, dict]:
    """Read a Spider/BIRD tables file into `{db_id: entry}`; DataError, naming the file and the
    entry, when it is not a list of objects with a string `db_id`."""
    path = Path(path)
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise DataError(f"tables file not found: {path}") from exc
    except UnicodeDecodeError as exc:
        raise DataError(f"{path} is not UTF-8 (byte {exc.start}: {exc.reason})") from exc
    except json.JSONDecodeError as exc:
        raise DataError(f"tables file {path} is not valid JSON: {exc}") from exc
    if not isinstance(entries, list):
        raise DataError(f"{path} must hold a JSON list of databases, one object each")
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise DataError(f"{path}: entry #{i} is not a JSON object (got {type(entry).__name__})")
        if not isinstance(entry.get("db_id"), str):
            problem = "has no db_id" if "db_id" not in entry else "has a db_id that is no string"
            raise DataError(f"{path}: entry #{i} {problem}")
    return {e["db_id"]: e for e in entries}


# ------------------------------------------------------------------- helpers
def _sql_quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _sample_values(conn, table: str, column: str, n: int) -> tuple:
    if n <= 0:
        return ()
    sql = (
        f"SELECT DISTINCT v FROM (SELECT {_sql_quote(column)} AS v FROM {_sql_quote(table)} "
        f"LIMIT {SAMPLE_SCAN_ROWS}) WHERE v IS NOT NULL LIMIT {int(n)}"
    )
    try:
        rows = conn.execute(sql).fetchall()
    except sqlite3.DatabaseError:
        return ()
    return tuple(_display_value(r[0]) for r in rows)


def _display_value(value):
    if isinstance(value, bytes):
        return "<blob>"
    if isinstance(value, str) and len(value) > SAMPLE_CHARS:
        return value[: SAMPLE_CHARS - 3] + "..."
    return value


def _samples_comment(col: Column) -> str:
    if not col.samples:
        return ""
    shown = ", ".join(repr(v) if isinstance(v, str) else str(v) for v in col.samples)
    return f"examples: {shown}"


def _resolve_fks(tables: tuple[Table, ...], raw: list[tuple]) -> tuple[ForeignKey, ...]:
    by_name = {t.name.lower(): t for t in tables}
    fks = []
    for table, src, target, dst in raw:
        target_table = by_name.get(str(target).lower())
        if target_table is None:
            continue  # dangling foreign key in the file: ignore
        if dst is None:  # "REFERENCES t" without a column means t's primary key
            pk = target_table.primary_key
            if len(pk) != 1:
                continue
            dst = pk[0].name
        source_table = by_name[str(table).lower()]
        if not (_has_column(source_table, src) and _has_column(target_table, dst)):
            continue  # names a column its table does not have (some Spider files do): ignore
        fks.append(ForeignKey(canonical_id(table, src), canonical_id(target_table.name, dst)))
    return tuple(dict.fromkeys(fks))


def _has_column(table: Table, name) -> bool:
    return str(name).lower() in {c.name.lower() for c in table.columns}


_QUOTES = {'"': '"', "`": "`", "[": "]", "'": "'"}


def _split_dotted(text: str) -> list[str]:
    """Split `a.b` on dots that are outside quotes."""
    parts, buf, closing = [], [], None
    for ch in text:
        if closing:
            buf.append(ch)
            if ch == closing:
                closing = None
        elif ch in _QUOTES:
            closing = _QUOTES[ch]
            buf.append(ch)
        elif ch == ".":
            parts.append("".join(buf))
            buf = []
        else:
            buf.append(ch)
    parts.append("".join(buf))
    return parts


def _unquote(part: str) -> str:
    part = part.strip()
    if len(part) >= 2 and part[0] in _QUOTES and part[-1] == _QUOTES[part[0]]:
        part = part[1:-1]
    return part.strip()
