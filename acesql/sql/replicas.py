"""Write-capable SQL on pooled database replicas: one replica per trajectory, restored for free.

Stateful tasks (fixing a user's broken SQL, managing data) run INSERT, UPDATE, DELETE and
CREATE, and a multi-turn trajectory must see its own earlier writes and nobody else's.
Copying the database for every rollout pays its whole size in reads and writes each time;
this module copies each database once per worker and undoes each trajectory in memory.

    with ReplicaPool("work/replicas", worker=0) as pool:
        with pool.lease("data/synth/databases/shop_0001.sqlite") as db:
            db.execute("UPDATE orders SET status = 'void' WHERE id = 7")
            db.execute("SELECT status FROM orders WHERE id = 7")  # sees 'void'
        # released: the next lease of this replica sees the original database

How it works
- `ReplicaPool(root, worker=w)` owns `root/worker-<w>/`: one replica file per source
  database, made on first need with SQLite's backup API (a consistent snapshot, a WAL-mode
  source's `-wal` included) and kept for later pools of the same worker. A lock file keeps a
  second process out of the partition: give each process its own worker number.
- A lease is a connection onto that file, a private view: it holds one transaction open from
  `lease()` to `release()`, with the rollback journal in memory and cache spilling off, so
  none of the trajectory's writes reaches the file. Every turn sees the earlier writes (same
  connection, same transaction); the release is a ROLLBACK, which does no file I/O whether
  the trajectory wrote or not. As the file never changes, the views of one replica need no
  file locks and run side by side, each seeing only its own writes; a released view keeps
  its cache of clean pages for the next lease.
- The model's own transaction control runs as savepoints inside that transaction (BEGIN ->
  SAVEPOINT, COMMIT / END -> RELEASE, ROLLBACK -> ROLLBACK TO and RELEASE), so nothing it
  writes can commit; the authorizer refuses transaction statements from anywhere else.
- SQLite rolls back the whole transaction when a write is interrupted at its deadline (and
  on a few other errors); the lease then replays the trajectory's earlier writing statements,
  so the trajectory goes on from the state it would have on a copy of its own. Writes that
  call `random()` or read the clock replay to different values.
- A replica's size and modification time are stamped when it is made and checked at each
  release. One whose file no longer matches its stamp, that has a journal beside it, or whose
  source changed is made again, so a dirty replica is never handed out.

Why rollback: `bench/replica_bench.py` measures it against a copy per rollout, and against
two ways of restoring a replica after the trajectory's writes were committed to it (SQLite's
backup API from the source, and rewriting only the pages that differ). Only rollback restores
without touching the file at all, and only it lets concurrent trajectories share one file;
the other two need a replica per concurrent trajectory and read the whole source (the page
diff the whole replica too) for every writing trajectory.

The sandbox's rules for untrusted SQL (module `sandbox`) hold here too: the same deadline
through the progress handler, the same row and byte caps and function allow-list, no ATTACH,
no VACUUM (it cannot run inside a transaction), no PRAGMA but the read-only schema ones
(`READ_PRAGMAS`). What it does not do: bound the memory a trajectory's uncommitted writes take
(they live in the page cache until the release) beyond what the deadline allows; it trusts
the source files, and it never opens them for writing.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from acesql.errors import DataError, ReplicaError
from acesql.locks import lock_folder
from acesql.sql.sandbox import (
    ALLOWED_FUNCTIONS,
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_ROWS,
    DEFAULT_TIMEOUT_S,
    MAX_COLUMNS,
    ExecResult,
    _length_limit,
    check_timeout,
    open_readonly,
    run_with_deadline,
)

RESERVED_SAVEPOINT = "acesql_"  # savepoint names the model may not use
READ_PRAGMAS = frozenset(
    "table_info table_xinfo index_list index_info index_xinfo foreign_key_list".split()
)
CACHE_KIB = 16 * 1024  # each replica connection's page cache (clean pages, kept across leases)

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
_LEADING = re.compile(r"^(?:\s+|--[^\n]*(?:\n|$)|/\*.*?\*/)*", re.S)
_CONTROL = re.compile(r"(begin|commit|end|rollback)\b(.*)$", re.I | re.S)
_USER_TX = RESERVED_SAVEPOINT + "user"


def split_statements(sql: str) -> list[str]:
    """The statements of a script, in order, each with its text as written (no empty ones).

    Semicolons inside strings, comments and trigger bodies do not split.

    >>> split_statements("UPDATE t SET a = ';'; SELECT 1;")
    ["UPDATE t SET a = ';';", 'SELECT 1;']
    """
    pieces, start = [], 0
    for i, char in enumerate(sql):
        if char == ";" and sqlite3.complete_statement(sql[start : i + 1]):
            pieces.append(sql[start : i + 1])
            start = i + 1
    pieces.append(sql[start:])
    return [p.strip() for p in pieces if _LEADING.sub("", p, count=1).strip(" \t\r\n;")]


@dataclass
class PoolStats:
    """What a pool did: replicas made, leases, writing leases, replays after a lost transaction."""

    made: int = 0  # replica files materialised (first use, a source change, a failed check)
    leases: int = 0
    writing_leases: int = 0
    replays: int = 0
    waits: int = 0  # leases that waited for a free connection

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class _View:
    """One connection onto a replica file: a trajectory's private view while leased."""

    conn: sqlite3.Connection
    generation: int


@dataclass
class _Source:
    path: Path
    folder: Path
    stamp: tuple  # the source's (size, mtime_ns, inode) the replica was made from
    generation: int = -1  # the replica file is `<generation>.sqlite`; -1: none made yet
    file_stamp: tuple = ()  # the replica's (size, mtime_ns) right after it was made
    free: list = field(default_factory=list)  # views of the current generation, not leased
    leased: Counter = field(default_factory=Counter)  # leased views by generation

    @property
    def replica(self) -> Path:
        return self.folder / f"{self.generation}.sqlite"


class ReplicaPool:
    """Replicas of source databases for one worker process; see the module doc.

    `max_leases` bounds the leases of one database at a time (each is a connection with its
    own page cache and the trajectory's writes in memory); past it a lease waits up to
    `wait_s`. `timeout_s`, `max_rows` and `max_bytes` bound each statement as in
    `sandbox.execute`.
    """

    def __init__(
        self,
        root: str | Path,
        worker: int = 0,
        max_leases: int = 16,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        max_rows: int = DEFAULT_MAX_ROWS,
        max_bytes: int = DEFAULT_MAX_BYTES,
        wait_s: float = 60.0,
    ):
        if int(max_leases) < 1:
            raise ReplicaError(f"max_leases must be at least 1, got {max_leases!r}")
        self.folder = Path(root) / f"worker-{int(worker)}"
        self.max_leases = int(max_leases)
        self.timeout_s = check_timeout(timeout_s)
        self.max_rows, self.max_bytes, self.wait_s = max_rows, max_bytes, wait_s
        self.stats = PoolStats()
        self._sources: dict[Path, _Source] = {}
        self._cond = threading.Condition()
        self._lock_fd = _lock_partition(self.folder)

    def lease(self, source: str | Path) -> Lease:
        """A private view of `source` for one trajectory; release it (or use `with`) when done.

        DataError when `source` is no SQLite file; ReplicaError when the pool is closed or
        no lease frees up within `wait_s`.
        """
        path, stamp = _source_stamp(source)
        with self._cond:
            if self._lock_fd is None:
                raise ReplicaError("the replica pool is closed")
            entry = self._source(path, stamp)
            deadline = time.monotonic() + self.wait_s
            waited = False
            while entry.leased.total() >= self.max_leases:
                waited = True
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ReplicaError(
                        f"{self.max_leases} leases of {path.name} stayed out for "
                        f"{self.wait_s:g}s: release leases when trajectories end, or raise "
                        "max_leases"
                    )
                self._cond.wait(left)
                entry = self._source(path, stamp)
            self.stats.waits += waited
            if not entry.file_stamp or not entry.replica.exists():
                self._make(entry)
            view = entry.free.pop() if entry.free else None
            entry.leased[entry.generation] += 1
            self.stats.leases += 1
            replica, generation = entry.replica, entry.generation
        try:
            if view is None:
                view = _View(_connect(replica, self.max_bytes), generation)
            return Lease(self, entry, view, replica)
        except BaseException:
            with self._cond:
                entry.leased[generation] -= 1
                self._cond.notify_all()
            raise

    def close(self) -> None:
        """Close the free views and unlock the partition (the replica files stay for reuse)."""
        with self._cond:
            for entry in self._sources.values():
                for view in entry.free:
                    view.conn.close()
                entry.free.clear()
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None

    def __enter__(self) -> ReplicaPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ internals
    def _source(self, path: Path, stamp: tuple) -> _Source:
        """The pool's entry for `path`: on first use, an existing replica is adopted when its
        stamp holds; a changed source retires the replica (a new one is made)."""
        entry = self._sources.get(path)
        if entry is None:
            folder = self.folder / f"{path.stem}-{_short_hash(str(path))}"
            folder.mkdir(parents=True, exist_ok=True)
            entry = self._sources[path] = _Source(path, folder, stamp)
            for file in sorted(folder.glob("*.sqlite")):
                file_stamp = _read_stamp(file, stamp) if file.stem.isdigit() else None
                if file_stamp is not None and entry.generation < 0:
                    entry.generation, entry.file_stamp = int(file.stem), file_stamp
                else:
                    _remove_replica(file)
        elif entry.stamp != stamp:
            entry.stamp = stamp
            self._retire(entry)
        return entry

    def _make(self, entry: _Source) -> None:
        """Copy the source into a new replica file (atomically) and stamp it."""
        self._retire(entry)
        entry.generation += 1
        replica = entry.replica
        tmp = replica.with_name(replica.name + ".tmp")
        tmp.unlink(missing_ok=True)
        try:
            src = open_readonly(entry.path)
        except (sqlite3.Error, OSError) as exc:
            raise DataError(f"cannot read database {entry.path}: {exc}") from exc
        dst = sqlite3.connect(tmp)
        try:
            src.backup(dst)
            if dst.execute("PRAGMA journal_mode").fetchone()[0] == "wal":
                dst.execute("PRAGMA journal_mode = DELETE")
        except sqlite3.Error as exc:
            tmp.unlink(missing_ok=True)
            raise DataError(f"cannot copy database {entry.path}: {exc}") from exc
        finally:
            dst.close()
            src.close()
        os.replace(tmp, replica)
        entry.file_stamp = _write_stamp(replica, entry.stamp)
        self.stats.made += 1

    def _retire(self, entry: _Source) -> None:
        """Stop handing out the current replica; its file goes once no leased view is left on
        it (the last release removes it)."""
        for view in entry.free:
            view.conn.close()
        entry.free.clear()
        if entry.generation >= 0 and not entry.leased[entry.generation]:
            _remove_replica(entry.replica)
        entry.file_stamp = ()

    def _release(self, entry: _Source, view: _View, replica: Path, wrote: bool) -> None:
        """Roll the view back; keep it for the next lease while its replica is still the
        current one and untouched, else close it."""
        try:
            view.conn.set_authorizer(None)
            if view.conn.in_transaction:
                view.conn.execute("ROLLBACK")
            untouched = _file_stamp(replica) == entry.file_stamp and not _has_journal(replica)
        except (sqlite3.Error, OSError):
            untouched = False
        with self._cond:
            entry.leased[view.generation] -= 1
            self.stats.writing_leases += wrote
            current = view.generation == entry.generation and bool(entry.file_stamp)
            if untouched and current and self._lock_fd is not None:
                entry.free.append(view)
            else:
                view.conn.close()
                if current:  # changed behind the pool's back: the next lease makes a new one
                    self._retire(entry)
                elif not entry.leased[view.generation]:
                    _remove_replica(replica)  # the last view of a retired replica
            self._cond.notify_all()


class Lease:
    """One trajectory's private view of a replica: `execute` runs its statements, `release`
    undoes them all. `path` is the replica file, `source` the database it copies."""

    def __init__(self, pool: ReplicaPool, entry: _Source, view: _View, replica: Path):
        self.pool, self.source, self.path = pool, entry.path, replica
        self.wrote = False
        self._entry, self._view, self._conn = entry, view, view.conn
        self._log: list[str] = []  # the statements to replay after a lost transaction
        self._in_user_tx = False
        self._internal = False
        self._writes = self._altering = False
        self._broken: str | None = None
        self._conn.set_authorizer(self._authorize)
        self._control("BEGIN")

    def execute(self, sql: str) -> ExecResult:
        """Run one statement of the trajectory; failures come back as data (see `ExecResult`)."""
        start = time.monotonic()
        if self._conn is None:
            raise ReplicaError("this lease was released: lease the database again")
        problem = _statement_problem(sql)
        if problem is None and self._broken:
            problem = self._broken
        if problem:
            return ExecResult(ok=False, error=problem, elapsed_s=time.monotonic() - start)
        result, changed = self._apply(sql, start)
        if not self._conn.in_transaction:
            self._recover()
        elif changed:
            self._log.append(sql)
            self.wrote = True
        return result

    def execute_script(self, sql: str) -> list[ExecResult]:
        """Run each statement of `sql` in order, stopping after the first that fails."""
        results = []
        for statement in split_statements(sql) or [sql]:
            results.append(self.execute(statement))
            if not results[-1].ok:
                break
        return results

    def release(self) -> None:
        """Undo the trajectory's writes and hand the replica back (idempotent)."""
        if self._conn is None:
            return
        self._conn = None
        self.pool._release(self._entry, self._view, self.path, self.wrote)

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    # ------------------------------------------------------------------ internals
    def _apply(self, sql: str, start: float) -> tuple[ExecResult, bool]:
        """Run `sql` (the model's transaction control as savepoints); whether it changed state."""
        control = _CONTROL.match(_LEADING.sub("", sql, count=1))
        if control and not (
            control.group(1).lower() == "rollback" and re.search(r"\bto\b", control.group(2), re.I)
        ):
            return self._user_control(control.group(1).lower(), start)
        self._writes = self._altering = False
        result = run_with_deadline(
            self._conn, sql, start, self.pool.timeout_s, self.pool.max_rows, self.pool.max_bytes
        )
        return result, result.ok and self._writes

    def _user_control(self, word: str, start: float) -> tuple[ExecResult, bool]:
        if word == "begin":
            if self._in_user_tx:
                return _failed("cannot start a transaction within a transaction", start), False
            self._control(f"SAVEPOINT {_USER_TX}")
            self._in_user_tx = True
        else:
            if not self._in_user_tx:
                verb = "rollback" if word == "rollback" else "commit"
                return _failed(f"cannot {verb} - no transaction is active", start), False
            if word == "rollback":
                self._control(f"ROLLBACK TO {_USER_TX}")
            self._control(f"RELEASE {_USER_TX}")
            self._in_user_tx = False
        return ExecResult(ok=True, elapsed_s=time.monotonic() - start), True

    def _control(self, sql: str) -> None:
        self._internal = True
        try:
            self._conn.execute(sql)
        finally:
            self._internal = False

    def _recover(self) -> None:
        """SQLite rolled the transaction back: begin again and replay the trajectory's writes."""
        self.pool.stats.replays += 1
        self._in_user_tx = False
        self._control("BEGIN")
        start = time.monotonic()
        for sql in self._log:
            result, _ = self._apply(sql, start)
            if not (result.ok and self._conn.in_transaction):
                self._broken = (
                    "this trajectory's earlier writes were lost (SQLite rolled back its "
                    f"transaction and replaying {sql[:80]!r} failed: {result.error})"
                )
                if self._conn.in_transaction:
                    self._control("ROLLBACK")
                self._control("BEGIN")
                return

    def _authorize(self, action, arg1, arg2, db_name, trigger):
        if action in _READ_ACTIONS:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_FUNCTION:
            name = (arg2 or "").lower()
            internal = self._altering and name.startswith("sqlite_")  # ALTER TABLE's helpers
            return (
                sqlite3.SQLITE_OK if name in ALLOWED_FUNCTIONS or internal else sqlite3.SQLITE_DENY
            )
        if action == sqlite3.SQLITE_ALTER_TABLE:
            db_name = arg1  # ALTER TABLE passes (database, table, column)
        if action in _WRITE_ACTIONS and db_name in (None, "main", "temp"):
            self._writes = True
            self._altering |= action == sqlite3.SQLITE_ALTER_TABLE
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_PRAGMA and (arg1 or "").lower() in READ_PRAGMAS:
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_SAVEPOINT:
            user_name = not (arg2 or "").lower().startswith(RESERVED_SAVEPOINT)
            if self._internal or user_name:
                self._writes |= not self._internal
                return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_TRANSACTION and self._internal:
            return sqlite3.SQLITE_OK
        return sqlite3.SQLITE_DENY


# ---------------------------------------------------------------------- helpers
def _connect(path: Path, max_bytes: int) -> sqlite3.Connection:
    """A view of a replica whose writes stay in memory until rolled back.

    Without file locks (`nolock`): the views of one replica each hold a write transaction
    open at once, which locking would refuse, and none of them ever writes the file."""
    conn = sqlite3.connect(
        path.resolve().as_uri() + "?nolock=1",
        uri=True,
        isolation_level=None,
        check_same_thread=False,
        cached_statements=0,
    )
    conn.execute("PRAGMA journal_mode = MEMORY")
    conn.execute("PRAGMA cache_spill = OFF")
    conn.execute("PRAGMA temp_store = MEMORY")
    conn.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
    conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
    conn.setlimit(sqlite3.SQLITE_LIMIT_COLUMN, MAX_COLUMNS)
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, _length_limit(max_bytes, 1))
    return conn


def _statement_problem(sql) -> str | None:
    if not isinstance(sql, str):
        return f"SQL must be a string, got {type(sql).__name__}"
    if "\x00" in sql:
        return "SQL contains a NUL character"
    statements = split_statements(sql)
    if not statements:
        return "empty SQL"
    if len(statements) > 1:
        return f"exactly one SQL statement is allowed, got {len(statements)}"
    return None


def _failed(error: str, start: float) -> ExecResult:
    return ExecResult(ok=False, error=error, elapsed_s=time.monotonic() - start)


def _source_stamp(source) -> tuple[Path, tuple]:
    path = Path(source).resolve()
    try:
        st = path.stat()
    except OSError as exc:
        raise DataError(f"database not found: {source} ({exc.strerror})") from exc
    if not path.is_file():
        raise DataError(f"not a database file: {source}")
    return path, (st.st_size, st.st_mtime_ns, st.st_ino)


def _stamp_file(replica: Path) -> Path:
    return replica.with_suffix(".json")


def _file_stamp(path: Path) -> tuple:
    st = path.stat()
    return (st.st_size, st.st_mtime_ns)


def _has_journal(replica: Path) -> bool:
    return any(Path(f"{replica}{end}").exists() for end in ("-journal", "-wal"))


def _write_stamp(replica: Path, source_stamp: tuple) -> tuple:
    """Record the replica's size and mtime next to the source's stamp; return the former."""
    file_stamp = _file_stamp(replica)
    body = {"source": list(source_stamp), "replica": list(file_stamp)}
    tmp = _stamp_file(replica).with_suffix(".json.tmp")
    tmp.write_text(json.dumps(body))
    os.replace(tmp, _stamp_file(replica))
    return file_stamp


def _read_stamp(replica: Path, source_stamp: tuple) -> tuple | None:
    """The replica's recorded file stamp when it is as it was made from this very source
    (same size and mtime, no journal beside it), else None."""
    try:
        stamp = json.loads(_stamp_file(replica).read_text())
        file_stamp = _file_stamp(replica)
    except (OSError, ValueError):
        return None
    if _has_journal(replica) or stamp.get("source") != list(source_stamp):
        return None
    return file_stamp if stamp.get("replica") == list(file_stamp) else None


def _remove_replica(replica: Path) -> None:
    for path in (
        replica,
        _stamp_file(replica),
        *(Path(f"{replica}{e}") for e in ("-journal", "-wal", "-shm")),
    ):
        path.unlink(missing_ok=True)


def _short_hash(text: str) -> str:
    import hashlib

    return hashlib.sha1(text.encode()).hexdigest()[:10]


def _lock_partition(folder: Path) -> int:
    """An exclusive lock on the partition's lock file, or ReplicaError naming the fix."""
    fd = lock_folder(folder)
    if fd is None:
        raise ReplicaError(
            f"{folder} is in use by another process: give each process its own worker number"
        )
    return fd
