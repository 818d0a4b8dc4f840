"""The views of a replica set (`Replicas`), in its SQL host process (`acesql.sql.host`).

Each view is a connection onto a replica file that holds one transaction open for a lease:
the trajectory's writes stay in memory (rollback journal in memory, no cache spill) and the
release rolls them back. The authorizer lets the model read and write the `main` and `temp`
databases and read the schema pragmas of `READ_PRAGMAS`; the model's own transaction control
runs as savepoints (BEGIN -> SAVEPOINT, COMMIT / END -> RELEASE, ROLLBACK -> ROLLBACK TO and
RELEASE), so nothing it writes commits. `Replicas` in the parent keeps the trajectory's
log of writing statements and replays it here when the transaction was lost.

A view's database may grow by its own size or `max_growth_bytes`, whichever is more, and its
temporary database as much: past that a write fails with the bound in its error, instead of
filling memory with uncommitted pages until the deadline.
"""

from __future__ import annotations

import re
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from acesql.sql.sandbox import (
    ALLOWED_FUNCTIONS,
    MAX_COLUMNS,
    ExecResult,
    _length_limit,
    run_with_deadline,
)

RESERVED_SAVEPOINT = "acesql_"  # savepoint names the model may not use
READ_PRAGMAS = frozenset(
    "table_info table_xinfo index_list index_info index_xinfo foreign_key_list".split()
)
CACHE_KIB = 16 * 1024  # each view's page cache (clean pages, kept across leases)
MIB = 1024 * 1024

_A = sqlite3
_READ_ACTIONS = {_A.SQLITE_SELECT, _A.SQLITE_READ, _A.SQLITE_RECURSIVE}
_WRITE_ACTIONS = {
    _A.SQLITE_INSERT,
    _A.SQLITE_UPDATE,
    _A.SQLITE_DELETE,
    _A.SQLITE_CREATE_TABLE,
    _A.SQLITE_CREATE_INDEX,
    _A.SQLITE_CREATE_VIEW,
    _A.SQLITE_CREATE_TRIGGER,
    _A.SQLITE_CREATE_TEMP_TABLE,
    _A.SQLITE_CREATE_TEMP_INDEX,
    _A.SQLITE_CREATE_TEMP_VIEW,
    _A.SQLITE_CREATE_TEMP_TRIGGER,
    _A.SQLITE_DROP_TABLE,
    _A.SQLITE_DROP_INDEX,
    _A.SQLITE_DROP_VIEW,
    _A.SQLITE_DROP_TRIGGER,
    _A.SQLITE_DROP_TEMP_TABLE,
    _A.SQLITE_DROP_TEMP_INDEX,
    _A.SQLITE_DROP_TEMP_VIEW,
    _A.SQLITE_DROP_TEMP_TRIGGER,
    _A.SQLITE_ALTER_TABLE,
    _A.SQLITE_REINDEX,
    _A.SQLITE_ANALYZE,
}
LEADING = re.compile(r"^(?:\s+|--[^\n]*(?:\n|$)|/\*.*?\*/)*", re.S)
_CONTROL = re.compile(r"(begin|commit|end|rollback)\b(.*)$", re.I | re.S)
_USER_TX = RESERVED_SAVEPOINT + "user"
_FULL = "database or disk is full"


class ViewServer:
    """The views of one replicas, by id; every method is called from the parent through
    `SqlHost.call`. `timeout_s`, `max_rows` and `max_bytes` bound each statement as in
    `sandbox.execute`."""

    def __init__(self, timeout_s: float, max_rows: int, max_bytes: int, max_growth_bytes: int):
        self.timeout_s, self.max_rows, self.max_bytes = timeout_s, max_rows, max_bytes
        self.max_growth_bytes = max_growth_bytes
        self.views: dict[int, _View] = {}

    def open(self, view_id: int, path: str) -> None:
        conn, growth = _connect(path, self.max_bytes, self.max_growth_bytes)
        view = self.views[view_id] = _View(conn, growth)
        # total_changes() counts from the connection's start; a trajectory sees its own
        conn.create_function("total_changes", 0, lambda: conn.total_changes - view.changes_base)

    def close(self, view_id: int) -> None:
        view = self.views.pop(view_id, None)
        if view is not None:
            view.conn.close()

    def begin(self, view_id: int) -> None:
        """A lease starts on the view: its transaction opens, and `changes()`,
        `last_insert_rowid()` and `total_changes()` read 0 whatever an earlier lease wrote."""
        view = self.views[view_id]
        if view.touched:
            view.conn.set_authorizer(None)
            _reset_counters(view.conn)
            view.touched = False
        view.open_transaction()

    def run(self, view_id: int, sql: str, start: float) -> tuple[ExecResult, bool, bool]:
        """Run one statement of the trajectory: its result, whether it belongs in the log of
        statements to replay (it changed the state, if only in part before it failed), and
        whether the lease's transaction is still open (SQLite rolls it back on some errors)."""
        view = self.views[view_id]
        result, logged = view.apply(sql, start, self)
        return result, logged, view.conn.in_transaction

    def replay(self, view_id: int, log: list[tuple[str, bool]], start: float) -> str | None:
        """Begin again and run the logged statements, each to the outcome it had (ok or
        failed): None, or why the state could not be rebuilt."""
        view = self.views[view_id]
        if view.conn.in_transaction:
            view.control("ROLLBACK")
        view.open_transaction()
        for sql, ok in log:
            result, _ = view.apply(sql, start, self)
            if result.ok != ok or not view.conn.in_transaction:
                if view.conn.in_transaction:
                    view.control("ROLLBACK")
                view.control("BEGIN")
                return f"replaying {sql[:80]!r} failed: {result.error}"
        return None

    def release(self, view_id: int) -> bool:
        """Roll the view back; whether it may serve another lease."""
        view = self.views[view_id]
        try:
            view.conn.set_authorizer(None)
            if view.conn.in_transaction:
                view.conn.execute("ROLLBACK")
        except sqlite3.Error:
            return False
        return True


@dataclass
class _View:
    conn: sqlite3.Connection
    growth: int  # bytes its database, and its temporary one, may grow
    in_user_tx: bool = False
    touched: bool = False  # a write was authorized on it: its change counters moved
    changes_base: int = 0  # the connection's total_changes when the lease began
    internal: bool = False
    writes: bool = False
    altering: bool = False

    def open_transaction(self) -> None:
        """Begin the lease's transaction; `total_changes()` counts from here."""
        self.changes_base = self.conn.total_changes
        self.conn.set_authorizer(self.authorize)
        self.in_user_tx = False
        self.control("BEGIN")

    def apply(self, sql: str, start: float, server: ViewServer) -> tuple[ExecResult, bool]:
        """Run `sql` (the model's transaction control as savepoints); whether to log it."""
        control = _CONTROL.match(LEADING.sub("", sql, count=1))
        if control and not (
            control.group(1).lower() == "rollback" and re.search(r"\bto\b", control.group(2), re.I)
        ):
            result = self.user_control(control.group(1).lower(), start)
            return result, result.ok
        self.writes = self.altering = False
        changes = self.conn.total_changes
        result = run_with_deadline(
            self.conn, sql, start, server.timeout_s, server.max_rows, server.max_bytes
        )
        if result.error and result.error.startswith(_FULL):
            result.error = (
                f"{_FULL}: the trajectory's writes may grow this database by "
                f"{self.growth / MIB:.0f} MiB, and its temporary tables as much (its size or "
                "the replica set's max_growth_bytes, whichever is more)"
            )
        self.touched |= self.writes
        # a statement that failed after changing rows (INSERT OR FAIL) keeps those changes
        # on a copy of the database too: it is replayed to the same partial effect
        partial = not result.ok and self.conn.total_changes != changes
        return result, self.writes and (result.ok or partial)

    def user_control(self, word: str, start: float) -> ExecResult:
        if word == "begin":
            if self.in_user_tx:
                return _failed("cannot start a transaction within a transaction", start)
            self.control(f"SAVEPOINT {_USER_TX}")
            self.in_user_tx = True
        else:
            if not self.in_user_tx:
                verb = "rollback" if word == "rollback" else "commit"
                return _failed(f"cannot {verb} - no transaction is active", start)
            if word == "rollback":
                self.control(f"ROLLBACK TO {_USER_TX}")
            self.control(f"RELEASE {_USER_TX}")
            self.in_user_tx = False
        return ExecResult(ok=True, elapsed_s=time.monotonic() - start)

    def control(self, sql: str) -> None:
        self.internal = True
        try:
            self.conn.execute(sql)
        finally:
            self.internal = False

    def authorize(self, action, arg1, arg2, db_name, trigger):
        if action in _READ_ACTIONS:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_FUNCTION:
            name = (arg2 or "").lower()
            internal = self.altering and name.startswith("sqlite_")  # ALTER TABLE's helpers
            return (
                sqlite3.SQLITE_OK if name in ALLOWED_FUNCTIONS or internal else sqlite3.SQLITE_DENY
            )
        if action == sqlite3.SQLITE_ALTER_TABLE:
            db_name = arg1  # ALTER TABLE passes (database, table, column)
        if action in _WRITE_ACTIONS and db_name in (None, "main", "temp"):
            self.writes = True
            self.altering |= action == sqlite3.SQLITE_ALTER_TABLE
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_PRAGMA and (arg1 or "").lower() in READ_PRAGMAS:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_SAVEPOINT:
            user_name = not (arg2 or "").lower().startswith(RESERVED_SAVEPOINT)
            if self.internal or user_name:
                self.writes |= not self.internal
                return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_TRANSACTION and self.internal:
            return sqlite3.SQLITE_OK
        return sqlite3.SQLITE_DENY


def _connect(path: str, max_bytes: int, max_growth_bytes: int) -> tuple[sqlite3.Connection, int]:
    """A view of a replica whose writes stay in memory until rolled back, and the bytes its
    database and its temporary one may grow.

    Without file locks (`nolock`): the views of one replica each hold a write transaction
    open at once, which locking would refuse, and none of them ever writes the file."""
    conn = sqlite3.connect(
        Path(path).resolve().as_uri() + "?nolock=1",
        uri=True,
        isolation_level=None,
        check_same_thread=False,
        cached_statements=0,
    )
    conn.execute("PRAGMA journal_mode = MEMORY")
    conn.execute("PRAGMA cache_spill = OFF")
    conn.execute("PRAGMA temp_store = MEMORY")
    conn.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    growth = max(max_growth_bytes, pages * page_size)
    conn.execute(f"PRAGMA max_page_count = {pages + growth // page_size}")
    temp_page_size = conn.execute("PRAGMA temp.page_size").fetchone()[0]
    conn.execute(f"PRAGMA temp.max_page_count = {max(1, growth // temp_page_size)}")
    conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
    conn.setlimit(sqlite3.SQLITE_LIMIT_COLUMN, MAX_COLUMNS)
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, _length_limit(max_bytes, 1))
    return conn, growth


def _reset_counters(conn: sqlite3.Connection) -> None:
    """Set `last_insert_rowid()` and `changes()` to 0 (an insert of rowid 0 into a scratch
    table, then a delete of no row), in a transaction rolled back whole."""
    conn.execute("BEGIN")
    try:
        conn.execute("CREATE TEMP TABLE acesql_counters (x)")
        conn.execute("INSERT INTO acesql_counters (rowid, x) VALUES (0, 0)")
        conn.execute("DELETE FROM acesql_counters WHERE 0")
    finally:
        conn.execute("ROLLBACK")


def _failed(error: str, start: float) -> ExecResult:
    return ExecResult(ok=False, error=error, elapsed_s=time.monotonic() - start)
