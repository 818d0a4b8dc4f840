"""The sandbox: results as data, a real deadline, caps, and database files never modified."""

import hashlib
import json
import math
import os
import shutil
import sqlite3
import sys
import threading
import time
import tracemalloc
from pathlib import Path

import pytest

from acesql.errors import ConfigError
from acesql.sql.sandbox import (
    ALLOWED_FUNCTIONS,
    REFUSED_FUNCTIONS,
    _authorize,
    execute,
    open_sandboxed,
    run_with_deadline,
)

RUNAWAY_CTE = (
    "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT count(*) FROM r"
)

HOSTILE = [
    "INSERT INTO student (StudentID, name) VALUES (999, 'x')",
    "UPDATE student SET age = 0",
    "DELETE FROM student",
    "DROP TABLE student",
    "CREATE TABLE t (a)",
    "CREATE TEMP TABLE t (a)",
    "CREATE INDEX i ON student(age)",
    "CREATE VIEW v AS SELECT 1",
    "CREATE TRIGGER tr AFTER INSERT ON student BEGIN SELECT 1; END",
    "ALTER TABLE student ADD COLUMN z",
    "ALTER TABLE student RENAME TO pupils",
    "ATTACH DATABASE ':memory:' AS other",
    "ATTACH DATABASE '/tmp/acesql-attack.db' AS other",
    "DETACH DATABASE main",
    "PRAGMA query_only = OFF",
    "PRAGMA user_version = 7",
    "PRAGMA journal_mode = DELETE",
    "PRAGMA writable_schema = ON",
    "VACUUM",
    "VACUUM INTO '/tmp/acesql-vacuum-copy.db'",
    "REINDEX",
    "ANALYZE",
    "SELECT load_extension('/tmp/nothing.so')",
    "BEGIN; DELETE FROM student; COMMIT",
    "SELECT 1; DROP TABLE student",
    "SELECT 1; PRAGMA query_only = OFF; DELETE FROM student",
    "WITH x AS (SELECT 1) DELETE FROM student",
    "WITH x AS (SELECT 1) INSERT INTO student (StudentID) SELECT 1000",
    "REPLACE INTO student (StudentID, name) VALUES (1, 'y')",
    "INSERT OR REPLACE INTO student (StudentID) VALUES (1)",
    "SAVEPOINT a",
    "SELECT writefile('/tmp/acesql-x', 'data')",
    "/* comment */ DELETE FROM student",
    "(DELETE FROM student)",
    # a pointer into libsqlite3; with two arguments, a pointer that a later MATCH calls
    "SELECT fts3_tokenizer('simple')",
    "SELECT fts3_tokenizer('simple', x'4141414141414141')",
    "SELECT hex(fts3_tokenizer('porter'))",
    "SELECT fts5(NULL)",
    "SELECT sqlite_log(1, 'x')",
    "SELECT rtreenode(2, zeroblob(64))",
    "SELECT sqlite_compileoption_get(0)",
    "SELECT readfile('/etc/passwd')",
    # table-valued functions: refused as the module doc says
    "SELECT * FROM json_each('[1, 2]')",
    "SELECT * FROM pragma_table_info('student')",
    "SELECT * FROM pragma_database_list",
    "SELECT * FROM dbstat",
    # 80 MB in one row, over the 64 MB default cap: refused inside SQLite
    "SELECT " + ", ".join(["zeroblob(5000000)"] * 16),
]


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_select_returns_rows(school_db):
    result = execute(school_db, "SELECT StudentID, name FROM student ORDER BY StudentID LIMIT 2")
    assert result.ok and not result.timed_out and not result.truncated
    assert result.columns == ["StudentID", "name"]
    assert [r[0] for r in result.rows] == [1, 2]
    assert result.error is None and result.elapsed_s >= 0


@pytest.mark.parametrize(
    "sql, fragment",
    [
        ("SELECT name FROM student WHERE", "incomplete input"),
        ("SELECT name FROM student WHERE WHERE", "syntax error"),
        ("SELEC name FROM student", "only SELECT"),
        ("SELECT nope FROM student", "no such column"),
        ("SELECT name FROM nowhere", "no such table"),
        ("", "empty SQL"),
        ("-- only a comment", "empty SQL"),
        ("SELECT 1; SELECT 2", "one SQL statement"),
        (None, "must be a string"),
        ("SELECT 'a\x00b'", "NUL"),
    ],
)
def test_bad_sql_comes_back_as_data(school_db, sql, fragment):
    result = execute(school_db, sql)
    assert not result.ok and not result.timed_out
    assert fragment in result.error


def test_missing_database_is_an_error_not_a_new_file(tmp_path):
    missing = tmp_path / "nothing.sqlite"
    result = execute(missing, "SELECT 1")
    assert not result.ok and "cannot open database" in result.error
    assert not missing.exists()


def test_hostile_statements_change_nothing(school_db, tmp_path):
    db = tmp_path / "copy.sqlite"
    shutil.copy(school_db, db)
    before = _digest(db)
    for sql in HOSTILE:
        result = execute(db, sql, timeout_s=2)
        assert not result.ok, f"{sql!r} was allowed"
    assert _digest(db) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy.sqlite"]  # no journal, no WAL
    for leftover in ("/tmp/acesql-vacuum-copy.db", "/tmp/acesql-attack.db", "/tmp/acesql-x"):
        assert not __import__("os").path.exists(leftover), leftover
    check = sqlite3.connect(db)
    assert check.execute("SELECT count(*) FROM student").fetchone() == (60,)
    check.close()


def test_hostile_statements_on_a_cached_connection(school_db, tmp_path):
    db = tmp_path / "copy.sqlite"
    shutil.copy(school_db, db)
    before = _digest(db)
    conn = open_sandboxed(db)
    for sql in HOSTILE:
        assert not execute(conn, sql, timeout_s=2).ok, sql
    assert execute(conn, "SELECT count(*) FROM student").rows == [(60,)]
    conn.close()
    assert _digest(db) == before


@pytest.mark.parametrize(
    "sql",
    [
        RUNAWAY_CTE,
        "SELECT count(*) FROM student a, student b, student c, student d, student e",
        "WITH RECURSIVE r(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM r) SELECT x FROM r",
    ],
    ids=["recursive-cte", "cross-join", "endless-rows"],
)
def test_runaway_query_is_interrupted_on_time(school_db, sql):
    timeout = 0.5
    start = time.monotonic()
    result = execute(school_db, sql, timeout_s=timeout, max_rows=10**9, max_bytes=10**12)
    wall = time.monotonic() - start
    if result.ok:  # the endless-rows query may hit the byte/row caps first
        assert result.truncated
        return
    assert result.timed_out and "timeout" in result.error
    assert timeout <= result.elapsed_s < timeout + 0.2
    assert wall < timeout + 0.2


def test_interrupted_connection_is_reusable(school_db):
    conn = open_sandboxed(school_db)
    assert execute(conn, RUNAWAY_CTE, timeout_s=0.2).timed_out
    assert execute(conn, "SELECT count(*) FROM course").rows == [(15,)]
    conn.close()


def test_row_cap(school_db):
    result = execute(school_db, "SELECT * FROM student", max_rows=7)
    assert result.ok and result.truncated and len(result.rows) == 7


def test_byte_cap(school_db):
    sql = RUNAWAY_CTE.replace("count(*)", "printf('%0500d', x)")
    result = execute(school_db, sql, timeout_s=5, max_rows=10**9, max_bytes=100_000)
    assert result.ok and result.truncated
    assert 100 <= len(result.rows) <= 200


def test_huge_single_value_is_refused(school_db):
    result = execute(school_db, "SELECT zeroblob(200000000)", max_bytes=1_000_000)
    assert not result.ok and "too big" in result.error


def test_invalid_utf8_text_is_read_leniently(tmp_path):
    db = tmp_path / "latin1.sqlite"
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE t (name TEXT)")
    conn.execute(
        "INSERT INTO t VALUES (CAST(X'43616665E9' AS TEXT))"
    )  # "Cafe" and a stray Latin-1 byte
    conn.commit()
    conn.close()
    result = execute(db, "SELECT name FROM t")
    assert result.ok and result.rows == [("Cafe\ufffd",)]
    from acesql.sql.schema import Schema

    assert Schema.from_sqlite(db).column("t.name").samples == ("Cafe\ufffd",)


def _sqlite_functions() -> set[str]:
    conn = sqlite3.connect(":memory:")
    try:
        return {r[0] for r in conn.execute("SELECT name FROM pragma_function_list")}
    finally:
        conn.close()


def test_every_function_of_this_sqlite_is_reviewed():
    """A function a newer SQLite adds is refused until someone puts it in one list or the other."""
    assert not ALLOWED_FUNCTIONS & set(REFUSED_FUNCTIONS)
    unreviewed = _sqlite_functions() - ALLOWED_FUNCTIONS - set(REFUSED_FUNCTIONS)
    assert not unreviewed, f"review these and add them to one list: {sorted(unreviewed)}"


def test_the_authorizer_follows_the_allow_list():
    for name in _sqlite_functions() | set(REFUSED_FUNCTIONS) | {"made_up", "regexp"}:
        allowed = _authorize(sqlite3.SQLITE_FUNCTION, None, name, None, None) == sqlite3.SQLITE_OK
        assert allowed is (name in ALLOWED_FUNCTIONS), name
    for risky in ("load_extension", "fts3_tokenizer", "fts5", "readfile", "writefile"):
        assert risky in REFUSED_FUNCTIONS and risky not in ALLOWED_FUNCTIONS


def test_allowed_functions_run(school_db):
    sql = (
        "SELECT abs(-2), lower(name), round(2.5), substr(name, 1, 2), date('2020-01-31'), "
        "strftime('%Y', '2020-01-31'), json_extract('{\"a\": 1}', '$.a'), '{\"a\": 2}' ->> 'a', "
        "sqrt(16), iif(age > 0, 'y', 'n'), coalesce(NULL, 1), typeof(age), printf('%05d', 7), "
        "row_number() OVER (ORDER BY StudentID), cast(count(*) OVER () AS TEXT) "
        "FROM student WHERE name LIKE '%' AND name GLOB '*' ORDER BY StudentID LIMIT 1"
    )
    result = execute(school_db, sql)
    assert result.ok, result.error
    assert result.rows[0][0] == 2 and result.rows[0][6:9] == (1, 2, 4.0)
    group = execute(
        school_db, "SELECT count(*), max(age), avg(age), group_concat(name) FROM student"
    )
    assert group.ok and group.rows[0][0] == 60


def test_fts3_tokenizer_is_refused(school_db):
    for sql in ("SELECT fts3_tokenizer('simple')", "SELECT fts3_tokenizer('simple', x'00')"):
        result = execute(school_db, sql)
        assert not result.ok and "not authorized" in result.error


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM json_each('[1, 2]')",
        "SELECT key FROM json_tree('{}')",
        "SELECT name FROM pragma_table_info('student')",
        "SELECT * FROM pragma_database_list",
    ],
)
def test_table_valued_functions_are_refused_as_documented(school_db, sql):
    conn = open_sandboxed(school_db)
    for _ in range(2):  # and again on the same connection
        result = execute(conn, sql)
        assert not result.ok
        assert "not authorized" in result.error or "vtable constructor failed" in result.error
    conn.close()
    doc = sys.modules[execute.__module__].__doc__
    assert "json_each" in doc and "pragma_table_info" in doc and "refused too" in doc


def test_a_row_is_bounded_before_it_is_fetched(school_db):
    """16 values of 4 MB under an 8 MB cap: SQLite refuses them, Python never holds 64 MB."""
    sql = "SELECT " + ", ".join(["zeroblob(4000000)"] * 16)
    tracemalloc.start()
    try:
        result = execute(school_db, sql, max_bytes=8_000_000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert not result.ok and "too big" in result.error
    assert peak < 8_000_000


@pytest.mark.parametrize("value", ["x + 0.5", "'v' || x"], ids=["floats", "short-strings"])
def test_the_byte_cap_bounds_the_memory_a_wide_result_takes(school_db, value):
    """2,000 small values a row: Python spends far more on them than their characters."""
    cols = ", ".join(f"{value} AS c{i}" for i in range(2000))
    sql = f"WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) SELECT {cols} FROM n"
    tracemalloc.start()
    try:
        result = execute(school_db, sql, timeout_s=30, max_bytes=8_000_000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.ok and result.truncated and len(result.rows) >= 30
    assert peak < 8_000_000 * 1.25


def test_rows_within_the_bound_still_come_back(school_db):
    wide = "SELECT " + ", ".join(["printf('%.1000c', 'x')"] * 16) + " FROM student LIMIT 3"
    result = execute(school_db, wide, max_bytes=100_000)
    assert result.ok and len(result.rows) == 3 and len(result.rows[0][15]) == 1000
    union = "SELECT zeroblob(30000), 1 UNION ALL SELECT zeroblob(30000), 2"
    assert execute(school_db, union, max_bytes=100_000).ok
    assert not execute(school_db, union.replace("30000", "60000"), max_bytes=100_000).ok


@pytest.mark.parametrize("timeout", [math.nan, math.inf, -math.inf, 0, -1, "soon", None])
def test_a_timeout_must_be_finite_and_positive(school_db, timeout):
    with pytest.raises(ConfigError, match="finite number of seconds > 0"):
        execute(school_db, "SELECT 1", timeout_s=timeout)
    conn = open_sandboxed(school_db)
    with pytest.raises(ConfigError):
        run_with_deadline(conn, "SELECT 1", time.monotonic(), timeout, 10, 10_000)
    conn.close()


def test_a_fifo_is_refused_at_once(tmp_path):
    fifo = tmp_path / "db.sqlite"
    os.mkfifo(fifo)
    box = []
    worker = threading.Thread(target=lambda: box.append(execute(fifo, "SELECT 1")), daemon=True)
    worker.start()
    worker.join(5)
    if worker.is_alive():  # unblock the open() that hangs, then fail
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("opening a FIFO hung")
    assert not box[0].ok and "not a regular file" in box[0].error


def _wal_db(path):
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE t (a)")
    conn.execute("INSERT INTO t VALUES (1), (2)")
    conn.commit()
    return conn


def test_a_wal_database_is_read_without_side_files(tmp_path):
    from acesql.sql.schema import Schema

    db = tmp_path / "wal.sqlite"
    _wal_db(db).close()  # the last connection checkpoints and removes -wal and -shm
    assert [p.name for p in tmp_path.iterdir()] == ["wal.sqlite"]
    assert execute(db, "SELECT count(*) FROM t").rows == [(2,)]
    conn = open_sandboxed(db)
    assert execute(conn, "SELECT sum(a) FROM t").rows == [(3,)]
    conn.close()
    assert Schema.from_sqlite(db).column("t.a") is not None
    assert [p.name for p in tmp_path.iterdir()] == ["wal.sqlite"]


def test_a_wal_database_in_use_shows_its_latest_rows(tmp_path):
    db = tmp_path / "wal.sqlite"
    writer = _wal_db(db)  # stays open: rows in the -wal file, not yet in the database file
    writer.execute("INSERT INTO t VALUES (3)")
    writer.commit()
    assert execute(db, "SELECT count(*) FROM t").rows == [(3,)]
    writer.close()


def test_a_wal_log_left_without_its_shm_is_read_and_no_shm_is_left(tmp_path):
    import subprocess
    import sys

    from acesql.sql.schema import Schema

    db = tmp_path / "wal.sqlite"
    crashed_writer = (  # commits into the -wal file and dies before any checkpoint
        "import os, sqlite3; c = sqlite3.connect(os.environ['DB']); "
        "c.execute('PRAGMA journal_mode = WAL'); c.execute('PRAGMA wal_autocheckpoint = 0'); "
        "c.execute('CREATE TABLE t (a)'); c.execute('INSERT INTO t VALUES (1), (2)'); "
        "c.commit(); os._exit(0)"
    )
    subprocess.run([sys.executable, "-c", crashed_writer], env={"DB": str(db)}, check=True)
    Path(f"{db}-shm").unlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wal.sqlite", "wal.sqlite-wal"]
    assert execute(db, "SELECT count(*) FROM t").rows == [(2,)]
    conn = open_sandboxed(db)
    assert execute(conn, "SELECT sum(a) FROM t").rows == [(3,)]
    conn.close()
    assert Schema.from_sqlite(db).column("t.a") is not None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["wal.sqlite", "wal.sqlite-wal"]


def test_result_values_are_valid_and_distinct_json(school_db):
    sql = "SELECT 1e999, -1e999, X'4142', 'b''AB''', NULL, 1.5, 'x', 7"
    result = execute(school_db, sql)
    assert result.ok
    row = result.to_dict()["rows"][0]
    assert row == [{"real": "inf"}, {"real": "-inf"}, {"blob": "4142"}, "b'AB'", None, 1.5, "x", 7]
    json.dumps(result.to_dict(), allow_nan=False)
