"""Sandboxed execution of untrusted SQL against SQLite files.

`execute(db, sql)` never raises on bad SQL: it returns an `ExecResult` whose `ok`, `error`
and `timed_out` say what happened.

What the sandbox does:
- opens the file read-only (`mode=ro` URI) with `PRAGMA query_only`, so SQLite itself refuses
  to change the database;
- opens regular files only (a FIFO or a device would block the open or never end), and a
  WAL-mode database that has no `-wal`/`-shm` files beside it as immutable, so reading it
  leaves none behind (a read-only connection cannot remove the ones it creates); one with a
  `-wal` but no `-shm` (a writer that crashed left it) is read with its WAL index in memory,
  without file locks (no connection has it open, or the `-shm` would be there);
- installs an authorizer that allows only reading: SELECT, reads of tables and views,
  recursive CTEs and the functions of `ALLOWED_FUNCTIONS`; it refuses writes, schema changes,
  ATTACH/DETACH, transactions, every PRAGMA and every other function (`REFUSED_FUNCTIONS`
  says why for those SQLite has). Table-valued functions (`json_each`, `json_tree`,
  `pragma_table_info` and the other `pragma_*`, `dbstat`, `sqlite_stmt`) are refused too:
  SQLite authorizes a statement that uses one as an UPDATE of `sqlite_master`, and the
  authorizer makes no exception to refusing writes;
- accepts exactly one statement, starting with SELECT, WITH or VALUES;
- enforces a wall-clock deadline (a finite number of seconds > 0, else ConfigError) through
  SQLite's progress handler, which interrupts the virtual machine itself (no thread left
  burning a core after the timeout). The handler runs between instructions only, and one
  instruction can run for minutes (a LIKE of a long pattern over a long string,
  `printf('%.*c', 2000000000, 'x')`): in a process that called `publish_deadlines`, each
  statement's deadline is also written where the parent reads it, and the parent kills the
  process when a statement outlives it (`acesql.sql.host`). `BatchExecutor` and
  `Replicas` run SQL that way; `execute` here, in the calling process, does not;
- bounds the bytes of a result row before it exists: a query first runs with SQLite's length
  limit (`SQLITE_LIMIT_LENGTH`) at `max_bytes` divided by the most columns a result may have
  (`SQLITE_LIMIT_COLUMN`, 2000); one that hits it (a value over 32 KiB by default) runs again
  with `max_bytes` divided by its own number of columns (from EXPLAIN; 1 KiB at least), so
  no row grows past `max_bytes` inside SQLite, nor later in Python;
- caps the rows and bytes kept from a result.

What it does not do: it does not bound the memory SQLite uses for a large sort or hash
inside the deadline, and it does not protect against a malicious database file (the files
are trusted, the SQL is not).
"""

from __future__ import annotations

import math
import os
import re
import sqlite3
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

from acesql.errors import ConfigError

DEFAULT_TIMEOUT_S = 30.0
DEFAULT_MAX_ROWS = 100_000
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
MAX_COLUMNS = 2000  # result columns a statement may have (SQLITE_LIMIT_COLUMN, set per connection)
PROGRESS_STEPS = 2_000  # SQLite VM instructions between deadline checks
FETCH_CHUNK = 512  # rows fetched at a time, fewer once the rows kept near `max_bytes`
# What Python spends on a row beyond its text and blob bytes: the tuple's header, and for
# each value a slot and the object (a float takes 24 bytes, a str 49 plus its characters).
# Counting only the characters held a 64 MB cap at 281 MB for 2,000 float columns.
ROW_BYTES, VALUE_BYTES = 56, 64

_READ_ACTIONS = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_RECURSIVE}

# An allow-list, not a deny-list: a function a newer SQLite adds stays refused until someone
# reviews it. These compute on values only (core, aggregate, window, date, math and JSON
# functions, some from SQLite releases newer than this one); `randomblob`, `zeroblob`,
# `printf` and the like are held by the length limit.
ALLOWED_FUNCTIONS = frozenset(
    """
    abs changes char coalesce concat concat_ws format glob hex if ifnull iif instr
    last_insert_rowid length like likelihood likely lower ltrim max min nullif octet_length
    printf quote random randomblob replace round rtrim sign soundex sqlite_version substr
    substring total_changes trim typeof unhex unicode unistr unistr_quote unlikely upper
    zeroblob
    avg count group_concat string_agg sum total median percentile percentile_cont
    percentile_disc
    row_number rank dense_rank percent_rank cume_dist ntile lag lead first_value last_value
    nth_value
    date time datetime julianday unixepoch strftime timediff current_date current_time
    current_timestamp
    acos acosh asin asinh atan atan2 atanh ceil ceiling cos cosh degrees exp floor ln log
    log10 log2 mod pi pow power radians sin sinh sqrt tan tanh trunc
    json jsonb json_array jsonb_array json_array_length json_error_position json_extract
    jsonb_extract -> ->> json_insert jsonb_insert json_object jsonb_object json_patch
    jsonb_patch json_pretty json_quote json_remove jsonb_remove json_replace jsonb_replace
    json_set jsonb_set json_type json_valid json_group_array jsonb_group_array
    json_group_object jsonb_group_object
    """.split()
)
# functions whose value can change from one run of a query to the next (the clock, chance,
# the connection's history); a query using one is never answered from an earlier run
_VOLATILE = re.compile(
    r"\b(random|randomblob|changes|total_changes|last_insert_rowid|current_date|current_time"
    r"|current_timestamp)\b|'now'|\"now\"|\b(date|time|datetime|julianday|unixepoch)\s*\(\s*\)",
    re.IGNORECASE,
)


def deterministic(sql: str) -> bool:
    """Whether `sql` returns the same rows each time it runs on an unchanged database: it
    calls none of the clock's, chance's or the connection's functions. Conservative: a
    name in a string or a column called `random` also counts as volatile.

    >>> deterministic("SELECT name FROM t ORDER BY age"), deterministic("SELECT random()")
    (True, False)
    >>> deterministic("SELECT date('now')"), deterministic("SELECT date(d) FROM t")
    (False, True)
    """
    return not _VOLATILE.search(sql)


# What was reviewed and refused, and why (the authorizer refuses anything not allowed; this
# documents SQLite's own functions, and a test checks that every one it lists is reviewed).
REFUSED_FUNCTIONS = {
    "load_extension": "loads native code into the process",
    "fts3_tokenizer": "returns a pointer into libsqlite3; with two arguments it installs a "
    "pointer that a later MATCH calls, crashing the process",
    "fts5": "hands out the address of the FTS5 C API",
    "fts5_source_id": "describes the SQLite build, not the data",
    "sqlite_compileoption_get": "describes the SQLite build, not the data",
    "sqlite_compileoption_used": "describes the SQLite build, not the data",
    "sqlite_source_id": "describes the SQLite build, not the data",
    "sqlite_offset": "reveals where a row lies in the file, not the data",
    "sqlite_log": "writes to the process's SQLite error log",
    "subtype": "a test helper for SQLite's value subtypes",
    "rtreecheck": "an R*Tree debugging function",
    "rtreedepth": "an R*Tree debugging function that parses raw node blobs",
    "rtreenode": "an R*Tree debugging function that parses raw node blobs",
    "match": "full-text search only; the sandbox never queries full-text tables",
    "matchinfo": "full-text search only",
    "offsets": "full-text search only",
    "snippet": "full-text search only",
    "highlight": "full-text search only",
    "bm25": "full-text search only",
    "optimize": "merges a full-text index: a write",
    "readfile": "the sqlite3 shell's: reads any file",
    "writefile": "the sqlite3 shell's: writes any file",
    "edit": "the sqlite3 shell's: starts an editor",
    "fsdir": "the sqlite3 shell's: lists folders",
}
_LEADING = re.compile(r"^(?:\s+|--[^\n]*(?:\n|$)|/\*.*?\*/|\()*", re.S)
_ALLOWED_START = ("select", "with", "values")
_deadline_slot = None  # where this process publishes the running statement's deadline


def publish_deadlines(slot) -> None:
    """From now on, write the deadline (`time.monotonic()` seconds) of the statement this
    process runs into `slot[0]`, and 0 when none runs: `slot` is shared memory that the
    parent process reads, to kill this one when SQLite did not stop a statement in time."""
    global _deadline_slot
    _deadline_slot = slot


@dataclass
class ExecResult:
    """What happened when one SQL string ran. Rows are tuples of SQLite values."""

    ok: bool
    columns: list[str] = field(default_factory=list)
    rows: list[tuple] = field(default_factory=list)
    error: str | None = None
    timed_out: bool = False
    elapsed_s: float = 0.0
    truncated: bool = False
    rows_affected: int = -1  # rows an INSERT/UPDATE/DELETE changed; -1 for a query

    def to_dict(self) -> dict:
        """A JSON-ready dict whose values cannot be mistaken for one another.

        A BLOB becomes `{"blob": "<hex>"}` and an infinite REAL `{"real": "inf"}` (or
        `"-inf"`, `"nan"`): JSON has no bytes and no infinity, and as strings they would read
        like TEXT. Every other value (NULL, INTEGER, finite REAL, TEXT) is itself.
        """
        return {
            "ok": self.ok,
            "columns": self.columns,
            "rows": [[_json_value(v) for v in r] for r in self.rows],
            "error": self.error,
            "timed_out": self.timed_out,
            "elapsed_s": round(self.elapsed_s, 6),
            "truncated": self.truncated,
        } | ({"rows_affected": self.rows_affected} if self.rows_affected >= 0 else {})


def open_readonly(path: str | Path) -> sqlite3.Connection:
    """A read-only connection to a SQLite file, with `query_only` on.

    It refuses to create a missing file, and to open anything but a regular file
    (sqlite3.OperationalError). A WAL-mode file without `-wal`/`-shm` beside it opens as
    immutable: SQLite would otherwise create both and, read-only, could not remove them. One
    with a `-wal` but no `-shm` keeps its WAL index in memory (exclusive locking mode, which
    a read-only connection can only take with the lock-free `unix-none` VFS), so that no
    `-shm` is created either.
    """
    path = Path(path).resolve()
    uri = path.as_uri() + "?mode=ro"
    side_files = _wal_side_files(path)
    if side_files == ():
        uri += "&immutable=1"
    elif side_files == ("-wal",):
        uri += "&vfs=unix-none"
    conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    if side_files == ("-wal",):
        conn.execute("PRAGMA locking_mode = EXCLUSIVE")
    conn.execute("PRAGMA query_only = ON")
    return conn


def open_sandboxed(
    path: str | Path, max_value_bytes: int = DEFAULT_MAX_BYTES
) -> sqlite3.Connection:
    """A read-only connection with the authorizer and limits installed; see the module doc."""
    conn = open_readonly(path)
    conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
    conn.setlimit(sqlite3.SQLITE_LIMIT_COLUMN, MAX_COLUMNS)
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, _length_limit(max_value_bytes, 1))
    conn.set_authorizer(_authorize)
    return conn


def check_timeout(timeout_s) -> float:
    """`timeout_s` as a float, or ConfigError unless it is a finite number of seconds > 0.

    NaN and infinity would disable the deadline (`monotonic() > nan` is never true), and
    0 or less would time out every query before it starts.

    >>> check_timeout(2)
    2.0
    """
    try:
        value = float(timeout_s)
    except (TypeError, ValueError):
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(f"timeout must be a finite number of seconds > 0, got {timeout_s!r}")
    return value


def execute(
    db: str | Path | sqlite3.Connection,
    sql: str,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    max_rows: int = DEFAULT_MAX_ROWS,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> ExecResult:
    """Run one untrusted SQL statement on `db` (a path, or a connection from `open_sandboxed`).

    It runs in the calling process, where the deadline holds between SQLite instructions
    only (see the module doc): for SQL that a model or a user wrote, use
    `BatchExecutor.execute_many`, whose worker is killed at the deadline. A timeout that is
    not a finite number of seconds > 0 raises ConfigError.

    >>> execute(":no-such-file:", "SELECT 1").ok
    False
    """
    timeout_s = check_timeout(timeout_s)
    start = time.monotonic()
    problem = statement_problem(sql)
    if problem:
        return ExecResult(ok=False, error=problem, elapsed_s=time.monotonic() - start)
    own = not isinstance(db, sqlite3.Connection)
    try:
        conn = open_sandboxed(db, max_bytes) if own else db
    except (sqlite3.Error, OSError, ValueError) as exc:
        return ExecResult(ok=False, error=f"cannot open database: {exc}", elapsed_s=0.0)
    try:
        return run_with_deadline(conn, sql, start, timeout_s, max_rows, max_bytes)
    finally:
        if own:
            conn.close()


def run_with_deadline(conn, sql, start, timeout_s, max_rows, max_bytes) -> ExecResult:
    """Execute `sql` on a sandboxed connection, interrupting SQLite at `start + timeout_s`.

    Text is decoded as UTF-8; a database holding invalid UTF-8 is read again with the bad
    bytes replaced (the strict decoder is much faster, so it goes first).
    """
    timeout_s = check_timeout(timeout_s)
    result = _run(conn, sql, start, timeout_s, max_rows, max_bytes)
    if result.error and "Could not decode to UTF-8" in result.error:
        conn.text_factory = decode_text
        try:
            result = _run(conn, sql, start, timeout_s, max_rows, max_bytes)
        finally:
            conn.text_factory = str
    return result


def _run(conn, sql, start, timeout_s, max_rows, max_bytes) -> ExecResult:
    deadline = start + timeout_s
    conn.set_progress_handler(lambda: time.monotonic() > deadline, PROGRESS_STEPS)
    if _deadline_slot is not None:
        _deadline_slot[0] = deadline
    try:
        # First with a length limit that holds for the widest row SQLite allows; only a
        # query that hits it pays for learning its real width, then runs again.
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, _length_limit(max_bytes, MAX_COLUMNS))
        try:
            return _fetch(conn, sql, start, max_rows, max_bytes)
        except sqlite3.DataError as exc:
            if getattr(exc, "sqlite_errorcode", None) != sqlite3.SQLITE_TOOBIG:
                raise
            width = _result_width(conn, sql)
            if width >= MAX_COLUMNS:
                raise
            conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, _length_limit(max_bytes, width))
            return _fetch(conn, sql, start, max_rows, max_bytes)
    except (sqlite3.Error, sqlite3.Warning, ValueError, OverflowError, MemoryError) as exc:
        elapsed = time.monotonic() - start
        timed_out = isinstance(exc, sqlite3.OperationalError) and "interrupted" in str(exc)
        error = f"timeout after {timeout_s:g}s" if timed_out else _describe(exc)
        return ExecResult(ok=False, error=error, timed_out=timed_out, elapsed_s=elapsed)
    finally:
        conn.set_progress_handler(None, 0)
        if _deadline_slot is not None:
            _deadline_slot[0] = 0.0


def _fetch(conn, sql, start, max_rows, max_bytes) -> ExecResult:
    cursor = conn.execute(sql)
    try:
        columns = [d[0] for d in cursor.description or ()]
        # No row is larger than `row_cap` (the length limit holds each value), so rows are
        # only measured once that many of them could pass `max_bytes`: most results never are.
        limit = conn.getlimit(sqlite3.SQLITE_LIMIT_LENGTH)
        row_cap = ROW_BYTES + max(1, len(columns)) * (limit + VALUE_BYTES)
        rows, size, truncated = [], None, False
        while not truncated:
            # a chunk holds about the rows that still fit (by the bound while the rows are not
            # measured, by their sizes once they are): a chunk of 512 wide rows fetched whole
            # would overshoot the cap by up to 511 of them
            if size is None:
                fits = max_bytes // row_cap - len(rows)
            else:
                fits = (max_bytes - size) * len(rows) // size + 1 if rows else 1
            chunk = cursor.fetchmany(max(1, min(FETCH_CHUNK, fits)))
            if not chunk:
                break
            for row in chunk:
                if len(rows) >= max_rows:
                    truncated = True
                    break
                if size is None and (len(rows) + 1) * row_cap > max_bytes:
                    size = sum(_row_bytes(r) for r in rows)
                if size is not None:
                    size += _row_bytes(row)
                    if size > max_bytes:
                        truncated = True
                        break
                rows.append(row)
        rows_affected = cursor.rowcount
    finally:
        cursor.close()
    return ExecResult(
        ok=True,
        columns=columns,
        rows=rows,
        truncated=truncated,
        elapsed_s=time.monotonic() - start,
        rows_affected=rows_affected,
    )


def statement_problem(sql) -> str | None:
    """Why `sql` is refused before it reaches SQLite, or None when it may run."""
    if not isinstance(sql, str):
        return f"SQL must be a string, got {type(sql).__name__}"
    if "\x00" in sql:
        return "SQL contains a NUL character"
    body = _LEADING.sub("", sql, count=1)
    if not body.strip():
        return "empty SQL"
    word = re.match(r"[A-Za-z]+", body)
    if word is None or word.group(0).lower() not in _ALLOWED_START:
        found = word.group(0).upper() if word else body[:20]
        return f"only SELECT / WITH / VALUES statements are allowed, got {found!r}"
    return None


def _authorize(action, arg1, arg2, db_name, trigger):
    if action in _READ_ACTIONS:
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in ALLOWED_FUNCTIONS:
        return sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


def _length_limit(max_bytes, n_columns: int) -> int:
    """SQLite's limit on one value's bytes: a row of `n_columns` such values fits `max_bytes`."""
    return min(max(1024, int(max_bytes) // max(1, n_columns)), 2**31 - 1)


def _result_width(conn, sql) -> int:
    """The number of columns of `sql`'s result, from EXPLAIN (prepared, never run); 1 when
    it does not prepare (running it then fails alike)."""
    try:
        cursor = conn.execute("EXPLAIN " + sql)
        try:
            for row in cursor:
                if row[1] == "ResultRow":  # every ResultRow of a query has its width as P2
                    return max(1, row[3])
        finally:
            cursor.close()
    except (sqlite3.Error, sqlite3.Warning, ValueError):
        pass
    return 1


def _wal_side_files(path: Path) -> tuple[str, ...] | None:
    """The `-wal`/`-shm` files beside `path` when it is a WAL-mode database, None when it is
    not; OperationalError if it is no regular file. The header is read without blocking, so
    a FIFO fails at once."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise sqlite3.OperationalError(f"unable to open database file: {exc}") from exc
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise sqlite3.OperationalError(f"not a regular file: {path}")
        header = os.read(fd, 20)
    finally:
        os.close(fd)
    wal = len(header) == 20 and header[18] == header[19] == 2  # file format versions 2: WAL
    if not wal:
        return None
    return tuple(end for end in ("-wal", "-shm") if Path(f"{path}{end}").exists())


def _json_value(value):
    if isinstance(value, bytes):
        return {"blob": value.hex()}
    if isinstance(value, float) and not math.isfinite(value):
        return {"real": str(value)}
    return value


def _row_bytes(row) -> int:
    size = ROW_BYTES + VALUE_BYTES * len(row)
    for value in row:
        if isinstance(value, (str, bytes)):
            size += len(value)
    return size


def decode_text(raw: bytes) -> str:
    """Lenient UTF-8 decoding for `Connection.text_factory`: bad bytes become U+FFFD."""
    return raw.decode("utf-8", errors="replace")


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    if "one statement at a time" in text:
        return "exactly one SQL statement is allowed"
    return text
