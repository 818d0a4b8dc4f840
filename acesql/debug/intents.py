"""Data-management and personalization intents drawn from a database, each with a working
solution and a realistic broken version.

An intent rule reads the schema and the data (through a read-only sandboxed connection) and
returns a `Draft`, or None when the database offers nothing it fits. Rules are keyed by name
in `MANAGEMENT` and `PERSONALIZATION`; whether the broken statements really misbehave is
decided by running them (`acesql.debug.build`).
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass, field

from acesql.sql.schema import Schema
from acesql.sql.schema import quote_identifier as q

_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}")


@dataclass
class Draft:
    category: str
    bug: str
    intent: str
    solution_sql: list[str]
    issue_sql: list[str]
    preprocess_sql: list[str] = field(default_factory=list)
    checks: list[str] = field(default_factory=list)


def delete_missing_where(schema, conn, rng) -> Draft | None:
    """DELETE meant for some rows, written so that it removes them all."""
    picked = _common_text_value(schema, conn, rng)
    if picked is None:
        return None
    table, column, value = picked
    t, c = q(table), q(column)
    solution = f"DELETE FROM {t} WHERE {c} = {_lit(value)}"
    if rng.random() < 0.5:
        issue, bug = f"DELETE FROM {t}", "delete_missing_where"
    else:
        issue = f"DELETE FROM {t} WHERE EXISTS (SELECT 1 FROM {t} WHERE {c} = {_lit(value)})"
        bug = "delete_uncorrelated_exists"
    intent = f"I want to delete the {table} rows whose {column} is {_lit(value)} and keep the rest."
    return Draft("management", bug, intent, [solution], [issue])


def update_null_equality(schema, conn, rng) -> Draft | None:
    """Missing values filled in with `WHERE x = NULL`, which matches nothing."""
    options = []
    for table in schema.tables:
        for col in table.columns:
            if col.primary_key:
                continue
            nulls, total = _scalar(
                conn, f"SELECT SUM({q(col.name)} IS NULL), COUNT(*) FROM {q(table.name)}"
            ) or (0, 0)
            if nulls and nulls < total:
                options.append((table.name, col))
    if not options:
        return None
    table, col = rng.choice(options)
    fill = "0" if _numeric(col.type) else "'unknown'"
    t, c = q(table), q(col.name)
    solution = f"UPDATE {t} SET {c} = {fill} WHERE {c} IS NULL"
    issue = f"UPDATE {t} SET {c} = {fill} WHERE {c} = NULL"
    intent = f"I want to fill in the missing {col.name} values of {table} with {fill}."
    return Draft("management", "update_null_equality", intent, [solution], [issue])


def update_wrong_key(schema, conn, rng) -> Draft | None:
    """An UPDATE whose subquery's keys are compared with the wrong column of the target."""
    options = []
    for fk in schema.foreign_keys:
        child, parent = schema.column(fk.column), schema.column(fk.references)
        child_table = schema.table(child.table)
        child_keys = [c for c in child_table.primary_key if c.name != child.name]
        targets = [c for c in child_table.columns if not c.primary_key and c.name != child.name]
        labels = [c for c in schema.table(parent.table).columns if _text(c.type)]
        if child_keys and targets and labels:
            options.append((child, parent, child_keys[0], targets, labels))
    rng.shuffle(options)
    for child, parent, child_key, targets, labels in options:
        label = rng.choice(labels)
        values = _rows(
            conn,
            f"SELECT DISTINCT {q(label.name)} FROM {q(parent.table)} "
            f"WHERE {q(label.name)} IS NOT NULL ORDER BY 1 LIMIT 50",
        )
        if not values:
            continue
        value = rng.choice(values)
        target = rng.choice(targets)
        fill = "0" if _numeric(target.type) else "'flagged'"
        where = f"{q(label.name)} = {_lit(value[0])}"
        sub = f"SELECT {q(parent.name)} FROM {q(parent.table)} WHERE {where}"
        head = f"UPDATE {q(child.table)} SET {q(target.name)} = {fill} WHERE"
        intent = (
            f"For every {child.table} row that belongs to a {parent.table} whose {label.name} "
            f"is {_lit(value[0])}, I want to set {target.name} to {fill}."
        )
        return Draft(
            "management",
            "update_wrong_key",
            intent,
            [f"{head} {q(child.name)} IN ({sub})"],
            [f"{head} {q(child_key.name)} IN ({sub})"],
        )
    return None


def delete_date_as_number(schema, conn, rng) -> Draft | None:
    """Rows before a date deleted with the date written as a number."""
    options = []
    for table in schema.tables:
        for col in table.columns:
            row = _scalar(
                conn,
                f"SELECT {q(col.name)} FROM {q(table.name)} WHERE {q(col.name)} IS NOT NULL "
                f"ORDER BY {q(col.name)} LIMIT 1 OFFSET (SELECT COUNT(*) / 2 FROM {q(table.name)})",
            )
            if row and isinstance(row[0], str) and _ISO_DATE.match(row[0]):
                options.append((table.name, col.name, row[0][:10]))
    if not options:
        return None
    table, column, day = rng.choice(options)
    t, c = q(table), q(column)
    intent = f"I want to delete the {table} rows whose {column} is before {day}."
    return Draft(
        "management",
        "delete_date_as_number",
        intent,
        [f"DELETE FROM {t} WHERE {c} < '{day}'"],
        [f"DELETE FROM {t} WHERE {c} < {day.replace('-', '')}"],
    )


def trigger_wrong_event(schema, conn, rng) -> Draft | None:
    """An audit trigger attached to the wrong event: it never fires on what it should log."""
    tables = [t for t in schema.tables if len(t.primary_key) == 1]
    if not tables:
        return None
    table = rng.choice(tables)
    key = table.primary_key[0].name
    log = f"{table.name}_deleted"
    t, k = q(table.name), q(key)
    trigger = f"CREATE TRIGGER {q('log_' + table.name + '_delete')} AFTER {{event}} ON {t} "
    body = f"BEGIN INSERT INTO {q(log)} ({k}) VALUES (OLD.{k}); END"
    intent = (
        f"I want every {table.name} row that gets deleted to be recorded in {log} with its {key}."
    )
    return Draft(
        "personalization",
        "trigger_wrong_event",
        intent,
        [trigger.format(event="DELETE") + body],
        [trigger.format(event="UPDATE") + body],
        preprocess_sql=[f"CREATE TABLE {q(log)} ({k}, deleted_at TEXT)"],
        checks=[
            f"DELETE FROM {t} WHERE {k} IN (SELECT {k} FROM {t} ORDER BY {k} LIMIT 3)",
            f"SELECT {k} FROM {q(log)}",
        ],
    )


MANAGEMENT = {
    "delete_missing_where": delete_missing_where,
    "update_null_equality": update_null_equality,
    "update_wrong_key": update_wrong_key,
    "delete_date_as_number": delete_date_as_number,
}
PERSONALIZATION = {"trigger_wrong_event": trigger_wrong_event}


def view_draft(question: str, gold_sql: str, broken_sql: str, bug: str, name: str) -> Draft:
    """A personalization task from a query one: the user's view wraps the broken query."""
    view = q(name)
    intent = f"I want a view named {name} that answers this: {question}"
    return Draft(
        "personalization",
        f"view_{bug}",
        intent,
        [f"CREATE VIEW {view} AS {gold_sql}"],
        [f"CREATE VIEW {view} AS {broken_sql}"],
        checks=[f"SELECT * FROM {view}"],
    )


# ---------------------------------------------------------------------- helpers
def _common_text_value(schema: Schema, conn, rng):
    """(table, column, value) where value covers 5-50% of a table's rows, or None."""
    options = []
    for table in schema.tables:
        for col in table.columns:
            if col.primary_key or not _text(col.type):
                continue
            options.append((table.name, col.name))
    rng.shuffle(options)
    for table, column in options[:12]:
        row = _scalar(
            conn,
            f"SELECT {q(column)}, COUNT(*) * 1.0 / (SELECT COUNT(*) FROM {q(table)}) AS share "
            f"FROM {q(table)} WHERE {q(column)} IS NOT NULL GROUP BY {q(column)} "
            "HAVING share BETWEEN 0.05 AND 0.5 ORDER BY share DESC LIMIT 1",
        )
        if row:
            return table, column, row[0]
    return None


def _rows(conn: sqlite3.Connection, sql: str) -> list[tuple]:
    try:
        return conn.execute(sql).fetchall()
    except sqlite3.Error:
        return []


def _scalar(conn: sqlite3.Connection, sql: str):
    try:
        return conn.execute(sql).fetchone()
    except sqlite3.Error:
        return None


def _lit(value) -> str:
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


def _text(sql_type: str) -> bool:
    t = (sql_type or "").upper()
    return any(word in t for word in ("CHAR", "TEXT", "CLOB")) or not t


def _numeric(sql_type: str) -> bool:
    t = (sql_type or "").upper()
    return any(word in t for word in ("INT", "REAL", "FLOA", "DOUB", "NUM", "DEC"))
