"""Runs docs/reliability.md's table: every row's command, its exit status and its message."""

import importlib
import os
import re
import shlex
import shutil
import sqlite3
import sys
import tempfile
from pathlib import Path

import pytest

from acesql.cli import main as acesql_main

TABLE = Path(__file__).resolve().parents[2] / "docs" / "reliability.md"


def _sqlite_file(*statements: str) -> bytes:
    """The bytes of a SQLite file made by `statements`."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "db.sqlite"
        conn = sqlite3.connect(path)
        for sql in statements:
            conn.execute(sql)
        conn.commit()
        conn.close()
        return path.read_bytes()


def _crashed_wal_writer() -> tuple[bytes, bytes]:
    """A WAL-mode database and its -wal file, as a writer that died before any checkpoint
    leaves them (its committed rows in the -wal only), without the -shm file."""
    import subprocess

    with tempfile.TemporaryDirectory() as folder:
        db = Path(folder) / "db.sqlite"
        writer = (
            "import os, sqlite3; c = sqlite3.connect(os.environ['DB']); "
            "c.execute('PRAGMA journal_mode = WAL'); c.execute('PRAGMA wal_autocheckpoint = 0'); "
            "c.execute('CREATE TABLE t (a)'); c.execute('INSERT INTO t VALUES (1), (2)'); "
            "c.commit(); os._exit(0)"
        )
        subprocess.run([sys.executable, "-c", writer], env={"DB": str(db)}, check=True)
        return db.read_bytes(), Path(f"{db}-wal").read_bytes()


CRASHED_WAL = _crashed_wal_writer()

# the bad files the table's first column names, as the test writes them
FILES = {
    "bad-utf8.jsonl": b'{"index": 0, "sql": "SELECT \xff"}\n',
    "bad-line.jsonl": b'{"index": 0, "sql": "SELECT 1"}\nnot json\n',
    "other-db.json": b'{"0": "SELECT 1\\t----- bird -----\\tno_such_db"}',
    "no-separator.json": b'{"0": "SELECT 1"}',
    "float-index.jsonl": b'{"index": 0.9, "sql": "SELECT 1"}\n',
    "twice.yaml": b"base:\n  seed: 1\n  seed: 2\ndata: {}\n",
    "typo.yaml": b"base: {}\ndat: {}\n",
    "empty-section.yaml": b"base: {}\ndata:\n",
    "no-data.yaml": b"base: {}\n",
    "bool.yaml": b"base: {}\ndata: {synth: {n_databases: true}}\n",
    "fractions.yaml": b"base: {}\ndata: {synth: {dev_fraction: 0.7, ood_fraction: 0.6}}\n",
    "labels.yaml": b"base: {}\ndata: {filtering: {complexities: [ultra]}}\n",
    "bomb.yaml": b"base: {}\ndata:\n  synth:\n    dev_fraction:\n"
    + b"      - &a0 [0, 0, 0, 0, 0, 0, 0, 0, 0, 0]\n"
    + b"".join(
        b"      - &a%d [" % i + b", ".join([b"*a%d" % (i - 1)] * 10) + b"]\n" for i in range(1, 9)
    ),
    "one-prediction.jsonl": b'{"index": 0, "sql": "SELECT 1"}\n',
    "twice-keyed.json": b'{"0": "SELECT 1\\t----- bird -----\\tdb", '
    b'"00": "SELECT 2\\t----- bird -----\\tdb"}',
    "list-metrics/metrics.json": b"[]",
    "db-id-5/dev.json": b'[{"db_id": 5, "question": "How many?", "query": "SELECT 1"}]',
    "db-id-5/tables.json": b"[]",
    "tables-object/dev.json": b'[{"db_id": "db", "question": "How many?", "query": "SELECT 1"}]',
    "tables-object/tables.json": b'{"db": {"db_id": "db"}}',
    "tasks-list.jsonl": b"[1]\n",
    "critic-db-5.jsonl": b'{"selected_database": 5, "sol_sql": ["SELECT 1"]}\n',
    "schema-edges.sqlite": _sqlite_file(
        'CREATE TABLE t ("select" INT, "a.b" INT, g INT AS ("select" + 1))',
        'CREATE TABLE "t.a" (b INT)',
    ),
    "crashed.sqlite": CRASHED_WAL[0],
    "crashed.sqlite-wal": CRASHED_WAL[1],
    "judge-tasks.jsonl": b'{"task_id": "t", "db_id": "school", "db_path": "db.sqlite", '
    b'"category": "management", "issue": "remove the students over 40", '
    b'"issue_sql": ["DELETE FROM student"], '
    b'"solution_sql": ["DELETE FROM student WHERE age > 40"]}\n',
}


def _rows() -> list[tuple[str, str, int, str]]:
    """(bad input, command, exit status, expected text) for each row of the table."""
    section = TABLE.read_text()
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if not line.startswith("| ") or len(cells) != 3 or cells[1] == "Try it":
            continue
        command = re.fullmatch(r"`([^`]+)`", cells[1])
        outcome = re.search(r"exit (\d+), `(.+)`$", cells[2])
        assert command and outcome, f"reliability row not in the expected form: {line}"
        rows.append((cells[0], command.group(1), int(outcome.group(1)), outcome.group(2)))
    return rows


ROWS = _rows()


def test_the_table_is_there_and_uses_every_bad_file():
    assert len(ROWS) >= 20
    named = " ".join(bad + " " + command for bad, command, _, _ in ROWS)
    assert [name for name in FILES if name.split("/")[0] not in named] == []


@pytest.fixture(scope="module")
def folder(tmp_path_factory, sample_dir, school_db):
    root = tmp_path_factory.mktemp("reliability")
    shutil.copy(school_db, root / "db.sqlite")
    shutil.copytree(sample_dir, root / "spider")
    os.mkfifo(root / "fifo.sqlite")
    for name, data in FILES.items():
        (root / name).parent.mkdir(exist_ok=True)
        (root / name).write_bytes(data)
    return root


@pytest.mark.parametrize("bad,command,status,expected", ROWS, ids=[r[0] for r in ROWS])
def test_reliability_row(folder, monkeypatch, capsys, bad, command, status, expected):
    monkeypatch.chdir(folder)
    db_before = (folder / "db.sqlite").read_bytes()
    argv = shlex.split(command)
    if argv[0] == "acesql":  # the console script's entry point, as a user runs it
        monkeypatch.setattr(sys, "argv", argv)
        code = _exit_status(acesql_main)
    else:
        assert argv[:2] == ["python", "-m"], command
        main = importlib.import_module(argv[2]).main
        code = _exit_status(lambda: main(argv[3:]))
    captured = capsys.readouterr()
    output = captured.out + captured.err
    assert code == status, output
    assert expected in output, output
    assert "Traceback" not in output
    assert (folder / "db.sqlite").read_bytes() == db_before
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        {"db.sqlite", "spider", "fifo.sqlite", *(name.split("/")[0] for name in FILES)}
    )


def _exit_status(run) -> int:
    try:
        run()
    except SystemExit as exc:
        return exc.code or 0
    return 0
