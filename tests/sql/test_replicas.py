"""The replica set: trajectories see their own writes and nobody else's, and leave no trace."""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from acesql.errors import DataError, ReplicaError
from acesql.sql.replicas import Replicas, split_statements


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture()
def source(tmp_path) -> Path:
    path = tmp_path / "shop.sqlite"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE item (id INTEGER PRIMARY KEY, name TEXT, price REAL, qty INT)")
    conn.executemany(
        "INSERT INTO item VALUES (?, ?, ?, ?)",
        [(i, f"item{i}", i * 1.5, i % 7) for i in range(1, 2001)],
    )
    conn.commit()
    conn.close()
    return path


@pytest.fixture()
def replicas(tmp_path):
    with Replicas(tmp_path / "replicas", worker=0, max_leases=4, timeout_s=5) as replicas:
        yield replicas


def count(lease, where="1") -> int:
    return lease.execute(f"SELECT COUNT(*) FROM item WHERE {where}").rows[0][0]


def test_a_trajectory_sees_its_own_writes_and_the_release_undoes_them(replicas, source):
    before = sha(source)
    with replicas.lease(source) as db:
        result = db.execute("UPDATE item SET qty = 0 WHERE id <= 10")
        assert result.ok and result.rows_affected == 10
        assert db.execute("DELETE FROM item WHERE id > 1000").rows_affected == 1000
        assert db.execute("CREATE TABLE note (t TEXT)").ok
        assert db.execute("INSERT INTO note VALUES ('x')").rows_affected == 1
        assert count(db) == 1000 and count(db, "qty = 0 AND id <= 10") == 10
        assert db.execute("SELECT t FROM note").rows == [("x",)]
        assert db.wrote
        replica = db.path
        replica_before = sha(replica)
    assert sha(replica) == replica_before  # nothing ever reached the replica's file
    with replicas.lease(source) as db:
        assert db.path == replica  # the same replica, reused
        assert count(db) == 2000 and count(db, "qty = 0") == 2000 // 7
        assert not db.execute("SELECT * FROM note").ok
    assert sha(source) == before
    assert (
        replicas.stats.made == 1
        and replicas.stats.leases == 2
        and replicas.stats.writing_leases == 1
    )


def test_a_replica_is_never_the_source_file(replicas, source):
    with replicas.lease(source) as db:
        assert db.path.resolve() != source.resolve()
        assert replicas.folder in db.path.parents


def test_concurrent_trajectories_with_conflicting_writes_see_only_their_own(replicas, source):
    barrier = threading.Barrier(4)
    seen, errors = {}, []

    def trajectory(k: int) -> None:
        try:
            with replicas.lease(source) as db:
                db.execute(f"UPDATE item SET name = 'mine{k}', qty = {100 + k}")
                db.execute(f"DELETE FROM item WHERE id % 4 = {k}")
                barrier.wait(timeout=10)  # all four hold their writes at once
                names = db.execute("SELECT DISTINCT name, qty FROM item").rows
                barrier.wait(timeout=10)
                seen[k] = (names, count(db), count(db, f"id % 4 = {k}"))
        except Exception as exc:  # noqa: BLE001 - reported below, not lost in the thread
            errors.append(exc)

    threads = [threading.Thread(target=trajectory, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    for k in range(4):
        assert seen[k] == ([(f"mine{k}", 100 + k)], 1500, 0)
    assert replicas.stats.made == 1  # four views of one replica file
    with replicas.lease(source) as db:
        assert count(db) == 2000 and count(db, "name LIKE 'mine%'") == 0


def test_transaction_statements_of_the_model_become_savepoints(replicas, source):
    with replicas.lease(source) as db:
        assert db.execute("BEGIN").ok
        assert not db.execute("BEGIN TRANSACTION").ok  # nested, as SQLite says
        db.execute("DELETE FROM item")
        assert db.execute("ROLLBACK").ok
        assert count(db) == 2000
        assert db.execute("BEGIN; ").ok
        db.execute("DELETE FROM item WHERE id > 10")
        assert db.execute("COMMIT").ok  # commits to the trajectory, not to the file
        assert count(db) == 10
        assert db.execute("/* c */ END").error == "cannot commit - no transaction is active"
        assert db.execute("SAVEPOINT s1").ok
        db.execute("DELETE FROM item")
        assert db.execute("ROLLBACK TO s1").ok and count(db) == 10
        assert not db.execute("RELEASE acesql_user").ok  # reserved names are refused
    with replicas.lease(source) as db:
        assert count(db) == 2000


@pytest.mark.parametrize(
    "sql",
    [
        "ATTACH DATABASE '/tmp/x.sqlite' AS x",
        "PRAGMA journal_mode = DELETE",
        "PRAGMA writable_schema = ON",
        "VACUUM",
        "SELECT load_extension('x')",
        "SELECT readfile('/etc/passwd')",
        "SELECT 1; DELETE FROM item",
        "",
        "  -- nothing\n",
    ],
)
def test_refused_statements_come_back_as_errors(replicas, source, sql):
    with replicas.lease(source) as db:
        result = db.execute(sql)
        assert not result.ok and result.error
        assert count(db) == 2000


def test_read_only_schema_pragmas_and_ddl_work(replicas, source):
    with replicas.lease(source) as db:
        assert [r[1] for r in db.execute("PRAGMA table_info(item)").rows][:2] == ["id", "name"]
        for sql in [
            "ALTER TABLE item ADD COLUMN note TEXT",
            "ALTER TABLE item RENAME COLUMN note TO remark",
            "ALTER TABLE item DROP COLUMN remark",
            "ALTER TABLE item RENAME TO goods",
            "CREATE INDEX goods_qty ON goods(qty)",
            "CREATE VIEW cheap AS SELECT * FROM goods WHERE price < 10",
            "CREATE TEMP TABLE scratch (v)",
            "INSERT INTO scratch SELECT id FROM cheap",
            "CREATE TRIGGER stamp AFTER DELETE ON goods BEGIN UPDATE goods SET qty = -1; END",
            "DELETE FROM goods WHERE id = 1",
        ]:
            result = db.execute(sql)
            assert result.ok, (sql, result.error)
        assert db.execute("SELECT COUNT(*) FROM scratch").rows == [(6,)]
        assert db.execute("SELECT DISTINCT qty FROM goods").rows == [(-1,)]
    with replicas.lease(source) as db:
        tables = db.execute("SELECT name FROM sqlite_master ORDER BY name").rows
        assert tables == [("item",)]
        assert not db.execute("SELECT * FROM scratch").ok


def test_a_timeout_keeps_the_trajectory_state_by_replaying_its_writes(tmp_path, source):
    with Replicas(tmp_path / "r", timeout_s=0.3) as replicas, replicas.lease(source) as db:
        db.execute("BEGIN")
        db.execute("DELETE FROM item WHERE id > 100")
        db.execute("COMMIT")
        db.execute("UPDATE item SET name = 'kept' WHERE id = 1")
        runaway = db.execute(
            "INSERT INTO item (name) SELECT a.name FROM item a, item b, item c, item d"
        )
        assert runaway.timed_out
        assert count(db) == 100  # the earlier writes are back, the runaway's are not
        assert db.execute("SELECT name FROM item WHERE id = 1").rows == [("kept",)]
        assert replicas.stats.replays == 1
        assert db.execute("INSERT INTO item (name) VALUES ('after')").ok and count(db) == 101


def test_script_runs_statement_by_statement_and_stops_at_the_first_error(replicas, source):
    with replicas.lease(source) as db:
        results = db.execute_script(
            "UPDATE item SET name = 'a;b' WHERE id = 1; SELECT name FROM item WHERE id = 1;"
            " SELECT nope FROM item; DELETE FROM item;"
        )
        assert [r.ok for r in results] == [True, True, False]
        assert results[1].rows == [("a;b",)] and count(db) == 2000


def test_split_statements_keeps_strings_comments_and_trigger_bodies():
    script = (
        "CREATE TRIGGER t AFTER INSERT ON a BEGIN UPDATE a SET x = 1; DELETE FROM b; END;\n"
        "-- a comment; with a semicolon\nSELECT ';' /* ; */;\n;\n  SELECT 2"
    )
    assert split_statements(script) == [
        "CREATE TRIGGER t AFTER INSERT ON a BEGIN UPDATE a SET x = 1; DELETE FROM b; END;",
        "-- a comment; with a semicolon\nSELECT ';' /* ; */;",
        "SELECT 2",
    ]


def test_leases_wait_for_a_free_replica_and_time_out_with_the_fix(tmp_path, source):
    with Replicas(tmp_path / "r", max_leases=1, wait_s=0.2) as replicas:
        first = replicas.lease(source)
        with pytest.raises(ReplicaError, match="raise max_leases"):
            replicas.lease(source)
        threading.Timer(0.1, first.release).start()
        replicas.wait_s = 5
        with replicas.lease(source) as db:
            assert count(db) == 2000
        assert replicas.stats.waits == 1 and replicas.stats.made == 1


def test_a_released_lease_refuses_to_run(replicas, source):
    db = replicas.lease(source)
    db.release()
    db.release()
    with pytest.raises(ReplicaError, match="lease the database again"):
        db.execute("SELECT 1")


def test_missing_or_non_database_sources_are_data_errors(replicas, tmp_path):
    with pytest.raises(DataError, match="database not found"):
        replicas.lease(tmp_path / "nope.sqlite")
    junk = tmp_path / "junk.sqlite"
    junk.write_text("not a database")
    with pytest.raises(DataError, match="cannot copy database"):
        replicas.lease(junk)
    assert not list((replicas.folder).rglob("*.sqlite"))


def test_a_second_process_cannot_take_the_same_partition(tmp_path, source):
    with Replicas(tmp_path / "r", worker=3):
        code = textwrap.dedent(
            f"""
            from acesql.sql.replicas import Replicas
            from acesql.errors import ReplicaError
            try:
                Replicas({str(tmp_path / "r")!r}, worker=3)
            except ReplicaError as exc:
                print("refused:", exc)
            Replicas({str(tmp_path / "r")!r}, worker=4).close()
            """
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert "refused:" in out.stdout and "worker number" in out.stdout, out.stderr


def test_a_changed_source_gets_new_replicas(replicas, source):
    with replicas.lease(source) as db:
        assert count(db) == 2000
    conn = sqlite3.connect(source)
    conn.execute("DELETE FROM item WHERE id > 5")
    conn.commit()
    conn.close()
    with replicas.lease(source) as db:
        assert count(db) == 5
    assert replicas.stats.made == 2


def test_a_replica_dirtied_behind_the_sets_back_is_made_again(tmp_path, source):
    root = tmp_path / "r"
    with Replicas(root) as replicas, replicas.lease(source) as db:
        replica = db.path
    conn = sqlite3.connect(replica)  # as a crashed committing writer would leave it
    conn.execute("DELETE FROM item")
    conn.commit()
    conn.close()
    with Replicas(root) as replicas, replicas.lease(source) as db:
        assert count(db) == 2000 and replicas.stats.made == 1


def test_a_killed_trajectory_leaves_its_replica_clean(tmp_path, source):
    root = tmp_path / "r"
    code = textwrap.dedent(
        f"""
        import os, signal, sys
        from acesql.sql.replicas import Replicas
        replicas = Replicas({str(root)!r})
        db = replicas.lease({str(source)!r})
        db.execute("DELETE FROM item WHERE id > 3")
        db.execute("UPDATE item SET name = 'dead'")
        print(db.path, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == -signal.SIGKILL, out.stderr
    replica = Path(out.stdout.strip())
    assert replica.exists() and not Path(f"{replica}-journal").exists()
    with Replicas(root) as replicas, replicas.lease(source) as db:
        assert db.path == replica and replicas.stats.made == 0  # reused as it is: still clean
        assert count(db) == 2000 and count(db, "name = 'dead'") == 0


def test_a_wal_mode_source_is_copied_with_its_log(tmp_path):
    source = tmp_path / "wal.sqlite"
    writer = sqlite3.connect(source)
    writer.execute("PRAGMA journal_mode = WAL")
    writer.execute("PRAGMA wal_autocheckpoint = 0")
    writer.execute("CREATE TABLE t (v)")
    writer.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(50)])
    writer.commit()  # in the -wal file only: no checkpoint, the writer stays open
    assert os.path.getsize(f"{source}-wal") > 0
    with Replicas(tmp_path / "r") as replicas, replicas.lease(source) as db:
        assert db.execute("SELECT COUNT(*) FROM t").rows == [(50,)]
        assert db.execute("PRAGMA table_info(t)").ok
    writer.close()


def test_large_uncommitted_writes_never_reach_the_file(replicas, source):
    with replicas.lease(source) as db:
        replica = db.path
        before = sha(replica)
        for _ in range(3):  # about 25 MB of dirty pages, past the page cache's size
            assert db.execute(
                "INSERT INTO item (name) SELECT name || hex(randomblob(900)) FROM item"
            ).ok
        assert count(db) == 16000
        assert sha(replica) == before and not Path(f"{replica}-journal").exists()
    with replicas.lease(source) as db:
        assert count(db) == 2000


def test_a_replica_changed_while_in_use_is_retired_at_release(replicas, source):
    with replicas.lease(source) as db:
        first = db.path
        conn = sqlite3.connect(first)  # someone else commits to the replica file
        conn.execute("DELETE FROM item")
        conn.commit()
        conn.close()
    assert not first.exists()
    with replicas.lease(source) as db:
        assert db.path != first and count(db) == 2000
    assert replicas.stats.made == 2


def test_a_replayed_trajectory_has_the_state_of_a_copy_after_a_partial_failure(tmp_path):
    """INSERT OR FAIL keeps the rows it inserted before the failure, on a copy too."""
    source = tmp_path / "t.sqlite"
    conn = sqlite3.connect(source)
    conn.execute("CREATE TABLE t (v INTEGER PRIMARY KEY)")
    conn.commit()
    conn.close()
    statements = ["INSERT OR FAIL INTO t VALUES (1), (2), (2)", "INSERT INTO t VALUES (10)"]
    endless = (
        "INSERT INTO t WITH RECURSIVE c(x) AS (SELECT 100 UNION ALL SELECT x + 1 FROM c) "
        "SELECT x FROM c"
    )
    copy = tmp_path / "copy.sqlite"
    copy.write_bytes(source.read_bytes())
    on_copy = sqlite3.connect(copy, isolation_level=None)
    for sql in statements:
        with contextlib.suppress(sqlite3.IntegrityError):
            on_copy.execute(sql)
    want = on_copy.execute("SELECT v FROM t ORDER BY v").fetchall()
    on_copy.close()
    assert want == [(1,), (2,), (10,)]
    with Replicas(tmp_path / "r", timeout_s=0.3) as replicas, replicas.lease(source) as db:
        assert [db.execute(sql).ok for sql in statements] == [False, True]
        assert db.execute(endless).timed_out  # SQLite rolls the transaction back: a replay
        assert db.execute("SELECT v FROM t ORDER BY v").rows == want
        assert replicas.stats.replays == 1


def test_a_lease_starts_with_its_connections_counters_at_zero(replicas, source):
    counters = "SELECT changes(), total_changes(), last_insert_rowid()"
    with replicas.lease(source) as db:
        assert db.execute("INSERT INTO item (name) VALUES ('x')").ok
        assert db.execute("UPDATE item SET qty = 1 WHERE id < 5").ok
        assert db.execute(counters).rows == [(4, 5, 2001)]
    with replicas.lease(source) as db:  # the same view, kept for its cache of pages
        assert db.execute(counters).rows == [(0, 0, 0)]
        assert db.execute("DELETE FROM item WHERE id > 1998").ok
        assert db.execute(counters).rows == [(2, 2, 0)]
    with replicas.lease(source) as db:
        assert db.execute(counters).rows == [(0, 0, 0)]
        assert db.execute("SELECT count(*) FROM sqlite_temp_master").rows == [(0,)]
    assert replicas.stats.made == 1


ENDLESS_BLOBS = (
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
    "SELECT randomblob(30000) FROM c"
)


@pytest.mark.parametrize(
    "sql",
    [f"INSERT INTO item (name) {ENDLESS_BLOBS}", f"CREATE TEMP TABLE big AS {ENDLESS_BLOBS}"],
    ids=["main", "temp"],
)
def test_a_trajectorys_writes_cannot_grow_its_replica_without_bound(tmp_path, source, sql):
    with Replicas(tmp_path / "r", timeout_s=2) as replicas, replicas.lease(source) as db:
        result = db.execute(sql)
        assert not result.ok and not result.timed_out and result.elapsed_s < 1.5
        assert "may grow this database by 64 MiB" in result.error
        assert count(db) == 2000 and db.execute("INSERT INTO item (name) VALUES ('y')").ok
