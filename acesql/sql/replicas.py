"""Write-capable SQL on database replicas: one replica per trajectory, restored for free.

Stateful tasks (fixing a user's broken SQL, managing data) run INSERT, UPDATE, DELETE and
CREATE, and a multi-turn trajectory must see its own earlier writes and nobody else's.
Copying the database for every rollout pays its whole size in reads and writes each time;
this module copies each database once per worker and undoes each trajectory in memory.

    with Replicas("work/replicas", worker=0) as replicas:
        with replicas.lease("data/synth/databases/shop_0001.sqlite") as db:
            db.execute("UPDATE orders SET status = 'void' WHERE id = 7")
            db.execute("SELECT status FROM orders WHERE id = 7")  # sees 'void'
        # released: the next lease of this replica sees the original database

How it works
- `Replicas(root, worker=w)` owns `root/worker-<w>/`: one replica file per source
  database, made on first need with SQLite's backup API (a consistent snapshot, a WAL-mode
  source's `-wal` included) and kept for later replica sets of the same worker. A lock file keeps a
  second process out of the partition: give each process its own worker number.
- A lease is a connection onto that file, a private view: it holds one transaction open from
  `lease()` to `release()`, with the rollback journal in memory and cache spilling off, so
  none of the trajectory's writes reaches the file. Every turn sees the earlier writes (same
  connection, same transaction); the release is a ROLLBACK, which does no file I/O whether
  the trajectory wrote or not. As the file never changes, the views of one replica need no
  file locks and run side by side, each seeing only its own writes; a released view keeps
  its cache of clean pages for the next lease, which finds `changes()`, `total_changes()`
  and `last_insert_rowid()` at 0 whatever the one before wrote.
- The views live in the replica set's SQL host, a child process (`acesql.sql.host`,
  `acesql.sql.replica_views`), which is killed when a statement outlives its deadline inside
  one SQLite call, where SQLite cannot stop it: the statement comes back timed out, and
  every lease goes on from its replayed state (below) in a new host.
- The model's own transaction control runs as savepoints inside that transaction (BEGIN ->
  SAVEPOINT, COMMIT / END -> RELEASE, ROLLBACK -> ROLLBACK TO and RELEASE), so nothing it
  writes can commit; the authorizer refuses transaction statements from anywhere else.
- SQLite rolls back the whole transaction when a write is interrupted at its deadline (and
  on a few other errors); the lease then replays the trajectory's earlier writing statements,
  so the trajectory goes on from the state it would have on a copy of its own. A statement
  that failed after changing rows (INSERT OR FAIL) is replayed too, to the same partial
  effect. Writes that call `random()` or read the clock replay to different values.
- A view's database may grow by its size or `max_growth_bytes` (64 MiB), whichever is more,
  and its temporary tables as much: uncommitted pages live in memory, and a write past the
  bound fails with the bound in its error rather than filling memory until the deadline.
- A replica's size and modification time are stamped when it is made and checked at each
  release. One whose file no longer matches its stamp, that has a journal beside it, or whose
  source changed is made again, so a dirty replica is never handed out.

Why rollback: `bench/replica_bench.py` measures it against a copy per rollout, and against
two ways of restoring a replica after the trajectory's writes were committed to it (SQLite's
backup API from the source, and rewriting only the pages that differ). Only rollback restores
without touching the file at all, and only it lets concurrent trajectories share one file;
the other two need a replica per concurrent trajectory and read the whole source (the page
diff the whole replica too) for every writing trajectory.

The sandbox's rules for untrusted SQL (module `sandbox`) hold here too: the same deadline,
the same row and byte caps and function allow-list, no ATTACH, no VACUUM (it cannot run
inside a transaction), no PRAGMA but the read-only schema ones (`READ_PRAGMAS`). It trusts
the source files, and it never opens them for writing.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import sqlite3
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from acesql.errors import DataError, ReplicaError
from acesql.locks import lock_folder
from acesql.sql.host import SqlHost, Stopped
from acesql.sql.replica_views import LEADING, MIB, READ_PRAGMAS, ViewServer
from acesql.sql.sandbox import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_ROWS,
    DEFAULT_TIMEOUT_S,
    ExecResult,
    check_timeout,
    open_readonly,
)

__all__ = ["READ_PRAGMAS", "Lease", "ReplicaStats", "Replicas", "split_statements"]

MAX_GROWTH_BYTES = 64 * MIB  # a view's database may grow by this, or by its size if more
LOST = "lost"  # what a call on a view answers when the view went with an earlier host


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
    return [p.strip() for p in pieces if LEADING.sub("", p, count=1).strip(" \t\r\n;")]


@dataclass
class ReplicaStats:
    """What a replica set did: replicas made, leases, writing leases, replays after a lost
    transaction."""

    made: int = 0  # replica files materialised (first use, a source change, a failed check)
    leases: int = 0
    writing_leases: int = 0
    replays: int = 0
    waits: int = 0  # leases that waited for a free connection

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class _View:
    """A connection in the replica set's SQL host onto a replica file: a trajectory's private view
    while leased. It lives as long as the host it was opened in (`host`, the host's
    generation)."""

    id: int
    generation: int  # the replica's
    host: int


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


class Replicas:
    """Replicas of source databases for one worker process; see the module doc.

    `max_leases` bounds the leases of one database at a time (each is a connection with its
    own page cache and the trajectory's writes in memory); past it a lease waits up to
    `wait_s`. `timeout_s`, `max_rows` and `max_bytes` bound each statement as in
    `sandbox.execute`; a view's database may grow by `max_growth_bytes` or its size.
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
        max_growth_bytes: int = MAX_GROWTH_BYTES,
    ):
        if int(max_leases) < 1:
            raise ReplicaError(f"max_leases must be at least 1, got {max_leases!r}")
        self.folder = Path(root) / f"worker-{int(worker)}"
        self.max_leases = int(max_leases)
        self.timeout_s = check_timeout(timeout_s)
        self.max_rows, self.max_bytes, self.wait_s = max_rows, max_bytes, wait_s
        self.stats = ReplicaStats()
        self._sources: dict[Path, _Source] = {}
        self._cond = threading.Condition()
        self._host = SqlHost(
            partial(ViewServer, self.timeout_s, max_rows, max_bytes, int(max_growth_bytes))
        )
        self._host_lock = threading.Lock()  # one call at a time; taken after _cond, never before
        self._view_ids = itertools.count()
        self._lock_fd = _lock_partition(self.folder)

    def lease(self, source: str | Path) -> Lease:
        """A private view of `source` for one trajectory; release it (or use `with`) when done.

        DataError when `source` is no SQLite file; ReplicaError when the replica set is closed or
        no lease frees up within `wait_s`.
        """
        path, stamp = _source_stamp(source)
        with self._cond:
            if self._lock_fd is None:
                raise ReplicaError("the replica set is closed")
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
            return Lease(self, entry, view or self._open_view(replica, generation), replica)
        except BaseException:
            with self._cond:
                entry.leased[generation] -= 1
                self._cond.notify_all()
            raise

    def close(self) -> None:
        """Close the free views and unlock the partition (the replica files stay for reuse);
        the host process ends with the last lease."""
        with self._cond:
            for entry in self._sources.values():
                for view in entry.free:
                    self._close_view(view)
                entry.free.clear()
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None
            self._end_host_when_idle()

    def __enter__(self) -> Replicas:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ internals
    def _source(self, path: Path, stamp: tuple) -> _Source:
        """The replica set's entry for `path`: on first use, an existing replica is adopted when its
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
            self._close_view(view)
        entry.free.clear()
        if entry.generation >= 0 and not entry.leased[entry.generation]:
            _remove_replica(entry.replica)
        entry.file_stamp = ()

    def _release(self, entry: _Source, view: _View, replica: Path, wrote: bool) -> None:
        """Roll the view back; keep it for the next lease while its replica is still the
        current one and untouched, else close it."""
        reusable = self._call(view, "release") is True
        try:
            untouched = _file_stamp(replica) == entry.file_stamp and not _has_journal(replica)
        except OSError:
            untouched = False
        with self._cond:
            entry.leased[view.generation] -= 1
            self.stats.writing_leases += wrote
            current = view.generation == entry.generation and bool(entry.file_stamp)
            if untouched and current and reusable and self._lock_fd is not None:
                entry.free.append(view)
            else:
                self._close_view(view)
                if current and not untouched:  # changed behind the replica set's back: made again
                    self._retire(entry)
                elif not current and not entry.leased[view.generation]:
                    _remove_replica(replica)  # the last view of a retired replica
            if self._lock_fd is None:
                self._end_host_when_idle()
            self._cond.notify_all()

    def _open_view(self, replica: Path, generation: int) -> _View:
        """A new view of `replica` in the host (started if none runs)."""
        with self._host_lock:
            view_id = next(self._view_ids)
            reply = self._host.call("open", view_id, str(replica))
            if isinstance(reply, Stopped):
                raise ReplicaError(
                    f"the replica host process died (exit code {reply.exitcode}) while opening "
                    f"{replica}"
                )
            return _View(view_id, generation, self._host.generation)

    def _call(self, view: _View, method: str, *args):
        """`method` of the host's view server on `view`: its value, a `Stopped` when the host
        was killed or died during the call, or LOST when the view had gone with an earlier
        host."""
        with self._host_lock:
            if not self._live(view):
                return LOST
            return self._host.call(method, view.id, *args)

    def _live(self, view: _View) -> bool:
        return view.host == self._host.generation and self._host.running

    def _close_view(self, view: _View) -> None:
        self._call(view, "close")

    def _end_host_when_idle(self) -> None:
        if not any(entry.leased.total() for entry in self._sources.values()):
            with self._host_lock:
                self._host.close()


class Lease:
    """One trajectory's private view of a replica: `execute` runs its statements, `release`
    undoes them all. `path` is the replica file, `source` the database it copies."""

    def __init__(self, replicas: Replicas, entry: _Source, view: _View, replica: Path):
        self.replicas, self.source, self.path = replicas, entry.path, replica
        self.wrote = False
        self._entry, self._view = entry, view
        self._log: list[tuple[str, bool]] = []  # (statement, ok): what a replay runs again
        self._broken: str | None = None
        if replicas._call(view, "begin") is not None:  # the view went with its host: a new one
            self._view = replicas._open_view(replica, view.generation)
            if replicas._call(self._view, "begin") is not None:
                raise ReplicaError("the replica host process died while a lease began")

    def execute(self, sql: str) -> ExecResult:
        """Run one statement of the trajectory; failures come back as data (see `ExecResult`)."""
        start = time.monotonic()
        if self._view is None:
            raise ReplicaError("this lease was released: lease the database again")
        problem = _statement_problem(sql)
        if problem is None and self._broken:
            problem = self._broken
        if problem:
            return _failed(problem, start)
        if not self.replicas._live(self._view):  # its host was killed, for this lease or another
            self._recover()
            if self._broken:
                return _failed(self._broken, start)
        reply = self.replicas._call(self._view, "run", sql, start)
        if isinstance(reply, Stopped) or reply is LOST:  # the next statement replays the log
            return _stopped(reply, self.replicas.timeout_s, start)
        result, logged, in_transaction = reply
        if not in_transaction:
            self._recover()
        elif logged:
            self._log.append((sql, result.ok))
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
        if self._view is None:
            return
        view, self._view = self._view, None
        self.replicas._release(self._entry, view, self.path, self.wrote)

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def _recover(self) -> None:
        """The transaction was lost (SQLite rolled it back, or its host was killed): begin
        again, on a new view if the old one went with its host, and replay the writes."""
        self.replicas.stats.replays += 1
        if not self.replicas._live(self._view):
            self._view = self.replicas._open_view(self.path, self._view.generation)
        reply = self.replicas._call(self._view, "replay", self._log, time.monotonic())
        if reply is None:
            return
        if isinstance(reply, str):
            self._broken = (
                "this trajectory's earlier writes were lost (SQLite rolled back its "
                f"transaction and {reply})"
            )
            return
        stopped = _stopped(reply, self.replicas.timeout_s, 0.0).error
        self._broken = f"this trajectory's earlier writes were lost (replaying them: {stopped})"
        self._view = self.replicas._open_view(self.path, self._view.generation)
        self.replicas._call(self._view, "begin")


# ---------------------------------------------------------------------- helpers
def _stopped(reply, timeout_s: float, start: float) -> ExecResult:
    """The result of a statement whose host did not answer (see `SqlHost.call`)."""
    if isinstance(reply, Stopped) and reply.timed_out:
        error = f"timeout after {timeout_s:g}s (stopped inside one SQLite call)"
        return ExecResult(ok=False, error=error, timed_out=True, elapsed_s=time.monotonic() - start)
    code = reply.exitcode if isinstance(reply, Stopped) else None
    return _failed(f"the replica host process died (exit code {code})", start)


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
    return hashlib.sha1(text.encode()).hexdigest()[:10]


def _lock_partition(folder: Path) -> int:
    """An exclusive lock on the partition's lock file, or ReplicaError naming the fix."""
    fd = lock_folder(folder)
    if fd is None:
        raise ReplicaError(
            f"{folder} is in use by another process: give each process its own worker number"
        )
    return fd
